"""A fix the person says worked, or did not, read as evidence for the phases its recipe serves.

"Adding --enforce-eager solved it", "lowering --max-model-len to 16384 fixed it", "把 --max-model-len
调小没有用": the person names a flag and says what changing it did. Which fix serves which phase is
written once, in the fix recipes (`rules/fixes/*.yaml`: each recipe's `flags` and `phases`); the
words saying it worked or changed nothing, and which way the setting moved, are the prose
vocabulary's `remedies` (`rules/prose.yaml`). A flag's recipes each count as one witness, spread
over the phases it serves: a fix that only cures one phase (`--enforce-eager`: the CUDA-graph
capture of warm-up) says much, one that serves several says little of each. Never decisive:
placement weighs it beside the person's other words (`rules/evidence.yaml` `remedy`,
`remedy_failed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import get_args

import msgspec

from service.diagnosis.normalize import MEMO_LINES, Document
from service.diagnosis.placement import PLACED_STAGE
from service.diagnosis.prose import affirms_failure, spoken_clauses, spoken_sentences
from service.first_use import first_use_re
from service.packs.derived import per_pack
from service.packs.fixes import FixPack, FixRecipe
from service.packs.prose import ProseVocabulary
from service.schemas import Phase

__all__ = ["Compared", "RemedySaid", "comparisons_said", "remedies_said"]

_EVERY_PHASE: frozenset[Phase] = frozenset(get_args(Phase))

_PARTS = first_use_re(r"[,，、]")
# "from 0.9 to 0.7", "从 0.9 调到 0.7", "0.9 -> 0.7": the way a setting moved, by its values
_FROM_TO = first_use_re(
    r"(?:\bfrom|从)\s*(\d+(?:\.\d+)?)\s*[kK]?\s*(?:\bto\b|\s*(?:调|改|降|升|减|增|提)?(?:到|为|成))\s*(\d+(?:\.\d+)?)"
    r"|(\d+(?:\.\d+)?)\s*[kK]?\s*(?:->|→|=>)\s*(\d+(?:\.\d+)?)"
)


class RemedySaid(msgspec.Struct, frozen=True):
    """A fix the person's clause says worked (or changed nothing), and the share of its weight each
    phase its recipes serve takes."""

    line: int
    text: str
    worked: bool
    shares: tuple[tuple[Phase, float], ...]


class Compared(msgspec.Struct, frozen=True):
    """A sentence comparing a run that works with one that fails, read as the fix from the failing
    setting to the working one: the share each phase its recipes serve takes, every phase (`phases`)
    and only those a failure is placed in (`placed`)."""

    line: int
    text: str
    phases: tuple[tuple[Phase, float], ...]
    placed: tuple[tuple[Phase, float], ...]


class _Flag(msgspec.Struct, frozen=True):
    pattern: re.Pattern[str]
    recipes: tuple[FixRecipe, ...]


def _spelling(name: str) -> str:
    """A flag's name in the spellings people write it in: `--max-model-len`, `max_model_len`, "max
    model len"; a `… size` flag also without its `size` ("tensor parallel 4")."""
    words = name.lstrip("-").split("-")
    body = r"[ _-]?".join(re.escape(w) for w in words)
    if len(words) > 2 and words[-1] == "size":
        body = r"[ _-]?".join(re.escape(w) for w in words[:-1]) + r"(?:[ _-]?size)?"
    return rf"(?<![\w-])(?:--?)?{body}(?![\w-])"


