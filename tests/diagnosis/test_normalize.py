"""Normalization keeps original line numbers while removing the noise pasted logs carry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.diagnosis.normalize import Document, clean_text, decode_bytes, split_prefixes


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


def test_tabs_become_spaces() -> None:
    assert clean_text("a\tb") == "a    b"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_cleaning_is_idempotent(text: str) -> None:
    once = clean_text(text)
    assert clean_text(once) == once
    assert once.count("\n") == text.replace("\r\n", "\n").count("\n")


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
