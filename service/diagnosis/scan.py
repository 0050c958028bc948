"""Finding every signature in a document, fast: one RE2 pass over the whole text, rules per candidate.

Looping ~200 regexes over every line in Python is slow. Instead the OR of all patterns (anchors and
names removed) runs once over the UTF-8 bytes; only lines it hits are normalized, an RE2 set says
which patterns may apply, and just those full patterns run to extract facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.diagnosis.normalize import Document, Line
from service.packs import PatternIndex
from service.packs.signatures import CompiledRule, convert_fact, other_process

__all__ = ["Hit", "match_line", "parse_pairs", "present", "scan", "scan_lines"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One rule matched on one line, with the facts its named groups stated."""

    compiled: CompiledRule
    line: Line
    facts: dict[str, object]

    @property
    def rule_id(self) -> str:
        return self.compiled.rule.id


def parse_pairs(body: str) -> dict[str, tuple[str, bool]]:
    """`a=1, b='x'` or `{'a': 1, 'b': 'x'}` -> {'a': ('1', False), 'b': ('x', True)}; first wins.

    The flag says whether the value was quoted: a model name is only trusted when it was, since
    `LLM(model=path)` names a variable, not a model.
    """
    pairs: dict[str, tuple[str, bool]] = {}
    i, size = 0, len(body)
    while i < size:
        start = i
        while i < size and (body[i].isalnum() or body[i] in "_'\""):
            i += 1
        key = body[start:i].strip("'\"")
        while i < size and body[i] == " ":
            i += 1
        if not key or i >= size or body[i] not in "=:":
            i = max(i, start + 1)
            continue
        i += 1
        while i < size and body[i] == " ":
            i += 1
        quoted = i < size and body[i] in "'\""
        value, i = _read_value(body, i)
        pairs.setdefault(key, (value, quoted))
    return pairs


def _read_value(body: str, i: int) -> tuple[str, int]:
    size = len(body)
    if i < size and body[i] in "'\"":
        quote = body[i]
        end = body.find(quote, i + 1)
        end = size if end < 0 else end
        return body[i + 1 : end], end + 1
    depth = 0
    start = i
    while i < size:
        char = body[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            break
        i += 1
    return body[start:i].strip(), i + 1


def match_line(compiled: CompiledRule, text: str, only: set[int] | None = None) -> dict[str, object] | None:
    """Facts stated by `text` under this rule, or None when no pattern matches.

    `only` names the patterns the prefilter set already matched on this line; a plain one (no
    groups, no anchors) then needs no second run.
    """
    rule = compiled.rule
    if any(exclude.search(text) for exclude in compiled.excludes):
        return None
    facts: dict[str, object] = {}
    matched = False
    listed = any(spec.field for spec in rule.facts.values())
    for index, regex in enumerate(compiled.regexes):
        if only is not None and index not in only:
            continue
        if only is not None and compiled.plain[index]:
            matched = True
            continue
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
            if name == "body":
                _pair_facts(compiled, raw, facts)
                continue
            if name == "command":
                facts.setdefault("command", raw)
                continue
            spec = rule.facts[name]
            value = convert_fact(spec.fact, spec.unit, raw)
            if value is not None:
                facts.setdefault(spec.fact, value)
    return facts if matched else None


def _list_facts(compiled: CompiledRule, regex: Any, text: str) -> list[object]:
    facts = compiled.rule.facts
    pid_group = next(name for name, spec in facts.items() if spec.field == "pid")
    used_group = next(name for name, spec in facts.items() if spec.field == "used_gib")
    unit = facts[used_group].unit
    found: list[object] = []
    for match in regex.finditer(text):
        record = other_process(match.group(pid_group) or "", match.group(used_group) or "", unit)
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


def scan(doc: Document, index: PatternIndex) -> list[Hit]:
    """Every hit of `index`'s rules in the whole document, in line order."""
    return _scan_bytes(doc, index, doc.data, 1)


def scan_lines(doc: Document, index: PatternIndex, first: int, last: int) -> list[Hit]:
    """Hits of `index`'s rules on lines first..last only (for lazy stage/frame lookups)."""
    first, last = max(1, first), min(len(doc.lines), last)
    if first > last:
        return []
    data = "\n".join(doc.lines[first - 1 : last]).encode("utf-8", errors="replace")
    return _scan_bytes(doc, index, data, first)


def present(doc: Document, index: PatternIndex) -> list[CompiledRule]:
    """Rules of `index` with a pattern matching anywhere in the document (one RE2 pass)."""
    if not index.pattern_owner:
        return []
    found = {index.pattern_owner[i][0] for i in index.pattern_set.Match(doc.data) or ()}
    return [index.rules[i] for i in sorted(found)]


def _scan_bytes(doc: Document, index: PatternIndex, data: bytes, first_line: int) -> list[Hit]:
    if index.prefilter is None:
        return []
    hits: list[Hit] = []
    pos, line_no, counted_to = 0, first_line, 0
    size = len(data)
    search = index.prefilter.search
    while pos < size:
        match = search(data, pos)
        if match is None:
            break
        begin = match.start()
        start = data.rfind(b"\n", 0, begin) + 1
        end = data.find(b"\n", begin)
        end = size if end < 0 else end
        line_no += data.count(b"\n", counted_to, start)
        counted_to = start
        hits.extend(_hits_on_line(doc, index, line_no, data[start:end]))
        pos = end + 1
    return hits


def _hits_on_line(doc: Document, index: PatternIndex, number: int, raw: bytes) -> list[Hit]:
    line = doc.line(number)
    by_rule: dict[int, set[int]] = {}
    for pattern_index in index.pattern_set.Match(raw) or ():
        rule_index, regex_index = index.pattern_owner[pattern_index]
        by_rule.setdefault(rule_index, set()).add(regex_index)
    hits: list[Hit] = []
    for rule_index in sorted(by_rule):
        compiled = index.rules[rule_index]
        text = line.text if compiled.rule.target == "message" else doc.lines[number - 1]
        facts = match_line(compiled, text, by_rule[rule_index])
        if facts is not None:
            hits.append(Hit(compiled=compiled, line=line, facts=facts))
    return hits
