"""Finding every signature in a document, fast: one RE2 pass over the whole text, rules per candidate.

Looping ~200 regexes over every line in Python is slow. Instead the OR of all patterns (anchors and
names removed) runs once over the UTF-8 bytes; only lines it hits are normalized, an RE2 set says
which patterns may apply, and just those full patterns run to extract facts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from typing import Any

from service.diagnosis.normalize import MEMO_LINES, Document, Line, memo_key, run_of, run_span, split_spans
from service.first_use import first_use_re
from service.packs import PatternIndex
from service.packs.signatures import CompiledRule, convert_fact, other_process

__all__ = [
    "MAX_EXAMINED_LINES",
    "Hit",
    "LineBlocks",
    "Scan",
    "index_memo",
    "match_line",
    "parse_pairs",
    "present",
    "scan",
    "scan_document",
    "scan_lines",
    "without_copies",
]


@dataclass(frozen=True, slots=True)
class Hit:
    """One rule matched on one line, with the facts its named groups stated."""

    compiled: CompiledRule
    line: Line
    facts: dict[str, object]
    repeats: int = 1  # identical lines this hit stands for (the same line pasted on consecutive lines)

    @property
    def rule_id(self) -> str:
        return self.compiled.rule.id


# One pass over a `key=value` body: a key (word characters, maybe quoted) and its separator, then its
# value read by jumping between quotes, brackets and commas instead of visiting every character.
_KEY = first_use_re(r"""([\w'"]+) *[=:] *""")
_DELIMITER = first_use_re(r"[,()\[\]{}]")


def parse_pairs(body: str) -> dict[str, tuple[str, bool]]:
    """`a=1, b='x'` or `{'a': 1, 'b': 'x'}` -> {'a': ('1', False), 'b': ('x', True)}; first wins.

    The flag says whether the value was quoted: a model name is only trusted when it was, since
    `LLM(model=path)` names a variable, not a model.
    """
    pairs: dict[str, tuple[str, bool]] = {}
    at = 0
    while (match := _KEY.search(body, at)) is not None:
        key = match.group(1).strip("'\"")
        at = match.end()
        quoted = at < len(body) and body[at] in "'\""
        value, at = _read_value(body, at)
        if key:
            pairs.setdefault(key, (value, quoted))
    return pairs


def _read_value(body: str, at: int) -> tuple[str, int]:
    """The value starting at `at` and where reading goes on (past its closing quote or comma)."""
    if at < len(body) and body[at] in "'\"":
        end = body.find(body[at], at + 1)
        end = len(body) if end < 0 else end
        return body[at + 1 : end], end + 1
    depth = 0
    for delimiter in _DELIMITER.finditer(body, at):
        char = delimiter.group()
        if char in "([{":
            depth += 1
        elif depth and char != ",":
            depth -= 1
        elif not depth:
            return body[at : delimiter.start()].strip(), delimiter.start() + 1
    return body[at:].strip(), len(body) + 1


def match_line(
    compiled: CompiledRule, text: bytes, only: frozenset[int] | None = None
) -> dict[str, object] | None:
    """Facts stated by `text` (UTF-8) under this rule, or None when no pattern matches.

    `only` names the patterns the prefilter set already matched on this line; a plain one (no
    groups, no anchors) then needs no second run. Patterns run on bytes, so the RE2 wrapper neither
    re-encodes the line nor maps offsets back to characters; only captured groups are decoded.
    """
    rule = compiled.rule
    if any(exclude.search(text) for exclude in compiled.excludes):
        return None
    facts: dict[str, object] = {}
    matched = False
    listed = any(spec.field for spec in rule.facts.values())
    regexes = compiled.regexes
    for index in range(len(regexes)):
        if only is not None and index not in only:
            continue
        if only is not None and compiled.plain[index]:
            matched = True
            continue
        regex = regexes[index]  # compiled on first use: only what a line needs
        if listed:
            found = _list_facts(compiled, regex, text)
            if found:
                matched = True
                facts.setdefault("other_processes", found)
            continue
        match = regex.search(text)
        if match is None:
            continue
        matched = True
        for name, raw in match.groupdict().items():
            if raw is None:
                continue
            value_text = raw.decode("utf-8", errors="replace")
            if name == "body":
                _pair_facts(compiled, value_text, facts)
                continue
            if name == "command":
                facts.setdefault("command", value_text)
                continue
            spec = rule.facts[name]
            value = convert_fact(spec.fact, spec.unit, value_text)
            if value is not None:
                for fact in (spec.fact, *spec.also):
                    facts.setdefault(fact, value)
    return facts if matched else None


def _list_facts(compiled: CompiledRule, regex: Any, text: bytes) -> list[object]:
    facts = compiled.rule.facts
    pid_group = next(name for name, spec in facts.items() if spec.field == "pid")
    used_group = next(name for name, spec in facts.items() if spec.field == "used_gib")
    unit = facts[used_group].unit
    found: list[object] = []
    for match in regex.finditer(text):
        pid = (match.group(pid_group) or b"").decode("utf-8", errors="replace")
        used = (match.group(used_group) or b"").decode("utf-8", errors="replace")
        record = other_process(pid, used, unit)
        if record is not None:
            found.append(record)
    return found


def _pair_facts(compiled: CompiledRule, body: str, facts: dict[str, object]) -> None:
    for key, (value, quoted) in parse_pairs(body).items():
        fact = compiled.rule.keys.get(key)
        if fact is None or (fact == "model" and not quoted):
            continue
        converted = convert_fact(fact, None, value)
        if converted is not None:
            facts.setdefault(fact, converted)


# The most matched lines one document may cost (a run of identical lines counts once); past it the
# scan stops and the answer says how far it read (`Scan.stopped_at`).
MAX_EXAMINED_LINES = 4000


@dataclass(frozen=True, slots=True)
class Scan:
    """The hits of one document, how many matched lines were examined, and where the scan stopped
    when it reached MAX_EXAMINED_LINES (None when it read everything)."""

    hits: list[Hit]
    examined: int
    stopped_at: int | None
    # byte spans of the scanned text holding the copies of a line repeated on consecutive lines
    # (every copy but the first): a position-free pass may skip them
    copies: tuple[tuple[int, int], ...] = ()


def scan(doc: Document, index: PatternIndex) -> list[Hit]:
    """Every hit of `index`'s rules in the whole document, in line order (up to the bound)."""
    return scan_document(doc, index).hits


def scan_document(doc: Document, index: PatternIndex, limit: int = MAX_EXAMINED_LINES) -> Scan:
    """The hits in the whole document, examining at most `limit` matched lines."""
    return _Scanner(doc, index).run_document(limit)


def scan_lines(doc: Document, index: PatternIndex, first: int, last: int) -> list[Hit]:
    """Hits of `index`'s rules on lines first..last only (for lazy stage/frame lookups)."""
    first, last = max(1, first), min(len(doc.lines), last)
    if first > last:
        return []
    data = doc.lines_data(first, last)
    return _Scanner(doc, index).hits_in(data, first)


class LineBlocks:
    """Hits of one index on a document, scanned range by range as ranges are asked for.

    Every line is scanned at most once however many ranges overlap (one OOM's traceback window,
    another's walk back to its process's last marker), and only the lines a range asks for (with
    the rest of a run of identical lines it cuts into): a five-line traceback window does not scan
    the fifty serving lines above it until a walk back asks for them. A run of identical lines is
    one hit at its first line, counting the whole run, whichever ranges it was asked in, and one
    line memo serves every range, so a line repeated across the document is examined once.
    """

    __slots__ = ("_hits", "_numbers", "_scanned", "_scanner", "doc", "scanned")

    def __init__(self, doc: Document, index: PatternIndex) -> None:
        self.doc = doc
        self._scanner = _Scanner(doc, index)
        self._scanned = bytearray(len(doc.lines) + 1)  # 1 at each line number already scanned
        self._hits: dict[int, list[Hit]] = {}  # a hit's line number -> its hits, in rule order
        self._numbers: list[int] = []  # the keys of `_hits`, ascending
        self.scanned = 0  # lines scanned so far

    def _scan(self, first: int, last: int) -> None:
        """Scan lines first..last (none scanned yet), widened to whole runs of identical lines."""
        lines = self.doc.lines
        first = run_span(lines, first - 1)[0] + 1
        last = run_span(lines, last - 1)[1] + 1
        data = self.doc.lines_data(first, last)
        self._scanned[first : last + 1] = b"\1" * (last - first + 1)
        self.scanned += last - first + 1
        for hit in self._scanner.hits_in(data, first):
            number = hit.line.number
            if number not in self._hits:
                self._hits[number] = []
                insort(self._numbers, number)
            self._hits[number].append(hit)

    def hits(self, first: int, last: int) -> list[Hit]:
        """Hits on lines first..last, in line order; each stretch not scanned yet is scanned at once."""
        first, last = max(1, first), min(len(self.doc.lines), last)
        if first > last:
            return []
        scanned, at = self._scanned, first
        while (at := scanned.find(0, at, last + 1)) >= 0:
            end = scanned.find(1, at, last + 1)
            end = last + 1 if end < 0 else end
            self._scan(at, end - 1)
            at = end
        numbers = self._numbers
        found: list[Hit] = []
        for number in numbers[bisect_left(numbers, first) : bisect_right(numbers, last)]:
            found.extend(self._hits[number])
        return found


def without_copies(data: bytes, copies: tuple[tuple[int, int], ...]) -> bytes:
    """`data` without the byte spans `copies` (in order, not overlapping)."""
    if not copies:
        return data
    pieces, done = [], 0
    for start, end in copies:
        pieces.append(data[done:start])
        done = end
    pieces.append(data[done:])
    return b"".join(pieces)


def present(
    doc: Document, index: PatternIndex, copies: tuple[tuple[int, int], ...] = ()
) -> list[CompiledRule]:
    """Rules of `index` with a pattern matching anywhere in the document: one RE2 pass over each
    distinct line once when lines repeat, else over the text less `copies` (a scan's runs of
    repeated lines)."""
    if not index.pattern_owner:
        return []
    data = doc.distinct.data if doc.repeating else without_copies(doc.data, copies)
    found = {index.pattern_owner[i][0] for i in index.pattern_set.Match(data) or ()}
    return [index.rules[i] for i in sorted(found)]


# What one distinct line yields: its source and level, where its message starts and ends in the
# line, and each matching rule with its facts.
_LineResult = tuple[str, str, int, int, tuple[tuple[CompiledRule, dict[str, object]], ...]]


def index_memo(index: PatternIndex, name: str) -> dict[Any, Any]:
    """One of the index's process-wide memos of what a text alone yields under it (a line's reading,
    a (rule, text) match, a joined record's), started again empty once it holds MEMO_LINES."""
    memo: dict[Any, Any] | None = index.memo.get(name)
    if memo is None or len(memo) >= MEMO_LINES:
        memo = index.memo[name] = {}
    return memo


class _Scanner:
    """One scan of one document: each distinct line is examined once, each (rule, text) matched once,
    and a run of identical lines becomes one hit that counts them.

    What a line yields depends on its text and the index alone, so both memos are the index's own,
    shared by every document the process scans: a line another request (or another pass over this
    one: the records, the stage lookups) already read costs a digest and a dictionary lookup. They
    are keyed by the line's digest (`memo_key`) and keep where its message lies, not the message,
    so no line outlives its request in them. The facts a memo hands out are shared and never
    changed (a hit that adds facts builds a new dict).
    """

    __slots__ = ("doc", "index", "lines", "rules")

    def __init__(self, doc: Document, index: PatternIndex) -> None:
        self.doc = doc
        self.index = index
        self.lines: dict[bytes, _LineResult] = index_memo(index, "lines")  # by the line's digest
        self.rules: dict[tuple[int, bytes, frozenset[int]], dict[str, object] | None]  # target's digest
        self.rules = index_memo(index, "rules")

    def hits_in(self, data: bytes, first_line: int) -> list[Hit]:
        """The hits on the lines `data` holds (the first of them line `first_line`), in line order.

        The lines are found by the prefilter's loosened forms alone (`candidates`): a line they find
        that no exact form matches inside yields no hit anyway (each rule's prefilter is its
        patterns' anchor-free form, so a line a pattern matches is one its prefilter matches), and
        `hits_on_line` reads each distinct line once, so the exact check per line found would only
        repeat what the line's reading already knows."""
        if self.index.prefilter is None:
            return []
        hits: list[Hit] = []
        pos, line_no, counted_to = 0, first_line, 0
        size = len(data)
        search = self.index.prefilter.candidates
        while pos < size:
            match = search(data, pos)
            if match is None:
                break
            begin = match.start()
            start = data.rfind(b"\n", 0, begin) + 1
            end = data.find(b"\n", begin)
            end = size if end < 0 else end
            line_no += data.count(b"\n", counted_to, start)
            raw = data[start:end]
            repeats, pos = run_of(data, raw, end)
            hits.extend(self.hits_on_line(line_no, raw, repeats))
            line_no, counted_to = line_no + repeats, pos
        return hits

    def run_document(self, limit: int | None) -> Scan:
        """The whole document: the prefilter runs over each distinct line once, and only the lines it
        hits are walked, in order, a run of identical lines at a time."""
        if self.index.prefilter is None:
            return Scan(hits=[], examined=0, stopped_at=None)
        doc = self.doc
        hits: list[Hit] = []
        copies: list[tuple[int, int]] = []
        examined = matched = 0
        raws: dict[str, bytes] = {}
        for number, repeats in doc.matched_runs(self.index.prefilter):
            if limit is not None and examined >= limit:
                _note_repeats(doc, len(raws), matched)
                return Scan(hits, examined, number, tuple(copies))
            examined += 1
            matched += repeats
            if repeats > 1:
                copies.append((doc.line_end(number), doc.line_end(number + repeats - 1)))
            text = doc.lines[number - 1]
            raw = raws.get(text)
            if raw is None:
                raw = raws[text] = text.encode("utf-8", errors="replace")
            hits.extend(self.hits_on_line(number, raw, repeats))
        _note_repeats(doc, len(raws), matched)
        return Scan(hits, examined, None, tuple(copies))

    def hits_on_line(self, number: int, raw: bytes, repeats: int) -> list[Hit]:
        key = memo_key(raw)
        result = self.lines.get(key)
        if result is None:
            result = self._examine(number, raw, key)
            self.lines[key] = result
        source, level, start, end, matched = result
        line = self.doc.known_line(number, source, level, self.doc.lines[number - 1][start:end])
        return [Hit(compiled=c, line=line, facts=facts, repeats=repeats) for c, facts in matched]

    def _examine(self, number: int, raw: bytes, raw_key: bytes) -> _LineResult:
        by_rule: dict[int, set[int]] = {}
        for pattern_index in self.index.pattern_set.Match(raw) or ():
            rule_index, regex_index = self.index.pattern_owner[pattern_index]
            by_rule.setdefault(rule_index, set()).add(regex_index)
        whole = self.doc.lines[number - 1]
        source, level, start, end = split_spans(whole)
        message: tuple[bytes, bytes] | None = None
        matched: list[tuple[CompiledRule, dict[str, object]]] = []
        for rule_index in sorted(by_rule):
            compiled = self.index.rules[rule_index]
            if compiled.rule.target == "message":
                if message is None:
                    text = _message_bytes(raw, whole, whole[start:end])
                    message = text, memo_key(text)
                target, target_key = message
            else:
                target, target_key = raw, raw_key
            only = frozenset(by_rule[rule_index])
            key = (rule_index, target_key, only)
            if key not in self.rules:
                self.rules[key] = match_line(compiled, target, only)
            facts = self.rules[key]
            if facts is not None:
                matched.append((compiled, facts))
        return source, level, start, end, tuple(matched)


def _note_repeats(doc: Document, distinct: int, matched: int) -> None:
    """Tell the document whether the `matched` lines the scan matched (every copy in a run of
    identical lines counted) repeat: a fifth of them or more are copies of earlier ones. Later
    passes then read each distinct line once (one OOM line pasted 14,000 times is one line to read,
    not a 2 MB text)."""
    if doc.repeating is None:
        doc.repeating = distinct * 5 < matched * 4


def _message_bytes(raw: bytes, line: str, message: str) -> bytes:
    """The message's UTF-8: a slice of the raw line when it is ASCII (as log lines mostly are)."""
    if raw.isascii():
        at = line.find(message)
        return raw[at : at + len(message)]
    return message.encode("utf-8", errors="replace")
