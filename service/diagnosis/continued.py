"""Facts a line states past where the paste broke it: wrapped, re-wrapped or printed by a wrapper.

The scanner matches a message on one line. A terminal that hard-wrapped it (at any column, also
inside a number: `(0.95, 22.5` / `0 GiB)`), a person who re-wrapped it with indentation, or a
wrapper that printed it escaped (a JSON string with `\\"` and `\\n`, a repr'd tuple `('…', '…')`),
or a person who retyped it (`GB` for `GiB`, doubled spaces, no parentheses)
leaves the first piece matched and the numbers of the rest unread. For a hit line, the lines
continuing the same record (no new logger, process or traceback record, no blank line) are joined
back, without a space where the break fell inside a word and with one where it fell at a space or
indentation (and, as a second reading, with spaces everywhere, as a person re-wrapping prose does),
and the joined record is scanned again. Facts the whole record adds fill the hits' missing ones;
they replace the first piece's only where that piece ends inside a number (`limit of 40` / `96`).
Rules the joined record matches anew (a message wrapped before its wording was complete, each of
PyTorch's OOM sentences) become hits on the record's first line. An exception line no decisive
rule matched is also tried against the failure rules in retyped form (parentheses optional, any
run of spaces, `GB` for `GiB`).
"""

from __future__ import annotations

from typing import Any

import msgspec
import re2

from service.diagnosis.normalize import Document, Line, starts_record
from service.diagnosis.scan import Hit, index_memo, match_line, scan
from service.first_use import first_use_re
from service.packs import PatternIndex
from service.packs.derived import per_pack
from service.packs.signatures import OPTIONS, CompiledRule, set_form

__all__ = ["continue_hits", "record_text", "retyped_form", "unescape"]

# A record is joined over at most this many following lines and characters.
_MAX_PIECES = 40
_MAX_CHARS = 4000

_ESCAPE = first_use_re(r"\\([nrt\"'\\])")
_TUPLE_JOINT = first_use_re(r"['\"],\s*['\"]")
_SPACES = first_use_re(r"[ ]{2,}")
_RETYPED_GIB = first_use_re(r"(\d) ?GB\b")
# What a wrapper's printing leaves: an escape, or a tuple opening with two repr'd strings (not a
# dict or list repr, which args lines print everywhere).
_QUOTE_MARKS = first_use_re(r"^[ \t]*(?:[>▎][ \t]?)+")
_PRINTED = first_use_re(r"\\[nrt\"'\\]|\(\s*['\"][^()]*['\"],\s*['\"]")


def unescape(text: str) -> str:
    """A message as vLLM printed it, read back from a wrapper's or a person's copy: escapes undone,
    repr'd tuple parts rejoined, runs of spaces single, and a retyped `GB` read as vLLM's `GiB`
    (V0's own `GB` was GiB too, and its rules accept either)."""
    text = _ESCAPE.sub(lambda m: " " if m.group(1) in "nrt" else m.group(1), text)
    text = _TUPLE_JOINT.sub("", text)
    text = _RETYPED_GIB.sub(r"\1 GiB", text)
    return _SPACES.sub(" ", text)


# A person retyping a message drops its parentheses, doubles spaces and writes GB for GiB.
_RETYPED = ((r"\(", r"\(?"), (r"\)", r"\)?"), (" ", " +"), ("GiB", "Gi?B"))
_RETYPED_RULES: dict[str, CompiledRule] = {}


def retyped_form(pattern: str) -> str:
    """A rule pattern that also matches the message as a person retyped it."""
    for literal, loose in _RETYPED:
        pattern = pattern.replace(literal, loose)
    return pattern


def _retyped_rule(compiled: CompiledRule) -> CompiledRule:
    """The rule with its patterns in retyped form (each compiled once; one RE2 rejects stays)."""
    known = _RETYPED_RULES.get(compiled.rule.id)
    if known is None or known.rule is not compiled.rule:
        regexes: list[Any] = []
        for pattern, regex in zip(compiled.rule.patterns, compiled.regexes, strict=True):
            try:
                regexes.append(re2.compile(retyped_form(pattern), OPTIONS))
            except re2.error:
                regexes.append(regex)
        known = msgspec.structs.replace(compiled, regexes=tuple(regexes), plain=tuple(False for _ in regexes))
        _RETYPED_RULES[compiled.rule.id] = known
    return known