@per_pack()
def _flags(fixes: FixPack) -> tuple[_Flag, ...]:
    """Every flag a recipe sets, with the recipes that set it (built once per pack)."""
    by_flag: dict[str, list[FixRecipe]] = {}
    for recipe in fixes.recipes:
        if recipe.status == "retired":
            continue
        for name in recipe.flags:
            by_flag.setdefault(name, []).append(recipe)
    found: list[_Flag] = []
    for name, recipes in by_flag.items():
        spec = fixes.flag(name)
        names = [name, *(n for n in (spec.previous, spec.replacement) if n)] if spec else [name]
        spellings = [_spelling(n) for n in names]
        # a short option ("-tp 4", "TP=4", "tp 8"): only with its value after it
        spellings += (
            [rf"(?<![\w-])-?{re.escape(a.lstrip('-'))}\s*=?\s*(?=\d)" for a in spec.aliases] if spec else []
        )
        found.append(_Flag(re.compile("|".join(spellings), re.IGNORECASE), tuple(recipes)))
    return tuple(found)


def _own_direction(recipe: FixRecipe, vocabulary: ProseVocabulary) -> str | None:
    """The way a recipe moves its setting, by the words of its id (`lower-max-model-len`)."""
    words = set(recipe.id.split("-"))
    return next((direction for direction, ids in vocabulary.remedy_directions if words & ids), None)


def _moved(part: str, at: int, vocabulary: ProseVocabulary) -> str | None:
    """The way the clause moved the setting named at `at`: its values ("from 0.9 to 0.7"), else the
    direction word nearest the flag's name."""
    values = _FROM_TO.search(part)
    if values is not None:
        numbers = [float(g) for g in values.groups() if g is not None]
        if len(numbers) == 2 and numbers[0] != numbers[1]:
            return "lower" if numbers[1] < numbers[0] else "raise"
    nearest: tuple[int, str] | None = None
    for direction, pattern in vocabulary.remedy_moves:
        for found in pattern.finditer(part):
            distance = min(abs(found.start() - at), abs(found.end() - at))
            if nearest is None or distance < nearest[0]:
                nearest = (distance, direction)
    return nearest[1] if nearest else None


def _shares(recipes: list[FixRecipe]) -> tuple[tuple[Phase, float], ...]:
    """Each recipe one witness, spread evenly over the phases it serves that a failure is placed in."""
    return _spread(recipes, frozenset(PLACED_STAGE))


def _spread(recipes: list[FixRecipe], counted: frozenset[Phase]) -> tuple[tuple[Phase, float], ...]:
    """Each recipe one witness, spread evenly over the phases of `counted` it serves."""
    served = [[p for p in r.phases if p != "any" and p in counted] for r in recipes]
    served = [phases for phases in served if phases]
    total: dict[Phase, float] = {}
    for phases in served:
        for phase in phases:
            total[phase] = total.get(phase, 0.0) + 1 / (len(phases) * len(served))
    return tuple(sorted(total.items(), key=lambda item: -item[1]))


def _verdict(part: str, vocabulary: ProseVocabulary, conditional: bool = False) -> bool | None:
    """Whether a part says the change worked (True), changed nothing (False), or neither (None); under
    a condition, the run getting further ("with --enforce-eager it loads") says it worked."""
    if vocabulary.remedy_failed.search(part):
        return False
    if vocabulary.remedy_worked.search(part):
        return True
    return True if conditional and vocabulary.progressed.search(part) else None


def _read(
    number: int, clause: str, flags: tuple[_Flag, ...], vocabulary: ProseVocabulary
) -> Iterator[RemedySaid]:
    # a first-person condition ("if I pass …", 如果把 …) is the person's experiment, not advice
    tried = vocabulary.condition_tried.search(clause)
    told = clause[tried.end() :] if tried is not None else clause
    if vocabulary.question.search(clause) or vocabulary.remedy_unless.search(told):
        return  # advice, a plan or a question says nothing of this run
    conditional = vocabulary.condition.search(clause) is not None
    parts = [p for p in _PARTS.split(clause) if p.strip()]
    named = [[(flag, m) for flag in flags if (m := flag.pattern.search(p)) is not None] for p in parts]
    for index, part in enumerate(parts):
        if not named[index]:
            continue
        # what it did: said in the part itself, else in the next parts that name no flag of their
        # own ("I tried --enforce-eager, no change")
        verdict = _verdict(part, vocabulary, conditional)
        for later in range(index + 1, len(parts)):
            if verdict is not None or named[later]:
                break
            verdict = _verdict(parts[later], vocabulary, conditional)
        if verdict is None:
            continue
        for flag, match in named[index]:
            moved = _moved(part, match.start(), vocabulary)
            own = [(r, _own_direction(r, vocabulary)) for r in flag.recipes]
            ways = {d for _, d in own if d is not None}
            recipes = [r for r, d in own if d is None or (d == moved if moved else len(ways) == 1)]
            shares = _shares(recipes)
            if shares:
                yield RemedySaid(number, clause.strip(), verdict, shares)


