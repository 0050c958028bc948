"""Knowing a vLLM message a person retyped in their own shorthand, numbers and all.

`Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57 GiB)` is the start-up
check's template (`Free memory on device ({}/{} GiB) on startup is less than desired GPU memory
utilization ({}, {} GiB). …`) with words dropped and `<` for "is less than": too few runs of its
words for the fragment seeds (service/diagnosis/fragments.py), yet the numbers stand in the
template's holes in the template's order. This matcher aligns a line with each decisive template
(its literal words in order, a number in each numeric hole, case and punctuation ignored, any word
of either side may be left out) and keeps the alignment only when it has the template's shape:

- at least `MIN_NUMBERS` numeric holes filled, and no other number inside the aligned stretch of
  the line (a sentence quoting a few of the template's words has no numbers where its holes are);
- each filled run of holes next to a word of the template around it (`MAX_GAP`);
- at least `MIN_WORDS` of the template's literal words, `MIN_SHARE` of those in the stretch of the
  template it covers;
- where the template states a comparison ("is less than", "exceeds", "larger than"), the line
  states it too, or opens with the exception class vLLM raises the template with (the inventory's
  `exception`: `ValueError: 1.75 GiB KV cache is needed, available 0.13 GiB`): the comparison, or the
  raise, is the check's verdict, and a line with neither is another message (V1's `Free memory on
  device (…) on startup. Desired GPU memory utilization is (…)` info line, which is never raised).

A line a logger printed (`INFO 01-14 08:10:25 worker.py:241] …`) is vLLM's own wording, never a
retyping. The holes are read as the template's own facts: the template is rendered with them and the rule
that matches it reads its named groups (`fragments.stated_facts`), so a retyped line states the
same fact names its original would. The hit is weaker than a fragment of the same share of words.
"""

from __future__ import annotations

import re
import unicodedata

import msgspec

from service.diagnosis.exception_lines import exception_line
from service.diagnosis.fragments import stated_facts
from service.diagnosis.normalize import Document
from service.diagnosis.scan import Hit
from service.first_use import first_use_re
from service.packs.fragments import RETYPED_COMMON, FragmentIndex, RetypedToken
from service.packs.signatures import CompiledRule

__all__ = ["RetypedHit", "find_retyped", "retyped_hit"]

MIN_NUMBERS = 2
MIN_WORDS = 3
MIN_SHARE = 0.4
MAX_GAP = 1  # tokens of the line between a number and the template word next to its hole
# A retyped message is one line of a person's: longer lines are logs or paragraphs, which a
# template's words and a few numbers meet by chance.
MAX_LINE = 400
MAX_LINES = 400  # lines aligned per paste (DESIGN §6: work per request is bounded)
_NUMERIC = frozenset({"int", "float", "size"})
_UNITS = frozenset({"gib", "mib", "kib", "gb", "mb", "kb", "bytes", "b", "tib", "tb"})
# Words that state a comparison: a template holding one is a check's verdict (`is less than`), and
# the symbols people write for them read as those words.
_COMPARISONS = frozenset(
    {"less", "greater", "larger", "smaller", "exceeds", "exceed", "exceeded", "exceeding", "more", "fewer"}
)
_SYMBOLS = (("<=", " less than "), (">=", " greater than "), ("<", " less than "), (">", " greater than "))
# A token: a device name with its index (`cuda:0`, `npu:3`) is one word, a number keeps its decimal
# point and thousands separators, a word is letters and underscores.
_TOKEN = first_use_re(
    r"[a-z_][a-z0-9_]*:\d+"  # cuda:0
    r"|(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?=(?:[kmgt]i?b|bytes)\b|(?![\w.]*[a-z]))"  # 1,360 38.74 3.5GiB
    r"|[a-z0-9_.]*[a-z_][a-z0-9_]*",  # words, fp8, e5m2
    re.IGNORECASE,
)
_COMMON = RETYPED_COMMON  # words too common to say which template a line retypes


class RetypedHit(msgspec.Struct, frozen=True):
    """A rule's message retyped: the hit (facts read from its holes) and the share of its words."""

    hit: Hit
    seen: float
    covered: float


def _line_tokens(text: str) -> list[RetypedToken]:
    text = unicodedata.normalize("NFKC", text)
    out: list[RetypedToken] = []
    for match in _TOKEN.finditer(text):
        word = match.group(0)
        kind = "number" if word[0].isdigit() else "word"
        out.append(RetypedToken(kind, word.lower(), match.start(), match.end()))
    return out


def _with_comparisons(text: str) -> str:
    """`text` with `<`/`>` between two values written as the words they stand for; the hole
    values are then read from this text, whose spans the tokens give."""
    if "<" not in text and ">" not in text:
        return text
    for symbol, words in _SYMBOLS:
        text = re.sub(rf"(?<=[\s\w)\]]){re.escape(symbol)}(?=[\s\w(\[])", words, text)
    return text


def _score(template: RetypedToken, line: RetypedToken) -> int:
    if template.kind == "word":
        return 2 if line.kind == "word" and line.text == template.text else 0
    if template.kind in _NUMERIC:
        return 3 if line.kind == "number" else 0
    return 1 if line.kind == "word" and line.text not in _COMMON else 0  # a text hole: one word


def _align(template: list[RetypedToken], line: list[RetypedToken]) -> list[tuple[int, int]]:
    """The best order-keeping pairing of template and line tokens (a weighted LCS)."""
    rows, cols = len(template), len(line)
    best = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        here, below = best[i], best[i + 1]
        for j in range(cols - 1, -1, -1):
            gain = _score(template[i], line[j])
            value = max(below[j], here[j + 1])
            if gain and below[j + 1] + gain > value:
                value = below[j + 1] + gain
            here[j] = value
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < rows and j < cols:
        gain = _score(template[i], line[j])
        if gain and best[i][j] == best[i + 1][j + 1] + gain:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