class _RetypedSet(msgspec.Struct, frozen=True):
    """One RE2 set over the failure rules' retyped patterns, saying which rules may match a line."""

    rules: tuple[CompiledRule, ...]
    owner: tuple[int, ...]  # pattern in the set -> index into `rules`
    patterns: Any


@per_pack()
def _retyped_set(index: PatternIndex) -> _RetypedSet:
    rules = tuple(c for c in index.rules if c.rule.kind == "failure")
    patterns = re2.Set.SearchSet(OPTIONS)
    owner: list[int] = []
    for number, compiled in enumerate(rules):
        for pattern in compiled.rule.patterns:
            try:
                patterns.Add(set_form(retyped_form(pattern)))
            except re2.error:
                continue
            owner.append(number)
    if owner:
        patterns.Compile()
    return _RetypedSet(rules=rules, owner=tuple(owner), patterns=patterns if owner else None)


def _retyped_matches(index: PatternIndex, text: str) -> list[tuple[CompiledRule, dict[str, object]]]:
    """Failure rules a retyped message matches, with their facts: tried on an exception line nothing
    decisive matched."""
    retyped = _retyped_set(index)
    if retyped.patterns is None:
        return []
    data = text.encode("utf-8", errors="replace")
    candidates = sorted({retyped.owner[i] for i in retyped.patterns.Match(data) or ()})
    found: list[tuple[CompiledRule, dict[str, object]]] = []
    for number in candidates:
        compiled = retyped.rules[number]
        facts = match_line(_retyped_rule(compiled), data)
        if facts is not None:
            found.append((compiled, facts))
    return found


class _Piece(msgspec.Struct, frozen=True):
    number: int
    text: str
    spaced: bool  # the break before it fell at whitespace


def _cut_in_number(first: Line, pieces: list[_Piece]) -> bool:
    """Whether the break after `first` may have fallen inside a number (digits on both sides)."""
    return (
        bool(pieces) and not pieces[0].spaced and first.text[-1:].isdigit() and pieces[0].text[:1].isdigit()
    )


def _pieces(doc: Document, first: Line) -> list[_Piece]:
    """The lines after `first` that continue its record: no prefix of their own, no new record."""
    pieces: list[_Piece] = []
    size = len(first.text)
    previous_raw = doc.lines[first.number - 1]
    # a quoted paste (`> ` of Markdown and Slack, a `▎` bar) marks every line of one record alike
    quoted = _QUOTE_MARKS.match(previous_raw)
    marks = quoted.group(0).strip() if quoted else ""
    for number in range(first.number + 1, min(len(doc.lines), first.number + _MAX_PIECES) + 1):
        if number in doc.moved:
            continue  # emptied by a rejoined wrap: its text is already on an earlier line
        raw = doc.lines[number - 1]
        if marks and (same := _QUOTE_MARKS.match(raw)) and same.group(0).strip() == marks:
            raw = raw[same.end() :]
        line = doc.line(number)
        text = line.text.strip()
        if not text or not raw.lstrip().startswith(text[:20]) or starts_record(text):
            break  # blank, a prefix (logger, process, timestamp, container), or a traceback record
        size += len(text)
        if size > _MAX_CHARS:
            break
        spaced = previous_raw[-1:].isspace() or raw[:1].isspace() or line.text[:1].isspace()
        pieces.append(_Piece(number, text, spaced))
        previous_raw = raw
    return pieces


def record_text(doc: Document, first: Line) -> str:
    """The text of `first` with the lines that continue its record joined back at a space (a
    message a terminal or a person wrapped), or `first`'s own text when none does."""
    return _joined(first.text, _pieces(doc, first), True)


def _joined(first: str, pieces: list[_Piece], always_space: bool) -> str:
    out = [first.rstrip()]
    for piece in pieces:
        out.append((" " if always_space or piece.spaced else "") + piece.text)
    return "".join(out)


def _read(text: str, index: PatternIndex) -> dict[str, Hit]:
    found: dict[str, Hit] = {}
    for hit in scan(Document(text), index):
        found.setdefault(hit.rule_id, hit)
    return found


def _count(found: dict[str, Hit]) -> int:
    return sum(len(hit.facts) + 1 for hit in found.values())


