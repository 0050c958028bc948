"""Lazy stage/frame hits by cached block, and whole-text passes that skip a scan's repeated lines."""

from __future__ import annotations

import random
from pathlib import Path

from service.diagnosis.normalize import Document
from service.diagnosis.scan import LineBlocks, present, scan_document, scan_lines, without_copies
from service.packs import RulePacks

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def _ids(hits: list) -> list[tuple[int, str]]:  # type: ignore[type-arg]
    return [(h.line.number, h.rule_id) for h in hits]


def test_block_lookups_give_the_hits_of_a_scan_of_the_same_lines(packs: RulePacks) -> None:
    text = "\n".join(p.read_text(errors="replace") for p in sorted(CORPUS.glob("*.log"))[:40])
    doc = Document(text)
    blocks = LineBlocks(doc, packs.signatures.lazy)
    rng = random.Random(5)
    total = len(doc.lines)
    checked = 0
    for _ in range(40):
        first = rng.randint(1, total)
        last = min(total, first + rng.randint(0, 300))
        expected = _ids(scan_lines(doc, packs.signatures.lazy, first, last))
        assert _ids(blocks.hits(first, last)) == expected
        checked += bool(expected)
    assert checked  # some ranges held stage or frame lines


def test_whole_text_rules_are_found_without_reading_repeated_copies(packs: RulePacks) -> None:
    marker = "INFO 01-01 00:00:01 [loader.py:1] Loading safetensors checkpoint shards"
    oom = "ERROR 01-01 00:00:03 [core.py:1] torch.OutOfMemoryError: CUDA out of memory."
    doc = Document("\n".join([oom] * 50 + [marker] * 3 + [oom] * 20))
    found = scan_document(doc, packs.signatures.eager)
    assert found.copies  # the runs were seen
    kept = without_copies(doc.data, found.copies)
    assert kept.count(oom.encode()) == 2 and len(kept) < len(doc.data) // 10
    assert present(doc, packs.signatures.lazy, found.copies) == present(doc, packs.signatures.lazy)


def _whole_scan(doc: Document, packs: RulePacks, first: int, last: int) -> list[tuple[int, str]]:
    """What a lookup answers by definition: the hits on first..last of one scan of the whole document
    (a run of identical lines is one hit at its first line)."""
    hits = scan_lines(doc, packs.signatures.lazy, 1, len(doc.lines))
    return [(n, rule) for n, rule in _ids(hits) if first <= n <= last]


def test_lookups_in_any_order_answer_as_one_scan_of_the_whole_document(packs: RulePacks) -> None:
    logs = sorted(CORPUS.glob("*.log"))[:30]
    # every line three times, and one stage line pasted 40 times: runs of identical lines that
    # cross block edges and ranges that start or end inside a run
    text = "\n".join(
        line for p in logs for line in p.read_text(errors="replace").split("\n") for _ in range(3)
    )
    marker = "INFO 01-01 00:00:01 [loader.py:1] Loading safetensors checkpoint shards: 50% Completed | 1/2"
    lines = text.split("\n")
    lines[100:100] = [marker] * 40
    doc = Document("\n".join(lines))
    rng = random.Random(11)
    total = len(doc.lines)
    for _ in range(3):  # three orders of lookups
        blocks = LineBlocks(doc, packs.signatures.lazy)
        for _ in range(60):
            first = rng.randint(1, total)
            last = min(total, first + rng.choice((0, 1, 3, 7, 40, 300)))
            assert _ids(blocks.hits(first, last)) == _whole_scan(doc, packs, first, last)
        assert _ids(blocks.hits(90, 150)) == _whole_scan(doc, packs, 90, 150)


def test_a_lookup_of_a_few_lines_scans_those_lines_not_their_whole_block(packs: RulePacks) -> None:
    frame = '  File "/usr/lib/vllm/v1/worker/gpu_model_runner.py", line 9, in execute_model'
    serving = "INFO 01-01 00:00:{:02d} [logger.py:39] Received request chatcmpl-{}: prompt: 'hi'"
    lines = [serving.format(i % 60, i) for i in range(60)] + [
        frame,
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    doc = Document("\n".join(lines))
    blocks = LineBlocks(doc, packs.signatures.lazy)
    assert [rule for _, rule in _ids(blocks.hits(61, 62))] == ["vllm-frame-serving"]
    assert blocks.scanned == 2  # the 60 serving lines of the same block are left until asked for
    assert len(blocks.hits(1, 62)) == 61 and blocks.scanned == 62
