"""Normalization keeps original line numbers while removing the noise pasted logs carry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from service.diagnosis import normalize
from service.diagnosis.normalize import (
    _LITERAL_STEPS,
    Document,
    _clean_once,
    _triggered,
    clean_text,
    decode_bytes,
    is_prose,
    is_record,
    split_prefixes,
)
from service.errors import BinaryLogError
from service.packs.compiled import LineFinder


def test_process_logger_and_container_prefixes_are_stripped() -> None:
    raw = "vllm-1  | (EngineCore_DP0 pid=412) ERROR 05-12 10:11:12 [core.py:700] EngineCore failed to start."
    assert split_prefixes(raw) == ("EngineCore_DP0 pid=412", "ERROR", "EngineCore failed to start.")


def test_every_known_process_tag_becomes_the_source() -> None:
    for tag in (
        "Worker_TP1 pid=77",
        "RayWorkerWrapper pid=206994, ip=192.168.10.25",
        "APIServer pid=1",
        "VllmWorker rank=5 pid=3073",
        "VllmWorkerProcess pid=9",
    ):
        assert split_prefixes(f"({tag}) INFO 01-02 03:04:05 gpu_executor.py:117] hello") == (
            tag,
            "INFO",
            "hello",
        )


def test_iso_timestamps_rank_tags_and_uvicorn_levels_are_stripped() -> None:
    assert split_prefixes("2025-12-13T19:54:35.123Z [rank0]: torch.OutOfMemoryError: x")[2] == (
        "torch.OutOfMemoryError: x"
    )
    assert split_prefixes("INFO:     Application startup complete.") == (
        "",
        "INFO",
        "Application startup complete.",
    )


def test_ansi_colours_crlf_and_slack_escaping_are_removed_without_moving_lines() -> None:
    raw = (
        "```\r\n\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO &lt;start&gt;\r\n"
        "see <https://docs.vllm.ai|the docs> &amp; go\r\n```"
    )
    doc = Document(raw)
    assert len(doc) == 4
    assert doc.line(2).text == "INFO <start>"
    assert doc.line(2).source == "APIServer pid=1"
    assert doc.line(3).text == "see the docs & go"


def test_ansi_remnants_without_escape_character_are_removed() -> None:
    assert clean_text("[1;36m(EngineCore_DP0 pid=1)[0;0m text") == "(EngineCore_DP0 pid=1) text"


def test_invalid_utf8_is_decoded_with_replacement() -> None:
    assert decode_bytes(b"ok \xff\xfe bytes") == "ok \ufffd\ufffd bytes"


# What decode_bytes counts as neither text nor whitespace, written as characters of the decoded text.
_NOT_TEXT = re.compile("[\ufffd\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [b"a", b"\n", b"\t", b"\x00", b"\x1b", b"\x1a", b"\xff", b"\xe6\x98", b"\xe6\x98\xbe", b"\x7f"]
        ),
        max_size=60,
    )
)
def test_a_body_is_refused_as_binary_by_the_share_its_decoded_characters_have(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    head = data.decode("utf-8", errors="replace")
    share = len(_NOT_TEXT.findall(head)) / len(head) if head else 0.0
    try:
        decoded = decode_bytes(data)
    except BinaryLogError as exc:
        assert share > 0.3 and f"of its first {len(head):,} characters" in str(exc)
    else:
        assert share <= 0.3 and decoded == head


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=255))
def test_the_control_count_is_every_byte_that_is_neither_text_nor_whitespace(data: bytes, byte: int) -> None:
    body = b"log line " * 40 + data + bytes([byte])
    expected = sum(1 for b in body if b < 0x20 and b not in b"\t\n\x0b\x0c\r\x1b" or b == 0x7F)
    assert normalize._controls(body) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(("\x07", "\x00", "\x7f", "\x0b", "\t", "\r", "\n", "\ud800", "é", "❱"))
        | st.text(max_size=6)
    ).map("".join)
)
def test_control_characters_are_deleted_as_the_control_pattern_deletes_them(text: str) -> None:
    assert normalize._without_controls(text) == normalize._CONTROL.sub("", text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            (
                "│ /x/vllm/worker/worker.py:123 in load_model │",
                'File "x.py", line 12 in f',
                "    load_model (vllm/worker/worker.py:123)",
                "vllm/worker/worker.py:123: in load_model",
                "~/x/vllm/worker/worker.py in load_model(self)",
                "---> 12 x()",
                "│ ❱ 123 │   │   self.model_runner.load_model()   │",
                " in f(",
                ".py:1)",
                "\n",
            )
        )
        | st.text(max_size=6)
    ).map("".join)
)
def test_each_frame_dialect_trigger_finds_the_lines_their_alternation_finds(text: str) -> None:
    alternation = re.compile("|".join(normalize._DIALECT_TRIGGERS))
    pieces, done = [], 0
    for words in alternation.finditer(text):  # the one-pass form the triggers replaced
        start = text.rfind("\n", 0, words.start()) + 1
        if start < done:
            continue
        end = text.find("\n", words.end())
        end = len(text) if end < 0 else end
        rewritten = normalize._dialect_line(text, start, end)
        if rewritten is not None:
            pieces += [text[done:start], rewritten]
            done = end
    expected = "".join([*pieces, text[done:]]) if pieces else text
    assert normalize._dialect_frames(text) == expected


def test_tabs_become_spaces() -> None:
    assert clean_text("a\tb") == "a    b"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_cleaning_is_idempotent(text: str) -> None:
    once = clean_text(text)
    assert clean_text(once) == once
    assert once.count("\n") == text.replace("\r\n", "\n").count("\n")


_PIECES = (
    "<https://x.io|x>",
    "<@U1>",
    "&amp;lt;",
    "&gt;",
    "```py",
    "\t",
    "\r\n",
    "\x1b[0m",
    "[1;36m",
    "\x07",
    " ",
    "\n",
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=30).map("".join))
def test_a_step_whose_literal_trigger_is_absent_is_skipped_without_changing_the_text(text: str) -> None:
    idle = _LITERAL_STEPS - _triggered(text.encode("utf-8", errors="replace"))
    assert _clean_once(text, idle) == _clean_once(text)
    assert clean_text(text, _triggered(text.encode("utf-8", errors="replace"))) == clean_text(text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_prefix_stripping_is_idempotent(text: str) -> None:
    line = clean_text(text).split("\n")[0]
    source, level, message = split_prefixes(line)
    assert split_prefixes(message)[2] == message


def test_line_glued_after_a_progress_bar_belongs_to_the_later_process() -> None:
    raw = (
        "Capturing CUDA graph shapes:   0%|          | 0/11 [00:00<?, ?it/s](VllmWorkerProcess pid=21013) "
        "ERROR 04-24 08:27:56 [multiproc_worker_utils.py:242] torch.OutOfMemoryError: CUDA out of memory."
    )
    assert split_prefixes(raw) == (
        "VllmWorkerProcess pid=21013",
        "ERROR",
        "torch.OutOfMemoryError: CUDA out of memory.",
    )


def test_prefixes_of_tools_that_wrap_vllm_are_stripped() -> None:
    fastchat = 'worker-1  | 2024-02-20 21:46:23 | ERROR | stderr |   File "/vllm/worker/worker.py", line 71'
    assert split_prefixes(fastchat)[1:] == ("ERROR", 'File "/vllm/worker/worker.py", line 71')
    unsloth = "vLLM STDOUT: INFO 07-05 14:58:17 [__init__.py:239] Automatically detected platform cuda."
    assert split_prefixes(unsloth) == ("", "INFO", "Automatically detected platform cuda.")


def _hard_wrap(text: str, width: int) -> str:
    out: list[str] = []
    for line in text.split("\n"):
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


KV_LINE = (
    "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
    "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB)."
)


def test_terminal_hard_wraps_are_rejoined_on_the_first_line_number() -> None:
    text = "INFO started\n" + _hard_wrap(KV_LINE, 70) + "\nINFO after"
    doc = Document(text)
    assert len(doc) == len(text.split("\n"))
    assert doc.line(2).text == KV_LINE.removeprefix("(EngineCore pid=316) ")
    assert doc.line(3).text == ""
    assert doc.line(len(doc)).text == "INFO after"


def test_wrapped_pieces_inside_a_code_fence_are_measured_before_the_fence_is_removed() -> None:
    body = "```\n" + _hard_wrap("ValueError: " + "x" * 150 + " end```", 80)
    assert Document(body).line(2).text == "ValueError: " + "x" * 150 + " end"


def test_repeated_lines_of_equal_length_are_not_joined() -> None:
    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity"
    )
    doc = Document("\n".join([line] * 4))
    assert [doc.line(n).text for n in range(1, 5)] == [line] * 4


def test_one_long_line_alone_is_not_taken_as_wrapped() -> None:
    long = "ValueError: " + "y" * 100
    doc = Document(long + "\ncontinuation that is really its own line")
    assert doc.line(1).text == long


def test_a_new_record_after_a_full_width_line_is_not_joined() -> None:
    width = "z" * 90
    doc = Document(f"{width}\n{width}\nTraceback (most recent call last):\nINFO 01-01 00:00:00 x.py:1] done")
    assert doc.line(2).text == width
    assert doc.line(3).text.startswith("Traceback")


def test_a_rejoined_wrap_says_which_lines_it_emptied() -> None:
    wide = "x" * 70
    doc = Document(f"{wide}\nrest of the first\n{wide}\nrest of the second\nshort")
    assert doc.moved == frozenset({2, 4})
    assert doc.lines[1] == "" and doc.lines[0].endswith("rest of the first")


@pytest.mark.parametrize(
    "text",
    [
        "[Stage-1] INFO 03-12 08:22:28 [model_runner.py:133] Model loading took 26.47 GiB and 13.1 seconds",
        "[2026-03-12T13:32:52Z] [Stage-0] INFO 03-12 13:32:52 [worker.py:138] Model loaded successfully.",
        'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        "(venv) user@gpu-box:~/work$ python -m vllm.entrypoints.openai.api_server --model m --max-num-seqs 8",
    ],
)
def test_a_programs_record_under_a_tag_of_its_own_is_no_sentence(text: str) -> None:
    assert is_record(text)
    assert not is_prose(Document(text).line(1))


def test_a_sentence_naming_a_file_is_still_a_sentence() -> None:
    line = Document("I see the error in model_runner.py while loading and then it crashes").line(1)
    assert not is_record(line.text)
    assert is_prose(line)


def test_a_long_sentence_retelling_memory_figures_is_a_sentence() -> None:
    retold = "It refuses to start: only 13.2 GiB free of 79.19 GiB, but utilization 0.9 needs 71.27 GiB."
    assert is_prose(Document(retold).line(1))


@pytest.mark.parametrize(
    "text",
    [
        # vLLM's own lines, pasted without their logger prefix: figures among few words, or settings
        "Loading model weights took 14.99 GiB and 12.3 seconds",
        "the current vLLM instance can use total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90)"
        " = 71.27GiB",
        "Available KV cache memory: 55.88 GiB",
    ],
)
def test_a_programs_memory_figures_in_few_words_are_no_sentence(text: str) -> None:
    assert not is_prose(Document(text).line(1))


def _line_finder(pattern: str) -> LineFinder:
    """A finder as the scan builds one: RE2 with `never_nl`, so a match never spans lines."""
    options = re2.Options()
    options.never_nl = True
    return LineFinder(pattern, options)


def test_unprefixed_runs_are_the_matched_runs_of_unprefixed_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(normalize, "_UNSPLIT_MIN_BYTES", 0)  # the reduced text even for a short one
    lines = [
        "oom at the start",
        "(EngineCore_DP0 pid=1) ERROR 05-12 10:11:12 [core.py:1] oom",
        "oom again",
        "(EngineCore_DP0 pid=1) ERROR 05-12 10:11:12 [core.py:1] oom",
        "oom again",
        "oom again",
        "INFO 05-12 10:11:12 [x.py:2] oom",
        "ends with oom",
    ]
    doc = Document("\n".join(lines))
    for number in range(1, len(lines) + 1):  # split as a scan would have
        doc.line(number)
    for pattern in ("oom", "^oom", "oom$", "again"):
        finder = _line_finder(pattern)
        expected = [
            run for run in doc.matched_runs(finder) if not doc.line(run[0]).source + doc.line(run[0]).level
        ]
        found = [
            run for run in doc.unprefixed_runs(finder) if not doc.line(run[0]).source + doc.line(run[0]).level
        ]
        assert found == expected, pattern


_CORPUS = Path(__file__).resolve().parent.parent / "corpus"
_HEALTHY = Path(__file__).resolve().parent.parent / "healthy"


def _pasted_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted([*_CORPUS.glob("*.log"), *_HEALTHY.glob("*.log")]):
        lines += Document(path.read_text(encoding="utf-8", errors="replace")).lines
    return lines


def test_every_pasted_line_a_vllm_tag_or_header_opens_splits_with_a_source_or_a_level() -> None:
    opened = [line for line in _pasted_lines() if normalize._LOGGED.match(line)]
    assert len(opened) > 1000  # most of the corpus's records
    assert [line for line in opened if not any(split_prefixes(line)[:2])] == []


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["(EngineCore_DP0 pid=7) ", "(VllmWorker rank=1 pid=9, ip=10.0.0.2) ", "(pid=3) ", ""]),
    st.sampled_from(["", "INFO 05-12 10:11:12 ", "WARNING 05-12 10:11:12.345 ", "ERROR 03-23 21:43:38 "]),
    st.text(alphabet=st.sampled_from(list("ab (pid=)[]|:-_0123456789 INFO\u00e9\u4e2d")), max_size=40),
)
def test_a_line_a_vllm_tag_or_header_opens_always_splits_with_a_source_or_a_level(
    tag: str, header: str, rest: str
) -> None:
    line = tag + header + rest
    if normalize._LOGGED.match(line):
        assert any(split_prefixes(line)[:2])


def test_unsplit_lines_a_tag_opens_are_left_out_of_the_person_words_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalize, "_UNSPLIT_MIN_BYTES", 0)
    lines = [
        "oom at the start",
        "(EngineCore_DP0 pid=1) ERROR 05-12 10:11:12 [core.py:1] oom",
        "oom again",
        "INFO 05-12 10:11:12 [x.py:2] oom",
        "ERROR 05-12 10:11:12",  # no header: a time without the space after it
        "ends with oom",
    ]
    doc = Document("\n".join(lines))  # nothing split yet
    finder = _line_finder("oom")
    kept = doc.unprefixed_runs(finder)
    assert doc._kept()[1] == [1, 3, 5, 6]
    assert [run for run in kept if not any(split_prefixes(lines[run[0] - 1])[:2])] == [(1, 1), (3, 1), (6, 1)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from(list("`~ ax\r\u00e9\u4e2d\ud800")), max_size=12), max_size=8)
)
def test_fence_lines_are_the_lines_holding_a_fence_mark(pieces: list[str]) -> None:
    raw = "\n".join(pieces)
    lines = raw.split("\n")
    expected = tuple(
        (number, line.rstrip("\r"))
        for number, line in enumerate(lines, start=1)
        if "```" in line or "~~~" in line
    )
    assert normalize._fence_lines(raw.encode("utf-8", errors="replace"), lines) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from(list("ab \u00e9\u4e2d\U0001f600")), max_size=6),
        min_size=1,
        max_size=8,
    )
)
def test_a_run_of_lines_reads_as_those_lines_joined_and_encoded(lines: list[str]) -> None:
    doc = Document("\n".join(lines))
    total = len(doc.lines)
    for first in range(1, total + 1):
        for last in range(first, total + 1):
            assert doc.lines_data(first, last) == "\n".join(doc.lines[first - 1 : last]).encode(
                "utf-8", errors="replace"
            )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"ab", b"b", b"a\r"]), min_size=1, max_size=10))
def test_run_of_counts_the_copies_of_a_line_that_follow_it(pieces: list[bytes]) -> None:
    data = b"\n".join(pieces)
    lines = data.split(b"\n")
    end = len(lines[0])
    repeats = 1
    while repeats < len(lines) and lines[repeats] == lines[0]:
        repeats += 1
    assert normalize.run_of(data, lines[0], end) == (repeats, sum(len(line) + 1 for line in lines[:repeats]))
