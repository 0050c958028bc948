"""Whole-text passes over each distinct line once: which lines a pattern hits, runs of repeats, and
the eager scan built on them giving what a walk over every line gives."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import msgspec
import re2

from service.core import classify
from service.diagnosis.evidence import SCAN_BOUND_RULE
from service.diagnosis.normalize import MEMO_LINES, Document, _looks_repeated
from service.diagnosis.prose import _problem_lines, _read_line, describes_change, read_prose
from service.diagnosis.scan import scan_document, scan_lines
from service.packs import RulePacks
from service.schemas import PHASES, DiagnoseRequest

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

LOG_LINES = (
    "(EngineCore_DP0 pid=7) INFO 03-02 11:00:00 [gpu_worker.py:2] Available KV cache memory: 3.5 GiB",
    "(EngineCore_DP0 pid=7) ERROR 03-02 11:00:01 [core.py:9] EngineCore failed to start.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity "
    "of 23.6 GiB of which 0.9 GiB is free.",
    '(APIServer pid=1) INFO:     127.0.0.1:4410 - "GET /metrics HTTP/1.1" 200 OK',
    "",
    "we tried a smaller batch and it still ran out of memory",
    "ValueError: The model's max seq len (65536) is larger than the maximum number of tokens that can "
    "be stored in KV cache (20000).",
)


def _shuffled_log(seed: int, size: int) -> str:
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < size:
        lines.extend([rng.choice(LOG_LINES)] * rng.choice((1, 1, 1, 2, 5)))
    return "\n".join(lines)


def test_lines_hit_are_the_distinct_lines_a_pattern_matches_inside() -> None:
    doc = Document("alpha error\nbeta\nalpha error\n\nGamma Error here\nbeta")
    pattern = re2.compile(r"\s*[Ee]rror")
    # the blank line's newline starts a match running into the next line: the blank line is not hit
    assert doc.lines_hit(pattern) == {"alpha error", "Gamma Error here"}
    assert doc.lines_hit(re2.compile("nothing")) == set()


def test_a_text_of_distinct_lines_is_its_own_view_and_a_repeating_one_is_not() -> None:
    plain = Document("\n".join(f"line {n}" for n in range(1000)))
    assert not plain.distinct.repeats and plain.distinct.data == plain.data
    repeating = Document("\n".join(f"line {n % 10}" for n in range(1000)))
    assert repeating.distinct.repeats and len(repeating.distinct.lines) == 10
    pattern = re2.compile("line [37]")
    for doc in (plain, repeating):
        numbers = [n for n in range(1, 1001) if pattern.search(doc.lines[n - 1])]
        assert doc.runs(doc.lines_hit(pattern)) == [(n, 1) for n in numbers]
        for seen in (True, False):  # read over distinct lines, or over the text as it is
            doc.repeating = seen
            assert list(doc.matched_runs(pattern)) == [(n, 1) for n in numbers]


def test_the_eager_scan_tells_the_document_whether_its_lines_repeat(packs: RulePacks) -> None:
    oom = LOG_LINES[2]
    repeating = Document("\n".join([oom, LOG_LINES[0]] * 50))
    scan_document(repeating, packs.signatures.eager)
    assert repeating.repeating is True
    distinct = Document("\n".join(f"{oom} (retry {n})" for n in range(50)))
    scan_document(distinct, packs.signatures.eager)
    assert distinct.repeating is False


def test_runs_group_consecutive_identical_lines() -> None:
    doc = Document("a\na\nb\na\na\na\nc\na")
    assert doc.runs({"a"}) == [(1, 2), (4, 3), (8, 1)]
    assert doc.runs({"a", "b"}) == [(1, 2), (3, 1), (4, 3), (8, 1)]
    assert doc.runs(set()) == [] and Document("").runs({""}) == [(1, 1)]
    long = Document("x\n" + "oom\n" * 14_000 + "y")
    assert long.runs({"oom"}) == [(2, 14_000)]
    assert long.line_end(2) == len("x\noom")
    wide = Document("显存不足\nab\nab")
    assert wide.line_end(2) == len("显存不足\nab".encode()) and wide.line_end(3) == len(wide.data)


def test_the_eager_scan_gives_the_hits_of_a_walk_over_every_line(packs: RulePacks) -> None:
    for seed in range(4):
        doc = Document(_shuffled_log(seed, 400))
        found = scan_document(doc, packs.signatures.eager)
        walked = scan_lines(doc, packs.signatures.eager, 1, len(doc))
        assert found.hits and found.stopped_at is None
        assert [(h.line.number, h.rule_id, h.facts, h.repeats) for h in found.hits] == [
            (h.line.number, h.rule_id, h.facts, h.repeats) for h in walked
        ]


def test_the_eager_scan_stops_at_its_bound_on_a_matched_line(packs: RulePacks) -> None:
    doc = Document(_shuffled_log(9, 600))
    found = scan_document(doc, packs.signatures.eager, limit=25)
    assert found.examined == 25 and found.stopped_at is not None
    assert all(h.line.number < found.stopped_at for h in found.hits)
    assert doc.lines[found.stopped_at - 1] in doc.lines_hit(packs.signatures.eager.prefilter)


def _corpus_logs() -> list[str]:
    tests = Path(__file__).resolve().parent.parent
    folders = (tests / "corpus", tests / "healthy", tests / "diagnosis" / "healthy_excerpts")
    return [p.read_text(encoding="utf-8", errors="replace") for f in folders for p in sorted(f.glob("*.log"))]


def _with_repeats(text: str) -> str:
    """Every line twice in a row, and the whole paste again (every rank, every restart): read over
    its distinct lines, where the paste as it is (hardly any repeats) is read as its own text."""
    doubled = "\n".join(line for line in text.split("\n") for _ in range(2))
    return doubled + "\n" + text


def test_every_corpus_log_scans_as_a_walk_over_every_line(packs: RulePacks) -> None:
    eager = packs.signatures.eager
    for text in (variant for log in _corpus_logs() for variant in (log, _with_repeats(log))):
        doc = Document(text)
        found = scan_document(doc, eager, limit=10**9)
        walked = scan_lines(doc, eager, 1, len(doc))
        assert [(h.line.number, h.rule_id, h.facts, h.repeats) for h in found.hits] == [
            (h.line.number, h.rule_id, h.facts, h.repeats) for h in walked
        ]


def test_every_corpus_log_reads_its_prose_as_a_walk_over_every_line(packs: RulePacks) -> None:
    vocabulary = packs.prose
    for text in (variant for log in _corpus_logs() for variant in (log, _with_repeats(log))):
        doc = Document(text)
        walked = []
        for number in range(1, len(doc) + 1):
            line = doc.line(number)
            raw = doc.lines[number - 1].encode("utf-8", errors="replace")
            if not line.source and not line.level and vocabulary.said.search(raw):
                walked += [msgspec.structs.replace(cue, line=number) for cue in _read_line(line, vocabulary)]
        if walked and describes_change(doc, vocabulary):  # a change's bug: told in the past or its problem
            told = _problem_lines(doc, vocabulary)
            walked = [cue for cue in walked if not cue.before_change and cue.line not in told]
        for seen in (True, False):  # over distinct lines, and over the text as it is
            doc.repeating = seen
            assert read_prose(doc, vocabulary) == walked


def test_a_line_another_paste_read_first_gives_the_hits_a_fresh_index_gives(packs: RulePacks) -> None:
    shared = replace(packs.signatures.eager, memo={})  # one process reading every paste in turn
    for text in (variant for log in _corpus_logs() for variant in (log, _with_repeats(log))):
        fresh = replace(packs.signatures.eager, memo={})  # nothing read before
        found = scan_document(Document(text), shared).hits
        alone = scan_document(Document(text), fresh).hits
        assert [(h.line, h.rule_id, h.facts, h.repeats) for h in found] == [
            (h.line, h.rule_id, h.facts, h.repeats) for h in alone
        ]
    assert shared.memo["lines"], "the shared index kept what it read"


def test_the_line_memo_of_an_index_is_bounded(packs: RulePacks) -> None:
    index = replace(packs.signatures.eager, memo={})
    oom = LOG_LINES[2]
    many = Document("\n".join(f"{oom} (retry {n})" for n in range(MEMO_LINES + 10)))
    scan_document(many, index, limit=10**9)
    assert len(index.memo["lines"]) == MEMO_LINES + 10
    scan_document(Document(f"{oom} (once more)"), index)
    assert len(index.memo["lines"]) == 1  # past its bound the memo started again


def test_a_repeating_text_is_read_over_its_distinct_lines_before_a_pass_has_looked(packs: RulePacks) -> None:
    pattern = packs.signatures.eager.prefilter
    for text in (_shuffled_log(3, 400), "\n".join(f"line {n}" for n in range(400))):
        unseen, walked = Document(text), Document(text)
        walked.repeating = False  # the text as it is
        assert unseen.repeating is None
        assert list(unseen.matched_runs(pattern)) == list(walked.matched_runs(pattern))
    assert _looks_repeated(Document(_shuffled_log(3, 400)).lines)
    assert not _looks_repeated([f"line {n}" for n in range(400)])


def test_one_line_pasted_over_and_over_looks_repeated_whatever_its_length() -> None:
    for length in range(1, 20):  # most lengths leave the length-sampled lines empty
        assert _looks_repeated(["x" * length] * 5000)


def test_a_prefilter_match_never_runs_past_its_line(packs: RulePacks) -> None:
    for index in (packs.signatures.eager, packs.signatures.lazy):
        for text in _corpus_logs():
            data = Document(text).data
            for hit in index.prefilter.finditer(data):  # the line a hit names holds the match itself
                start, end = data.rfind(b"\n", 0, hit.start()) + 1, data.find(b"\n", hit.start())
                assert index.prefilter.search(data[start : end if end >= 0 else len(data)]) is not None


def test_records_repeated_on_both_sides_of_the_scan_bound_are_read(packs: RulePacks) -> None:
    # Every corpus log, pasted over and over to 2 MB: its records repeat before the 4,000-line bound
    # (every line hit) and after it (no line hit), so a record read once must not be reused where its
    # lines have lost their hits (this raised ValueError in continue_hits).
    corpus = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(CORPUS.glob("*.log")))
    text = corpus * (2 * 2**20 // len(corpus) + 1)
    diagnosis = classify(DiagnoseRequest(log=text[: text.rfind("\n", 0, 2 * 2**20) + 1]), packs)
    assert diagnosis.phase in PHASES
    assert any(f.rule == SCAN_BOUND_RULE for f in diagnosis.findings)


def test_one_line_pasted_14000_times_is_read_as_the_line_with_its_count(packs: RulePacks) -> None:
    # the eager scan counts every copy of a run, so the paste is repeating for the passes after it
    # (the person's words, the stated settings: each reads the one distinct line, not 2 MB)
    oom = "(EngineCore_DP0 pid=210) ERROR 05-12 10:11:12 [core.py:700] " + LOG_LINES[2]
    doc = Document("\n".join([oom] * 14_000))
    scan_document(doc, packs.signatures.eager)
    assert doc.repeating is True
    once = classify(DiagnoseRequest(log=oom), packs)
    pasted = classify(DiagnoseRequest(log="\n".join([oom] * 14_000)), packs)
    assert (pasted.phase, pasted.facts, pasted.confidence) == (once.phase, once.facts, once.confidence)
    assert [(e.line, e.rule, e.repeats) for e in pasted.evidence] == [
        (e.line, e.rule, 14_000 if e.repeats == 1 else e.repeats) for e in once.evidence
    ]


def test_the_cleaning_check_and_wrap_points_read_a_runs_lines_once() -> None:
    # a coloured line pasted over and over is cleaned like the line alone; a run of one line at the
    # terminal's width is no wrap, a line cut at the width before a different line is
    coloured = "\x1b[32mINFO\x1b[0m 05-12 10:11:12 model loaded"
    assert Document("\n".join([coloured] * 5000)).lines == [Document(coloured).lines[0]] * 5000
    wide = "x" * 80
    assert Document("\n".join([wide] * 100)).lines == [wide] * 100
    joined = Document("\n".join([wide, wide + "y", "tail of the wrapped line", "z" * 81]))
    assert joined.lines[1] == wide + "y" + "tail of the wrapped line"
