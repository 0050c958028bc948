"""Knowing a vLLM message from a fragment of its template (service/packs/fragments.py).

A line holding a seed (three or four words only templates of one phase contain) is aligned word by
word with each template holding that seed; the template most of whose words the line shows wins, and how much
of it was seen is the match's strength. The words between two matched literals, or right after the
last one, are the template's holes: the template is rendered with them, and the rule that matches
the template reads its facts from that rendering. A hole the line does not show is rendered twice
with two different stand-ins, and a fact that changes with them was never stated, so it is dropped.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from difflib import SequenceMatcher

import msgspec

from service.diagnosis.continued import record_text
from service.diagnosis.exception_lines import exception_line
from service.diagnosis.normalize import Document, Line
from service.diagnosis.scan import Hit, match_line
from service.first_use import first_use_re
from service.packs.fragments import (
    HOLE_WORD,
    LEVEL_RANK,
    SEED_SIZES,
    FragmentIndex,
    seeds_of,
    separated,
    words,
)
from service.packs.inventory import pieces
from service.packs.signatures import CompiledRule

__all__ = ["FragmentHit", "find_fragments", "loudest_printing", "stated_facts"]

# Stand-ins for a hole the line does not show, by hole shape; two sets, so a fact read from one is seen
_STAND_INS: tuple[dict[str, str], dict[str, str]] = (
    {"int": "909091", "float": "9090.91", "size": "9090.91 GiB", "text": "909091"},
    {"int": "909092", "float": "9090.92", "size": "9090.92 GiB", "text": "909092"},
)
_MAX_HOLE = 120
_FIRST_CHUNK = first_use_re(r"\s*(\S+)")
_LAST_CHUNK = first_use_re(r"(\S+)\s*$")
_TRIM = " \t()[]{}:,;'\"`"
MIN_RUN = 2  # shorter runs of common words are chance, not the template
# Less than this of a template is a coincidence of words (a command line's flag names), not its message
MIN_WORDS = 5
MIN_SHARE = 0.15
# Work per paste stays bounded on any input: distinct candidate lines aligned, and hits kept (every
# rank and retry may repeat the message; the first ones decide)
MAX_LINES = 400
MAX_HITS = 16

# How loud each printing is: the level a logger prefix shows (service.diagnosis.normalize), and the
# inventory's `level` of a template (how vLLM's source prints it). vLLM prints a message at one
# level, so a line its logger printed quieter than the template's level is another message that
# shares some words (a start-up WARNING is no fragment of a ValueError vLLM raises, an INFO line
# none of a warning); a line with no logger prefix (a traceback, a wrapper, a person) may be any.
_LOGGED = {"DEBUG": 0, "INFO": 1, "WARN": 2, "WARNING": 2, "ERROR": 3, "CRITICAL": 4}


def _quieter(line: Line, level: str) -> bool:
    """Whether vLLM's logger printed `line` at a lower level than a template of `level` is printed."""
    logged = _LOGGED.get(line.level.upper())
    return logged is not None and logged < LEVEL_RANK.get(level, 0)


def loudest_printing(line: Line, levels: frozenset[str]) -> int | None:
    """How loud the printing `line` shows is, of a wording vLLM prints at `levels` (the inventory's,
    one per era): the loudest its logger prefix allows, or None when it shows none of them."""
    allowed = [LEVEL_RANK.get(level, 0) for level in levels if not _quieter(line, level)]
    ranks = allowed or [LEVEL_RANK.get(level, 0) for level in levels]
    return max(ranks) if ranks else None


class FragmentHit(msgspec.Struct, frozen=True):
    """A rule's message recognised from part of its template; `seen` is the share of its words,
    `covered` the share of the line's words that are the template's (a message cut short covers its
    line, a person's sentence borrowing a few of its words does not)."""

    hit: Hit
    seen: float
    covered: float = 1.0


def find_fragments(
    doc: Document, index: FragmentIndex, rules: dict[str, CompiledRule], skip: set[int]
) -> list[FragmentHit]:
    """Every line (not in `skip`) that shows a fragment of a decisive template, in line order."""
    found: list[FragmentHit] = _cut_heads(doc, index, rules, skip)
    skip = skip | {f.hit.line.number for f in found}
    known: dict[str, FragmentHit | None] = {}  # identical lines are aligned once (DESIGN §6)
    for number in _candidate_lines(doc, index):
        if number in skip:
            continue
        line = doc.line(number)
        record = record_text(doc, line)
        if record in known:
            earlier = known[record]
            if earlier is not None:
                found.append(
                    FragmentHit(
                        Hit(earlier.hit.compiled, line, earlier.hit.facts), earlier.seen, earlier.covered
                    )
                )
                if len(found) >= MAX_HITS:
                    break
            continue
        if len(known) >= MAX_LINES:
            break
        matched = _best_template(line, line.text, index, rules)
        if record != line.text:  # a hard-wrapped message: its record may show more of the template
            joined = _best_template(line, record, index, rules)
            if joined is not None and (matched is None or joined.seen > matched.seen):
                matched = joined
        known[record] = matched
        if matched is not None:
            found.append(matched)
        if len(found) >= MAX_HITS:
            break
    return sorted(found, key=lambda f: f.hit.line.number)


