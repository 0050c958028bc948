"""Messages a person quotes inside a sentence or a title, read by the same line rules as a log line.

A sentence such as "six cards are not divisible by the vocabulary size: `AssertionError: 151552 is
not divisible by 6`" holds what the program printed between its quote marks. Rules anchored to a
line's start and end (vLLM's `divide()` assertion, a Python exception line) cannot match it inside
the sentence, so each quoted stretch is matched on its own, as the line it was, and what it matches
lands on the sentence's line. Only the person's lines are read (no logger or process prefix, words
around the quote); a log line's quotes are its own text, already scanned.
"""

from __future__ import annotations

import re

import re2

from service.diagnosis.normalize import Document
from service.diagnosis.prose import is_sentence
from service.diagnosis.scan import Hit, match_line
from service.packs import PatternIndex
from service.packs.signatures import OPTIONS, CompiledRule

__all__ = ["quoted_hits"]

# Backticks (also a fenced code span), straight, curly and CJK quotes; a stretch of a few words at
# least, so a quoted flag or a quoted "OOM" stays the person's word
_QUOTED = re.compile(r'`([^`\n]{12,2000})`|"([^"\n]{12,2000})"|“([^”\n]{12,2000})”|「([^」\n]{12,2000})」')
_MARKS = re2.compile(r'[`"“「]', OPTIONS)
MAX_LINES = 200  # sentences with quotes read per paste: the work stays bounded on any input


def quoted_hits(doc: Document, index: PatternIndex, hits: list[Hit]) -> list[Hit]:
    """Hits of rules a quoted message in a person's sentence matches and the whole line did not."""
    if index.prefilter is None:
        return []
    had = {(h.line.number, h.rule_id) for h in hits}
    found: list[Hit] = []
    read = 0
    for number, repeats in doc.matched_runs(_MARKS):
        line = doc.line(number)
        if line.source or line.level or not is_sentence(line):
            continue
        read += 1
        if read > MAX_LINES:
            break
        for match in _QUOTED.finditer(line.text):
            quoted = next(g for g in match.groups() if g is not None).strip()
            for compiled, facts in _matched(index, quoted.encode("utf-8", errors="replace")):
                if (number, compiled.rule.id) not in had:
                    had.add((number, compiled.rule.id))
                    found.append(Hit(compiled=compiled, line=line, facts=facts, repeats=repeats))
    return found


def _matched(index: PatternIndex, raw: bytes) -> list[tuple[CompiledRule, dict[str, object]]]:
    if index.prefilter is None or index.prefilter.search(raw) is None:
        return []
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