@per_pack()
def _clause_readings(vocabulary: ProseVocabulary) -> dict[str, tuple[FixPack, tuple[RemedySaid, ...]]]:
    """What `_read` found in a clause (as line 0) under these words, with the fix pack it read the
    flags of: a clause's reading depends on its text alone, so a clause said again (a paste's
    repeated lines, a later paste of the same post) is read once per process, up to MEMO_LINES."""
    return {}


def remedies_said(doc: Document, vocabulary: ProseVocabulary, fixes: FixPack) -> list[RemedySaid]:
    """Every fix the person's clauses say worked or changed nothing, in line order."""
    flags = _flags(fixes)
    memo = _clause_readings(vocabulary)
    found: list[RemedySaid] = []
    for number, clause in spoken_clauses(doc, vocabulary.remedy_lines, vocabulary):
        known = memo.get(clause)
        if known is None or known[0] is not fixes:
            if len(memo) >= MEMO_LINES:
                memo.clear()
            known = memo[clause] = (fixes, tuple(_read(0, clause, flags, vocabulary)))
        found.extend(msgspec.structs.replace(said, line=number) for said in known[1])
    return found


# A setting's value as it follows its name ("TP4", "--max-model-len 4096", "tp=8", "--dtype bfloat16")
# (after a word setting it: "set to 32", "设成 32"; a number ends where no digit, point or letter follows,
# so "TP4可以跑" reads 4)
_VALUE = first_use_re(
    r"^\s*(?:[=:]|\b(?:to|of|at|is|=)\b|设成|设为|设置为|设置成|设到|改成|改为|调到|调成|为|是)?\s*"
    r"(\d+(?:\.\d+)?(?:[kK](?![A-Za-z]))?(?![\dA-Za-z]|\.\d)|[A-Za-z][\w.]*\w)"
)
_NUMBER = first_use_re(r"(?<![\w.-])(\d+(?:\.\d+)?)([kK])?(?!\w|\.\d)")
_Value = float | str | None  # a number, a word, "absent" / "present", or unknown


def _number(text: str) -> float | None:
    found = _NUMBER.search(text)
    if found is None:
        return None
    return float(found.group(1)) * (1024 if found.group(2) else 1)


def _valued(word: str) -> _Value:
    number = _number(word)
    return number if number is not None else word.lower()


def _setting(part: str, flag: _Flag, vocabulary: ProseVocabulary) -> tuple[bool, _Value]:
    """Whether the part names the flag, and the value it gives it: the value after its name, the
    setting left out ("without --quantization fp8"), named by a pronoun ("with it"), or a bare
    number standing for it ("but not 32768")."""
    named = flag.pattern.search(part)
    if named is None:
        if vocabulary.compare_present.search(part):
            return False, "present"
        return False, _number(part)
    if vocabulary.compare_absent.search(part[: named.start()]):
        return True, "absent"
    value = _VALUE.match(part[named.end() :])
    return True, _valued(value.group(1)) if value is not None else "present"


def _direction(works: _Value, fails: _Value) -> str | None:
    """The way the fix moved the setting: from the failing value to the working one."""
    if isinstance(works, float) and isinstance(fails, float) and works != fails:
        return "lower" if works < fails else "raise"
    return None