def _cut_heads(
    doc: Document, index: FragmentIndex, rules: dict[str, CompiledRule], skip: set[int]
) -> list[FragmentHit]:
    """Exception lines whose message is only the opening words of a raised template (the paste or
    the log cut it there: `ValueError: Prequant BitsAndBytes`), of the same exception, where every
    template opening with those words is of one phase (the table's `heads`)."""
    heads = index.table.heads
    if not heads:
        return []
    found: list[FragmentHit] = []
    for number, text in enumerate(doc.lines, start=1):
        if number in skip or "Error" not in text and "Exception" not in text:
            continue
        line = doc.line(number)
        raised = exception_line(line.text)
        if raised is None or not raised.message:
            continue
        shown = [w for w, _, _ in words(unicodedata.normalize("NFKC", raised.message))]
        name = raised.name
        opened = [
            c for c in heads.get(" ".join(shown), ()) if index.table.templates[c].exception in (name, None)
        ]
        if not opened:
            continue
        spec = index.table.templates[opened[0]]
        compiled = rules.get(spec.rule)
        if compiled is None:
            continue
        literal = sum(1 for w in index.template_words[opened[0]] if w != HOLE_WORD)
        found.append(FragmentHit(Hit(compiled=compiled, line=line, facts={}), round(len(shown) / literal, 3)))
        if len(found) >= MAX_HITS:
            break
    return found


def _candidate_lines(doc: Document, index: FragmentIndex) -> Iterator[int]:
    """Numbers of the lines holding a seed (one RE2 pass over the text with separators as spaces)."""
    prefilter = index.prefilter
    if prefilter is None:
        return
    data = separated(doc.text)
    pos, line_no, counted = 0, 1, 0
    while True:
        match = prefilter.search(data, pos)
        if match is None:
            return
        start = data.rfind(b"\n", 0, match.start()) + 1
        line_no += data.count(b"\n", counted, start)
        counted = start
        yield line_no
        end = data.find(b"\n", match.start())
        if end < 0:
            return
        pos = end + 1


def _best_template(
    line: Line, shown: str, index: FragmentIndex, rules: dict[str, CompiledRule]
) -> FragmentHit | None:
    """The template most of whose words `shown` (the line's text, or its record joined back across
    a hard wrap) holds, as a hit on `line`."""
    text = unicodedata.normalize("NFKC", shown)
    spans = words(text)
    tokens = [w for w, _, _ in spans]
    candidates: set[int] = set()
    for seed in seeds_of(tokens):
        candidates.update(index.table.seeds.get(seed, ()))
    tied: list[tuple[int, dict[int, int]]] = []
    best_seen, best_count = 0.0, 0
    for candidate in sorted(candidates):
        if _quieter(line, index.table.templates[candidate].level):
            continue
        template = index.template_words[candidate]
        matcher = SequenceMatcher(None, tokens, template, autojunk=False)
        blocks = [b for b in matcher.get_matching_blocks() if b.size >= MIN_RUN]
        if not blocks or max(b.size for b in blocks) < min(SEED_SIZES):
            continue
        literal = sum(1 for w in template if w != HOLE_WORD)
        count = sum(b.size for b in blocks)
        seen = count / literal
        if count < MIN_WORDS or seen < MIN_SHARE or seen < best_seen:
            continue
        aligned = {b.b + k: b.a + k for b in blocks for k in range(b.size)}
        if seen > best_seen:
            tied, best_seen, best_count = [], seen, 0
        best_count = max(best_count, count)
        tied.append((candidate, aligned))
    # templates the line matches equally well (with and without the device's name) differ in the
    # facts they read from it: the one reading most decides
    found = [h for h in (_hit(line, text, spans, index, rules, c, a) for c, a in tied) if h is not None]
    if not found:
        return None
    best = max(found, key=lambda h: len(h.facts))
    return FragmentHit(best, round(min(1.0, best_seen), 3), round(min(1.0, best_count / len(tokens)), 3))


