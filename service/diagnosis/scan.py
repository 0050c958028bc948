"""Finding every signature in a document, fast: one RE2 pass over the whole text, rules per candidate.

Looping ~200 regexes over every line in Python is slow. Instead the OR of all patterns (anchors and
names removed) runs once over the UTF-8 bytes; only lines it hits are normalized, an RE2 set says
which patterns may apply, and just those full patterns run to extract facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.diagnosis.normalize import Document, Line
from service.packs import SignatureIndex
from service.packs.signatures import CompiledRule, convert_fact, other_process

__all__ = ["Hit", "match_line", "parse_pairs", "scan"]


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


def match_line(compiled: CompiledRule, text: str, only: int | None = None) -> dict[str, object] | None:
    """Facts stated by `text` under this rule, or None when no pattern matches."""
    rule = compiled.rule
    if any(exclude.search(text) for exclude in compiled.excludes):
        return None
    facts: dict[str, object] = {}
    matched = False
    for index, regex in enumerate(compiled.regexes):
        if only is not None and index != only:
            continue
        if any(spec.field for spec in rule.facts.values()):
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


def scan(doc: Document, index: SignatureIndex) -> list[Hit]:
    """Every rule hit in the document, in line order."""
    if index.prefilter is None:
        return []
    data = doc.text.encode("utf-8")
    hits: list[Hit] = []
    pos, line_no, counted_to = 0, 1, 0
    size = len(data)
    while pos < size:
        match = index.prefilter.search(data, pos)
        if match is None:
            break
        start = data.rfind(b"\n", 0, match.start()) + 1
        end = data.find(b"\n", match.start())
        end = size if end < 0 else end
        line_no += data.count(b"\n", counted_to, start)
        counted_to = start
        hits.extend(_hits_on_line(doc, index, line_no, data[start:end]))
        pos = end + 1
    return hits


def _hits_on_line(doc: Document, index: SignatureIndex, number: int, raw: bytes) -> list[Hit]:
    line = doc.line(number)
    hits: list[Hit] = []
    seen: set[int] = set()
    for pattern_index in sorted(index.pattern_set.Match(raw)):
        rule_index, regex_index = index.pattern_owner[pattern_index]
        if rule_index in seen:
            continue
        compiled = index.rules[rule_index]
        facts = match_line(compiled, line.text)
        if facts is not None:
            seen.add(rule_index)
            hits.append(Hit(compiled=compiled, line=line, facts=facts))
    return hits
