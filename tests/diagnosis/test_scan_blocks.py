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
    blocks = LineBlocks(doc, packs.signatures.lazy, size=16)
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