def _hit(
    line: Line,
    text: str,
    spans: list[tuple[str, int, int]],
    index: FragmentIndex,
    rules: dict[str, CompiledRule],
    candidate: int,
    aligned: dict[int, int],
) -> Hit | None:
    spec = index.table.templates[candidate]
    compiled = rules.get(spec.rule)
    if compiled is None:
        return None
    values = _hole_values(text, spans, index.template_words[candidate], aligned, pieces(spec.text))
    facts = stated_facts(compiled, spec.text, spec.holes, values)
    first = min(aligned)
    if first > 0:  # the opening words are missing: put the template's own head back before the line's
        restored = [
            _head(spec.text, spec.holes, first, s) + text[spans[aligned[first]][1] :] for s in _STAND_INS
        ]
        for name, value in _agreed(compiled, restored[0], restored[1]).items():
            facts.setdefault(name, value)
    return Hit(compiled=compiled, line=line, facts=facts)


def _hole_values(
    text: str,
    spans: list[tuple[str, int, int]],
    template: list[str],
    aligned: dict[int, int],
    literals: list[str],
) -> list[str | None]:
    """The text the line shows in each hole: between the matched words around it, or right after
    the word before it when the line stops there. Holes with no word between them (`({}/{} GiB)`)
    share one stretch of the line, split at the template's own separators (`/`)."""
    values: list[str | None] = []
    holes = [j for j, word in enumerate(template) if word == HOLE_WORD]
    index = 0
    while index < len(holes):
        run = 1
        while index + run < len(holes) and holes[index + run] == holes[index] + run:
            run += 1
        first, last = holes[index], holes[index + run - 1]
        before, after = aligned.get(first - 1), aligned.get(last + 1)
        stretch: str | None = None
        if before is not None and after is not None and after > before:
            stretch = text[spans[before][2] : spans[after][1]]
        elif before is not None:
            stretch = text[spans[before][2] :]
        elif after is not None and run == 1:
            chunk = _LAST_CHUNK.search(text[: spans[after][1]])
            stretch = chunk.group(1) if chunk else None
        separators = [literals[index + k + 1].strip() for k in range(run - 1)]
        for value in _split_stretch(stretch, separators, whole=after is not None and before is not None):
            value = value.strip(_TRIM) if value is not None else None
            values.append(value if value and len(value) <= _MAX_HOLE else None)
        index += run
    return values


def _split_stretch(stretch: str | None, separators: list[str], whole: bool) -> list[str | None]:
    """One value per hole of a run: the stretch cut at each separator in turn; without a word after
    the run (`whole` false) each value is only the first chunk of what is left."""
    out: list[str | None] = []
    rest = stretch
    for separator in [*separators, ""]:
        value: str | None = rest
        if rest is not None and separator:
            head, found, tail = rest.partition(separator)
            value, rest = (head, tail) if found else (rest, None)
        else:
            rest = None
        if not whole and value is not None:
            chunk = _FIRST_CHUNK.match(value)
            value = chunk.group(1) if chunk else None
        out.append(value)
    return out


def _render(text: str, shapes: list[str], values: list[str | None], stand_in: dict[str, str]) -> str:
    parts = pieces(text)
    out: list[str] = []
    for i, part in enumerate(parts):
        out.append(part)
        if i < len(parts) - 1:
            given = values[i] if i < len(values) else None
            shape = shapes[i] if i < len(shapes) else "text"
            out.append(given if given is not None else stand_in.get(shape, stand_in["text"]))
    return "".join(out).split("\n", 1)[0]


def _head(text: str, shapes: list[str], first_word: int, stand_in: dict[str, str]) -> str:
    """The template's text before its word number `first_word` (holes as stand-ins)."""
    out: list[str] = []
    count = 0
    for i, part in enumerate(pieces(text)):
        part = unicodedata.normalize("NFKC", part)
        for _, start, _ in words(part):
            if count == first_word:
                return "".join(out) + part[:start]
            count += 1
        out.append(part)
        count += 1  # the hole after this piece
        out.append(stand_in.get(shapes[i] if i < len(shapes) else "text", stand_in["text"]))
    return "".join(out)


def _agreed(compiled: CompiledRule, first_text: str, second_text: str) -> dict[str, object]:
    """Facts the rule reads alike from both renderings: the ones the line itself states."""
    first = match_line(compiled, first_text.encode())
    if not first:
        return {}
    second = match_line(compiled, second_text.encode()) or {}
    return {name: value for name, value in first.items() if second.get(name) == value}


def stated_facts(
    compiled: CompiledRule, text: str, shapes: list[str], values: list[str | None]
) -> dict[str, object]:
    rendered = [_render(text, shapes, values, stand_in) for stand_in in _STAND_INS]
    return _agreed(compiled, rendered[0], rendered[1])
