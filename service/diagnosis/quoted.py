"""Messages a person quotes inside a sentence or a title, read by the same line rules as a log line.

A sentence such as "six cards are not divisible by the vocabulary size: `AssertionError: 151552 is
not divisible by 6`" holds what the program printed between its quote marks. Rules anchored to a
line's start and end (vLLM's `divide()` assertion, a Python exception line) cannot match it inside
the sentence, so each quoted stretch is matched on its own, as the line it was, and what it matches
lands on the sentence's line. Only the person's lines are read (no logger or process prefix, words
around the quote); a log line's quotes are its own text, already scanned.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

from service.diagnosis.normalize import Document
from service.diagnosis.prose import is_sentence
from service.diagnosis.scan import Hit, match_line
from service.packs import PatternIndex
from service.packs.signatures import CompiledRule

__all__ = ["quoted_hits"]

# Backticks (also a fenced code span), straight, curly and CJK quotes; a stretch of a few words at
# least, so a quoted flag or a quoted "OOM" stays the person's word
_MARKS = (("`", "`"), ('"', '"'), ("“", "”"), ("「", "」"))
_MIN_QUOTED, _MAX_QUOTED = 12, 2000
MAX_LINES = 200  # sentences with quotes read per paste: the work stays bounded on any input


def quoted_hits(doc: Document, index: PatternIndex, hits: list[Hit]) -> list[Hit]:
    """Hits of rules a quoted message in a person's sentence matches and the whole line did not;
    none when a log line already shows a decisive failure (the person quotes the message the log
    shows, and a log line outweighs their sentence anyway), so a typical paste costs no pass."""
    prefilter = index.prefilter
    if prefilter is None or any(_decides(h) for h in hits):
        return []
    had = {(h.line.number, h.rule_id) for h in hits}
    found: list[Hit] = []
    for number, stretches in _quoted_stretches(doc, prefilter):
        line = doc.line(number)
        if line.source or line.level or not is_sentence(line):
            continue
        whole = line.text.encode("utf-8", errors="replace")
        for raw in stretches:
            for compiled, facts in _matched(index, raw):
                # a rule's veto holds for the sentence around the quote too: "KV Cache … `type
                # fp8e4nv not supported …`" quotes the cache's refusal, not a quantized model's
                if any(exclude.search(whole) for exclude in compiled.excludes):
                    continue
                if (number, compiled.rule.id) not in had:
                    had.add((number, compiled.rule.id))
                    found.append(Hit(compiled=compiled, line=line, facts=facts))
    return found


def _decides(hit: Hit) -> bool:
    """Whether a hit is a decisive failure a program printed (not a sentence quoting one)."""
    return hit.compiled.rule.kind in ("failure", "oom") and not is_sentence(hit.line)


def _stretches_of(text: str) -> tuple[list[int], list[str]]:
    """Every quoted stretch of the text (12 to 2000 characters inside one line), with its line
    number: the marks found by `str.find` (memchr speed; a regex walks every character)."""
    found: list[tuple[int, str]] = []
    for mark, closer in _MARKS:
        pos = text.find(mark)
        while pos >= 0:
            end_of_line = text.find("\n", pos)
            end_of_line = len(text) if end_of_line < 0 else end_of_line
            close = text.find(closer, pos + 1, end_of_line)
            if close < 0:
                pos = text.find(mark, end_of_line)
                continue
            if _MIN_QUOTED <= close - pos - 1 <= _MAX_QUOTED:
                found.append((pos, text[pos + 1 : close].strip()))
            pos = text.find(mark, close + 1)
    found.sort()
    numbers: list[int] = []
    number, counted = 1, 0
    for pos, _ in found:
        number += text.count("\n", counted, pos)
        counted = pos
        numbers.append(number)
    return numbers, [stretch for _, stretch in found]


def _quoted_stretches(doc: Document, prefilter: Any) -> Iterator[tuple[int, list[bytes]]]:
    """(line number, its quoted stretches a rule's prefilter hits), in line order, for at most
    MAX_LINES lines. The prefilter runs once over all stretches joined (RE2 is called once per
    hit, not per stretch): a log line's quotes (an access log's "POST /v1/… HTTP/1.1") seldom hit,
    so few lines are split and read."""
    numbers, texts = _stretches_of(doc.text)
    if not texts:
        return
    joined = "\n".join(texts)
    blob = joined.encode("utf-8", errors="replace")
    sizes = (
        [len(t) for t in texts]
        if joined.isascii()
        else [len(t.encode("utf-8", errors="replace")) for t in texts]
    )
    starts = list(itertools.accumulate((size + 1 for size in sizes[:-1]), initial=0))
    hit: dict[int, list[bytes]] = {}
    pos = 0
    while pos < len(blob) and (found := prefilter.search(blob, pos)) is not None:
        at = bisect_right(starts, found.start()) - 1
        if numbers[at] in hit or len(hit) < MAX_LINES:
            hit.setdefault(numbers[at], []).append(blob[starts[at] : starts[at] + sizes[at]])
        pos = starts[at] + sizes[at] + 1
    yield from sorted(hit.items())


def _matched(index: PatternIndex, raw: bytes) -> list[tuple[CompiledRule, dict[str, object]]]:
    by_rule: dict[int, set[int]] = {}
    for pattern_index in index.pattern_set.Match(raw) or ():
        rule_index, regex_index = index.pattern_owner[pattern_index]
        by_rule.setdefault(rule_index, set()).add(regex_index)
    out: list[tuple[CompiledRule, dict[str, object]]] = []
    for rule_index in sorted(by_rule):
        compiled = index.rules[rule_index]
        facts = match_line(compiled, raw, frozenset(by_rule[rule_index]))
        if facts is not None:
            out.append((compiled, facts))
    return out