class _Readings:
    """What has been read, by text: a log repeats its records (every rank, every retry, every
    restart), and so do pastes of the same failure, so each distinct text is matched once per process
    (the index's memos: what a text yields depends on the text and the index alone)."""

    __slots__ = ("index", "patterns", "records", "retyped")

    def __init__(self, index: PatternIndex) -> None:
        self.index = index
        self.patterns: dict[str, frozenset[int]] = index_memo(index, "record patterns")
        self.records: dict[tuple[str, tuple[tuple[str, bool], ...]], dict[str, Hit]] = index_memo(
            index, "records"
        )
        self.retyped: dict[str, list[tuple[CompiledRule, dict[str, object]]]] = index_memo(index, "retyped")

    def patterns_in(self, text: str) -> frozenset[int]:
        """Which patterns of the index match somewhere in `text` (one RE2 set pass per text)."""
        known = self.patterns.get(text)
        if known is None:
            data = text.encode("utf-8", errors="replace")
            known = self.patterns[text] = frozenset(self.index.pattern_set.Match(data) or ())
        return known

    def record(self, first: Line, pieces: list[_Piece]) -> dict[str, Hit]:
        """The rules the record of `first` and `pieces` matches (read once per distinct record;
        the answer is shared, not to be changed)."""
        key = (first.text, tuple((piece.text, piece.spaced) for piece in pieces))
        known = self.records.get(key)
        if known is None:
            known = self.records[key] = _record_hits(self, first, pieces)
        return known

    def retyped_hits(self, first: Line, text: str) -> list[Hit]:
        """Failure rules the retyped `text` matches, as hits on `first`."""
        known = self.retyped.get(text)
        if known is None:
            known = self.retyped[text] = _retyped_matches(self.index, text)
        return [Hit(compiled=compiled, line=first, facts=facts) for compiled, facts in known]


def _incomplete(hit: Hit) -> bool:
    """Whether the hit's rule names a fact its line did not state."""
    specs = hit.compiled.rule.facts.values()
    return any(spec.field is None and spec.fact not in hit.facts for spec in specs)


def _worth_reading(readings: _Readings, first: Line, pieces: list[_Piece], line_hits: list[Hit]) -> bool:
    """Whether the joined record can say more than its lines: a wrapper printed it, a hit lacks a
    fact it names, the cut may fall inside a number, or the joined text matches a pattern no single
    line does."""
    text = _joined(first.text, pieces, False)
    if _PRINTED.search(text):
        return True
    if any(_incomplete(hit) for hit in line_hits):
        return bool(pieces) or unescape(text) != text
    if not pieces:
        return False
    if _cut_in_number(first, pieces):
        return True
    seen = readings.patterns_in(first.text).union(*(readings.patterns_in(piece.text) for piece in pieces))
    return not readings.patterns_in(text) <= seen


def _record_hits(readings: _Readings, first: Line, pieces: list[_Piece]) -> dict[str, Hit]:
    """The rules the whole record matches, with their facts: the better of the two joinings, then
    what its unescaped reading adds."""
    index = readings.index
    tight, spaced = _joined(first.text, pieces, False), _joined(first.text, pieces, True)
    read = [_read(tight, index)]
    if tight != spaced and (
        any(map(_incomplete, read[0].values())) or readings.patterns_in(tight) != readings.patterns_in(spaced)
    ):
        read.append(_read(spaced, index))
    best = max(read, key=_count)  # max keeps the first on a tie: the boundary-true joining
    text = _joined(first.text, pieces, any(r is best for r in read[1:]))
    plain = unescape(text)
    if plain != text:
        for rule_id, hit in _read(plain, index).items():
            known = best.get(rule_id)
            facts = hit.facts if known is None else {**hit.facts, **known.facts}
            best[rule_id] = Hit(compiled=hit.compiled, line=hit.line, facts=facts)
    return best