def _all_shares(recipes: list[FixRecipe]) -> tuple[tuple[Phase, float], ...]:
    """Each recipe one witness, spread evenly over every phase it names (`any` is none)."""
    return _spread(recipes, _EVERY_PHASE)


def _sides(text: str, vocabulary: ProseVocabulary) -> tuple[list[str], list[str]]:
    """The parts of a sentence whose run works and those that fail; a part that says neither ("with
    it", "设成 256") opens the part after it."""
    works: list[str] = []
    fails: list[str] = []
    carried = ""
    for piece in vocabulary.compare_parts.split(text):
        part = f"{carried} {piece}" if carried else piece
        if affirms_failure(part, vocabulary) or vocabulary.compare_lacking.search(part):
            fails.append(part)
        elif vocabulary.compare_works.search(part) and not vocabulary.compare_not_working.search(part):
            works.append(part)
        else:
            carried = part
            continue
        carried = ""
    return works, fails


# where a sentence ends (a comparison stays inside one: a paragraph's sentences tell several things)
_SENTENCE_END = first_use_re(r"[.!?]+(?:\s+|$)|[。！？]+")


def _compare(text: str, flags: tuple[_Flag, ...], vocabulary: ProseVocabulary) -> Compared | None:
    """The fix the first comparison of a line's sentences tells (as line 0)."""
    for sentence in _SENTENCE_END.split(text):
        found = _compare_sentence(sentence, flags, vocabulary) if sentence.strip() else None
        if found is not None:
            return found
    return None


def _compare_sentence(text: str, flags: tuple[_Flag, ...], vocabulary: ProseVocabulary) -> Compared | None:
    """The fix a sentence's comparison tells: one part whose run works, one that fails, a setting one
    of them names with its value and the other gives another value."""
    if vocabulary.question.search(text):
        return None
    works, fails = _sides(text, vocabulary)
    for good, bad in ((g, b) for g in works for b in fails):
        for flag in flags:
            (good_named, good_value), (bad_named, bad_value) = (
                _setting(good, flag, vocabulary),
                _setting(bad, flag, vocabulary),
            )
            if (
                not (good_named or bad_named)
                or good_value is None
                or bad_value is None
                or good_value == bad_value
            ):
                continue
            moved = _direction(good_value, bad_value)
            own = [(r, _own_direction(r, vocabulary)) for r in flag.recipes]
            recipes = [r for r, d in own if d is None or d == moved]
            phases = _all_shares(recipes)
            if phases:
                # (each phase keeps its share of every phase the recipes name: a recipe that also serves
                # preemption says less of the KV cache's capacity than one serving the weights alone)
                placed = tuple((p, share) for p, share in phases if p in PLACED_STAGE)
                return Compared(0, text.strip(), phases, placed)
    return None


@per_pack()
def _compared_readings(vocabulary: ProseVocabulary) -> dict[str, tuple[FixPack, Compared | None]]:
    """What `_compare` found in a sentence under these words, with the fix pack it read (one read
    per sentence text and process, up to MEMO_LINES)."""
    return {}


def comparisons_said(doc: Document, vocabulary: ProseVocabulary, fixes: FixPack) -> list[Compared]:
    """Every comparison of a working and a failing setting the person's sentences tell, in line order."""
    flags = _flags(fixes)
    memo = _compared_readings(vocabulary)
    found: list[Compared] = []
    for number, text in spoken_sentences(doc, vocabulary.compare_lines):
        known = memo.get(text)
        if known is None or known[0] is not fixes:
            if len(memo) >= MEMO_LINES:
                memo.clear()
            known = memo[text] = (fixes, _compare(text, flags, vocabulary))
        if known[1] is not None:
            found.append(msgspec.structs.replace(known[1], line=number))
    return found