def _shaped(
    template: list[RetypedToken], line: list[RetypedToken], pairs: list[tuple[int, int]], raised: bool
) -> float | None:
    """The share of the template's words the alignment shows, when it has the template's shape."""
    numbers = [(i, j) for i, j in pairs if template[i].kind in _NUMERIC]
    words = [(i, j) for i, j in pairs if template[i].kind == "word"]
    if len(numbers) < MIN_NUMBERS or len(words) < MIN_WORDS:
        return None
    first, last = pairs[0], pairs[-1]
    used = {j for _, j in numbers}
    stray = [j for j in range(first[1], last[1] + 1) if line[j].kind == "number" and j not in used]
    if stray:
        return None
    span = [t for t in template[first[0] : last[0] + 1] if t.kind == "word"]
    if len(words) < MIN_SHARE * len(span):
        return None
    matched = dict(pairs)
    if not all(_anchored(template, matched, i) for i, _ in numbers):
        return None
    compares = any(t.kind == "word" and t.text in _COMPARISONS for t in template)
    if compares and not raised and not any(template[i].text in _COMPARISONS for i, _ in words):
        return None
    literal = sum(1 for t in template if t.kind == "word")
    return len(words) / literal if literal else None


def _anchored(template: list[RetypedToken], matched: dict[int, int], hole: int) -> bool:
    """Whether the run of holes around template token `hole` has a neighbouring literal word of the
    template matched within `MAX_GAP` tokens of the run's numbers on the line: a number stands where
    the template puts it (`utilization (0.35`), not somewhere in the same sentence."""
    first = last = hole
    while first > 0 and template[first - 1].kind != "word":
        first -= 1
    while last + 1 < len(template) and template[last + 1].kind != "word":
        last += 1
    placed = [matched[k] for k in range(first, last + 1) if k in matched]
    before, after = matched.get(first - 1), matched.get(last + 1)
    return (before is not None and min(placed) - before <= MAX_GAP + 1) or (
        after is not None and after - max(placed) <= MAX_GAP + 1
    )


def _values(
    template: list[RetypedToken], line: list[RetypedToken], text: str, pairs: list[tuple[int, int]]
) -> list[str | None]:
    """The text of each hole: its number (with the unit word after it, for a size), or a text hole's
    word; None for a hole the line does not show."""
    by_hole = dict(pairs)
    values: list[str | None] = []
    for i, token in enumerate(template):
        if token.kind == "word":
            continue
        j = by_hole.get(i)
        if j is None:
            values.append(None)
            continue
        value = text[line[j].start : line[j].end]
        if token.kind == "size" and j + 1 < len(line) and line[j + 1].text in _UNITS:
            value = text[line[j].start : line[j + 1].end]
        values.append(value)
    return values


def retyped_hit(
    text: str, index: FragmentIndex, rules: dict[str, CompiledRule], candidates: list[int]
) -> tuple[CompiledRule, list[str | None], int, float, float] | None:
    """The template among `candidates` that `text` retypes best: (rule, hole values, template,
    share of its words, share of the line's tokens it covers), or None. A line opening with the
    exception class a template is raised with states that template's verdict; one opening with
    another class retypes none of the templates raised with a class."""
    opened = exception_line(text)
    raised_as = opened.name if opened is not None and opened.message else None
    shown = _with_comparisons(text)
    line = _line_tokens(shown)
    if sum(1 for t in line if t.kind == "number") < MIN_NUMBERS:
        return None
    found: tuple[CompiledRule, list[str | None], int, float, float] | None = None
    for candidate in candidates:
        spec = index.table.templates[candidate]
        compiled = rules.get(spec.rule)
        raised_with = spec.exception.rsplit(".", 1)[-1] if spec.exception else None
        # the class a line opens with is the one its message was raised with: a template vLLM
        # raises with another class is another message (a trainer's `AssertionError: … must be
        # divisible by …` is not vLLM's ValueError about attention heads)
        other_class = raised_as is not None and raised_with is not None and raised_as != raised_with
        if compiled is None or other_class:
            continue
        template = index.retyped_tokens(candidate)
        pairs = _align(template, line)
        if not pairs:
            continue
        seen = _shaped(template, line, pairs, raised_as is not None and raised_as == raised_with)
        if seen is None or (found is not None and seen <= found[3]):
            continue
        covered = (pairs[-1][1] - pairs[0][1] + 1) / len(line)
        values = _values(template, line, shown, pairs)
        found = (compiled, values, candidate, round(seen, 3), round(covered, 3))
    return found


def find_retyped(
    doc: Document, index: FragmentIndex, rules: dict[str, CompiledRule], skip: set[int]
) -> list[RetypedHit]:
    """Every line (not in `skip`) that retypes a decisive template with its numbers, in line order."""
    found: list[RetypedHit] = []
    aligned = 0
    for number, text in enumerate(doc.lines, start=1):
        if number in skip or len(text) > MAX_LINE or not any(c.isdigit() for c in text):
            continue
        candidates = index.retyped_candidates(text)
        if not candidates:
            continue
        aligned += 1
        if aligned > MAX_LINES:
            break
        line = doc.line(number)
        if line.level:  # a logger printed it: vLLM's own wording, not a person's retyping
            continue
        matched = retyped_hit(line.text, index, rules, candidates)
        if matched is None:
            continue
        compiled, values, candidate, seen, covered = matched
        spec = index.table.templates[candidate]
        facts = stated_facts(compiled, spec.text, spec.holes, values)
        found.append(RetypedHit(Hit(compiled=compiled, line=line, facts=facts), seen, covered))
    return found