def _merge(
    record: dict[str, Hit], first: Line, cut: bool, in_record: list[Hit], replaced: dict[int, Hit]
) -> list[Hit]:
    """Fold a record's reading into the hits of its lines (into `replaced`); the new hits it adds."""
    new: list[Hit] = []
    for rule_id, whole in record.items():
        existing = next((h for h in in_record if h.rule_id == rule_id), None)
        if existing is not None:
            first_wins = not (cut and existing.line.number == first.number)
            facts = {**whole.facts, **existing.facts} if first_wins else {**existing.facts, **whole.facts}
            replaced[id(existing)] = Hit(compiled=existing.compiled, line=existing.line, facts=facts)
        elif whole.facts or whole.compiled.rule.kind in ("failure", "oom"):
            new.append(Hit(compiled=whole.compiled, line=first, facts=whole.facts))
    return new


# (lines past the first the record covers, or None when it was not read; the facts of each hit on
# them, None where unchanged; the hits it adds on its first line, as (rule, facts))
_Outcome = tuple[int | None, list[dict[str, object] | None], list[tuple[CompiledRule, dict[str, object]]]]


def _outcome(
    readings: _Readings, first: Line, pieces: list[_Piece], by_line: dict[int, list[Hit]]
) -> _Outcome:
    """What reading the record of `first` and `pieces` in full gives (its hits are in `by_line`)."""
    number = first.number
    span: int | None = None
    facts: list[dict[str, object] | None] = []
    new: list[Hit] = []
    if _worth_reading(readings, first, pieces, by_line[number]):
        covered = pieces[-1].number if pieces else number
        span = covered - number
        in_record = [h for n in range(number, covered + 1) for h in by_line.get(n, ())]
        replaced: dict[int, Hit] = {}
        new = _merge(
            readings.record(first, pieces), first, _cut_in_number(first, pieces), in_record, replaced
        )
        facts = [replaced[id(h)].facts if id(h) in replaced else None for h in in_record]
    kinds = {hit.compiled.rule.kind for hit in (*by_line[number], *new)}
    if "exception" in kinds and not kinds & {"failure", "oom", "wrapper"}:
        new += readings.retyped_hits(first, unescape(_joined(first.text, pieces, False)))
    return span, facts, [(hit.compiled, hit.facts) for hit in new]


def continue_hits(doc: Document, index: PatternIndex, hits: list[Hit]) -> list[Hit]:
    """`hits` with the facts of records that continue past their first line read in full."""
    if index.prefilter is None:
        return hits
    by_line: dict[int, list[Hit]] = {}
    for hit in hits:
        by_line.setdefault(hit.line.number, []).append(hit)
    readings = _Readings(index)
    replaced: dict[int, Hit] = {}  # id(hit) -> hit with the record's facts
    added: dict[int, list[Hit]] = {}
    # a record reads the same wherever its lines repeat (their hits come from one scan of each
    # text): what it gave, by the texts of its lines and how many hits each has (a line past the
    # scan's bound has none, whatever its text), as (how many lines it covered, the facts of each
    # hit on them, the hits it added); kept for the process as the scan's line memo is, so the
    # same record pasted on every rank or in a later request is read once
    read: dict[tuple[tuple[str, ...], tuple[int, ...]], _Outcome] = index_memo(index, "record outcomes")
    covered = 0
    for number in sorted(by_line):
        if number <= covered:
            continue  # a continuation of a record already read
        first = doc.line(number)
        if not first.text:
            continue
        pieces = _pieces(doc, first)
        end = pieces[-1].number if pieces else number
        key = None
        if not doc.moved:
            key = (
                tuple(doc.lines[number - 1 : end]),
                tuple(len(by_line.get(n, ())) for n in range(number, end + 1)),
            )
        outcome = read.get(key) if key is not None else None
        if outcome is None:
            outcome = _outcome(readings, first, pieces, by_line)
            if key is not None:
                read[key] = outcome
        span, facts, new = outcome
        if span is not None:
            covered = number + span
            in_record = [h for n in range(number, covered + 1) for h in by_line.get(n, ())]
            for hit, merged in zip(in_record, facts, strict=True):
                if merged is not None:
                    replaced[id(hit)] = Hit(compiled=hit.compiled, line=hit.line, facts=merged)
        if new:
            added[number] = [Hit(compiled=c, line=first, facts=f) for c, f in new]
    if not replaced and not added:
        return hits
    out: list[Hit] = []
    for number in sorted(by_line.keys() | added.keys()):
        out.extend(replaced.get(id(hit), hit) for hit in by_line.get(number, ()))
        out.extend(added.get(number, ()))
    return out
