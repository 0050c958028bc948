"""The prose vocabulary: which words in a person's sentence say that something failed, that memory
ran out (the host's or the GPU's), that it no longer does or is only asked about, and in which stage
(`rules/prose.yaml`). Decoded strictly; each list compiled with RE2 once, when first read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
import re2

from service.errors import PackError
from service.first_use import OnFirstUse
from service.packs.compiled import LineFinder, validated_before
from service.packs.loader import load_yaml_file
from service.packs.signatures import COMBINED_MAX_MEM, Stage, unbounded_form
from service.schemas import Phase

__all__ = ["ProseFile", "ProseVocabulary", "inflections", "load_prose", "stage_patterns"]


class Crashed(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Words saying a process ended, the warnings' phases whose serving goes on (`beside`), and memory
    told growing over time (`growing`), which an end beside it ran out of."""

    beside: list[Phase]
    words: list[str]
    growing: list[str] = []


class Ran(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Words saying a run went through, and the conditions (`unless`) that make one a contrast."""

    words: list[str]
    unless: list[str]


class Cause(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A failure the person's words name as the cause of another's message (`of`)."""

    of: list[Phase]
    words: list[str]


class StageWords(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A stage's vocabulary: verbs naming it alone, verbs naming it beside one of its objects, and
    its nouns and phrases (RE2)."""

    verbs: list[str] = []
    verbs_of: list[str] = []
    objects: list[str] = []
    words: list[str] = []


class Beside(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Words that stand before (`preceding`, ending at the stage word) or after (`following`) it."""

    preceding: list[str]
    following: list[str]


class StageShift(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    over: Beside
    unfinished: Beside
    earlier: Beside
    not_begun: Beside
    until_done: Beside
    ordinary: Beside
    attached: Beside
    harness: Beside


class Conditions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How a sentence opening with a condition tells a variant of the reported run: the words that
    open and end the condition, a first-person experiment, a stage it switches off, a change it
    names, and the run getting further under it."""

    opens: list[str]
    ends: list[str]
    tried: list[str]
    switchable: list[Stage]
    turned_off: Beside
    changes: list[str]
    progressed: list[str]


class Change(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How a paste describing a change (a pull request, a commit, a release note) speaks: clauses whose
    subject is the change, clauses telling the state before it, and words saying a failure persists."""

    subjects: list[str]
    before: list[str]
    persists: list[str]
    requested: list[str]
    problem: list[str]


class Remedies(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Words saying a fix worked or changed nothing, advice that says neither, the direction a
    setting was moved in, and the words of a recipe's id that give its own direction."""

    worked: list[str]
    failed: list[str]
    unless: list[str]
    lower: list[str]
    raise_: list[str] = msgspec.field(name="raise")
    directions: dict[Literal["lower", "raise"], list[str]]


class SymptomPhase(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The phase a symptom told under every one of the conditions `when` names (none: alone) means."""

    symptom: str
    when: list[str]
    phase: Phase


class Symptoms(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A failure told by what the person saw (`words`, by symptom), what it happened under
    (`conditions`), the phase each pairing means, and words saying only that nothing was printed."""

    words: dict[str, list[str]]
    conditions: dict[str, list[str]]
    phases: list[SymptomPhase]
    silent: list[str]

    def __post_init__(self) -> None:
        for at, row in enumerate(self.phases):
            if row.symptom not in self.words or any(c not in self.conditions for c in row.when):
                raise ValueError(f"phases[{at}] names a symptom or a condition that is not listed")


class Comparisons(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How a sentence compares a run that works with one that fails: where its parts meet, words
    saying a part's run went through (and taking that back), and a setting left out, named by a
    pronoun, or only contrasted."""

    parts: list[str]
    works: list[str]
    not_working: list[str]
    absent: list[str]
    present: list[str]
    lacking: list[str]


class ProseFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    clause_breaks: list[str]
    failure: list[str]
    out_of_memory: list[str]
    phases: dict[Phase, list[str]]
    composed: dict[Phase, list[list[list[str]]]]
    asked: dict[Phase, list[str]]
    memory_phases: list[Phase]
    refusals: list[Phase]
    host: list[str]
    killers: list[str]
    pinned: list[str]
    ended: list[str]
    either: list[str]
    device: list[str]
    question: list[str]
    presupposed: list[str]
    negation: list[str]
    conjunctions: list[str]
    denials: list[str]
    plain_negators: list[str]
    supposing: list[str]
    answered: list[str]
    naming: list[str]
    experienced: list[str]
    change: Change
    stages: dict[Stage, StageWords]
    stage_shift: StageShift
    sequel: list[str]
    crashed: Crashed
    symptoms: Symptoms
    conditions: Conditions
    ran: Ran
    causes: dict[Phase, Cause]
    comparisons: Comparisons
    remedies: Remedies


class ProseVocabulary(msgspec.Struct, frozen=True):
    """Each list OR-ed into one case-insensitive RE2 pattern; `said` is every word that says
    something failed (failure, out_of_memory, phases) together: what makes a line worth reading."""

    clause_break: Any
    failure: Any
    out_of_memory: Any
    phases: tuple[tuple[Phase, Any], ...]
    asked: tuple[tuple[Phase, Any], ...]  # a question whether the hardware supports a format
    memory_phases: frozenset[Phase]  # their words hold beside a saying that memory ran out
    refusals: frozenset[Phase]  # raised before any memory is used: they hold beside it, and come first
    said: Any
    told: Any  # `said` without the symptoms: a failure stated in words of its own
    # `said` with its wide bounded repeats made open-ended (`[^.;]{0,40}` -> `[^.;]{0,}`): which lines
    # to read, in whole-text passes; a counted repeat after a common start (a token with a digit)
    # blows up RE2's DFA on a log dense with numbers, an open one does not. Each clause of a line it
    # finds is then read with the exact `said`, so the answers are `said`'s. One LineFinder for the
    # failure and out-of-memory words and one for each phase's words, whose lines together are the
    # OR's: an OR of them all outgrows RE2's DFA budget on a dense 2 MB log, and RE2 falls back to its
    # NFA there (the failure words with all the phases' 282 ms against 33 + 27 ms for the two; the
    # phases' words alone, once they grew to 56 patterns, 203 ms against 47 ms for the seven).
    said_lines: tuple[Any, ...]
    host: Any  # host memory's names, the kernel's OOM killer among them
    host_lines: Any  # each `…_lines` is its vocabulary's LineFinder: the lines a whole-text pass reads
    killer: Any  # the kernel's OOM killer: the host's, even in a clause naming the GPU's memory
    killer_lines: Any
    pinned: Any  # page-locked host memory: the host's whatever device words stand beside it
    ended: Any  # a process something else ended ("got killed", 被杀, exit code 137)
    either: Any
    either_lines: Any
    device: Any
    device_lines: Any
    question: Any
    presupposed: Any
    negation: Any
    conjunction: Any
    denial: Any  # a denial of what the failure is ("it's not an OOM, …"): it governs its comma part
    plain_negator: Any  # a negation that opens with one of these governs one verb, not a condition
    supposing: Any  # an introducer ("you may see:") that only supposes the block it shows
    supposing_lines: Any
    answered: Any  # a heading opening a section of problems a reader may meet (FAQ, troubleshooting)
    answered_lines: Any
    naming: Any  # a failure word as a noun's modifier ("the error message"), naming a thing
    experienced: Any  # verbs saying the person met what a naming compound names ("got the error message")
    change_named: Any  # `change` unanchored: which lines may hold such a clause (one RE2 pass)
    change: Any  # a clause whose subject is the change ("This PR fixes…", "we reduce…", 本 PR 修复…)
    before_change: Any  # the state before the change (a past-tense failure, "before this fix")
    persists: Any  # a failure a change left ("still OOMs", 还是)
    requested: Any  # a feature-request form's heading or title tag: the paste asks for a change
    requested_lines: Any
    problem: Any  # a label opening a change's problem statement ("Problem", "Motivation:", 问题)
    problem_lines: Any
    stages: tuple[tuple[Stage, Any], ...]  # in priority order (rules/prose.yaml)
    any_stage: Any  # every stage's words together: which lines say what the person was doing
    shifts: tuple[
        tuple[str, Any, Any], ...
    ]  # (over | unfinished | earlier | not_begun | until_done | ordinary | attached | harness, …)
    sequel: Any  # a clause opening with "then" ("then I got OOM"): it follows the sentence before it
    crashed: Any  # a process that ended ("vllm always crashes", 崩溃)
    symptoms: tuple[tuple[str, Any], ...]  # a failure told by what was seen ("hangs", "latency explodes")
    symptom_conditions: tuple[tuple[str, Any], ...]  # what it happened under (long prompts, concurrency)
    symptom_phases: tuple[tuple[str, tuple[str, ...], Phase], ...]  # (symptom, conditions, phase)
    silent: Any  # nothing printed ("no Python error", 没有任何报错): neither a failure nor its negation
    goes_on: frozenset[Phase]  # a warning of these beside a crash told is what led up to it
    growing_lines: Any  # memory told growing over time ("显存会逐渐增加"): an end beside it ran out of it
    condition: Any  # a sentence opening with a condition ("when warmup is disabled, …")
    condition_end: Any  # where its own words end (a comma, 就)
    condition_tried: Any  # a first-person experiment ("if I pass …"): no advice
    switchable: frozenset[Stage]  # the stages a person can switch off (warm-up, the profile run)
    turned_off: tuple[Any, Any]  # a stage switched off (preceding, following its word)
    condition_changes: Any  # a change it names (a flag, "I set …", 把 …)
    progressed: Any  # the run getting further under it ("it loads", 能起来)
    ran: Any  # a run that went through ("I was able to run it", 启动成功)
    ran_lines: Any
    ran_unless: Any  # a condition that makes it a contrast ("when I set 100, it starts successfully")
    causes: tuple[tuple[Phase, frozenset[Phase], Any], ...]  # (cause, the phases it explains, words)
    any_cause: Any
    compare_parts: Any  # where a compared sentence's parts meet (commas, "but", 但是)
    compare_works: Any  # a part whose run went through ("works with TP4", 没问题)
    compare_lines: Any
    compare_not_working: Any  # words taking that back ("doesn't work", 跑不起来)
    compare_absent: Any  # the setting left out, before its name ("without", 不加)
    compare_present: Any  # the setting named by a pronoun ("with it", 加了)
    compare_lacking: Any  # a part saying the other value fails by contrast alone ("but not 32768")
    remedy_worked: Any  # a fix said to have cured the failure ("adding --enforce-eager solved it")
    remedy_failed: Any  # a fix said to have changed nothing ("tried --enforce-eager, no change")
    remedy_lines: Any  # the lines either may stand on (one RE2 pass)
    remedy_unless: Any  # advice, a plan or a question ("try lowering …"): nothing of this run
    # the direction a clause moves a setting in, and the id words that give a recipe's own direction
    remedy_moves: tuple[tuple[Literal["lower", "raise"], Any], ...]
    remedy_directions: tuple[tuple[Literal["lower", "raise"], frozenset[str]], ...]


def _options(*, never_nl: bool = False) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = False
    # the OR of a vocabulary's patterns is read over the whole paste: on a 2 MB log dense with its
    # words RE2's default DFA budget runs out and it falls back to its NFA (3 s instead of ms);
    # the budget is an upper bound, used only as states are built
    options.max_mem = COMBINED_MAX_MEM
    options.never_nl = never_nl
    return options


def _compile(patterns: list[str], where: str, lines: bool = False) -> Any:
    """The OR of `patterns`; with `lines`, as the LineFinder of a whole-text pass.

    A whole-text pass wants the lines a vocabulary matches inside (`normalize.hit_runs`), never a
    match's start: a searched match costs a reverse pass from its end and the wrapper's Match, each
    hit (5,000 hits of the failure words on a dense 2 MB log). Compiled with never_nl a match stays
    inside its line, so the lines it finds are the lines the vocabulary matches inside, each found
    by one forward pass (`LineFinder`)."""
    joined = "|".join(f"(?:{p})" for p in patterns) if patterns else r"[^\s\S]"  # none: never matches
    try:
        return LineFinder(joined, _options(never_nl=True)) if lines else re2.compile(joined, _options())
    except re2.error as exc:
        raise PackError("prose.yaml", f"a pattern RE2 cannot compile ({exc})", path=where) from exc


_SIBILANT_ENDS = ("s", "x", "z", "ch", "sh")


def inflections(verb: str) -> list[str]:
    """A verb's forms: its base, third person, past and present participle, by English's regular
    rules (an entry with "|" lists its forms itself; a particle after the verb stays: "warm up").
    Written here because the vocabulary's few dozen verbs do not justify a morphology library and its
    word lists in the core; irregular verbs are spelled out in rules/prose.yaml."""
    if "|" in verb:
        return verb.split("|")
    head, _, particle = verb.partition(" ")
    if head.endswith("e"):
        forms = [head, head + "s", head + "d", head[:-1] + "ing"]
    elif head.endswith(_SIBILANT_ENDS):
        forms = [head, head + "es", head + "ed", head + "ing"]
    elif len(head) > 2 and head.endswith("y") and head[-2] not in "aeiou":
        forms = [head, head[:-1] + "ies", head[:-1] + "ied", head + "ing"]
    else:
        forms = [head, head + "s", head + "ed", head + "ing"]
    return [f"{form} {particle}" if particle else form for form in forms]


def _alternation(words: list[str]) -> str:
    return "|".join(f"(?:{w})" for w in words)


# what may stand between two parts of a composed reading: words of one clause, no sentence mark
_PART_GAP = r"[^.;:!?。；！？\n]{0,40}?"


def composed_pattern(parts: list[list[str]]) -> str:
    """A reading told in parts of the person's own (`composed`): each part's words, in order, with a
    few words of one clause between them ("the input prompt exceeded the max length of the model",
    "prompt长度超过LLM的接受上限"), so no fixed phrase has to list every modifier a person puts in."""
    return _PART_GAP.join(f"(?:{_alternation(words)})" for words in parts)


def _phase_patterns(data: ProseFile) -> dict[Phase, list[str]]:
    """Each phase's patterns, its composed readings after its own."""
    phases = {phase: list(patterns) for phase, patterns in data.phases.items()}
    for phase, compositions in data.composed.items():
        phases.setdefault(phase, []).extend(composed_pattern(parts) for parts in compositions)
    return phases


def stage_patterns(words: StageWords) -> list[str]:
    """One stage's vocabulary as RE2 patterns: its verbs in every form; its object-taking verbs with
    one of its objects up to three words after them ("reading the model's weights") or before them
    ("the checkpoint is being loaded", "the weights are fully loaded"; "KV cache allocation" is among
    `words`); its nouns."""
    patterns = list(words.words)
    if words.verbs:
        patterns.append(rf"\b(?:{_alternation([f for v in words.verbs for f in inflections(v)])})\b")
    if words.verbs_of and words.objects:
        verbs = _alternation([f for v in words.verbs_of for f in inflections(v)])
        objects = _alternation(words.objects)
        gap = r"(?:[^\s.,;:!?]+\s+){0,3}?"
        patterns.append(rf"\b(?:{verbs})\s+{gap}(?:{objects})\b")
        patterns.append(
            rf"\b(?:{objects})\s+(?:(?:is|are|was|were|being|been|be|get|gets|got|has|have|had)\s+){{0,2}}"
            rf"(?:[a-z]+ly\s+)?(?:{verbs})\b"
        )
    return patterns


# what a whole-text pass compiles besides the vocabularies (`_compile`'s `lines`): part of what RE2
# checked, so a cache entry from before they existed does not defer them unchecked
_LINE_FINDERS = "line finders: never_nl, \\C*?(?:alternation)"


def _deferred(patterns: list[str], where: str, lines: bool = False) -> Any:
    return OnFirstUse(functools.partial(_compile, patterns, where, lines))


def load_prose(rules_dir: Path) -> ProseVocabulary:
    """Decode `rules_dir/prose.yaml`; each pattern is compiled on first use once this file's
    patterns compiled (`validated_before`), at load while they have not."""
    data = load_yaml_file(rules_dir / "prose.yaml", ProseFile, root=rules_dir)
    built: list[ProseVocabulary] = []
    if validated_before(
        [msgspec.json.encode(data).decode(), _LINE_FINDERS], lambda: built.append(_vocabulary(data, _compile))
    ):
        return _vocabulary(data, _deferred)
    return built[0]


def _vocabulary(data: ProseFile, build: Callable[..., Any]) -> ProseVocabulary:
    symptoms = [p for ps in data.symptoms.words.values() for p in ps]
    phases = _phase_patterns(data)
    told = [*data.failure, *data.out_of_memory, *(p for ps in phases.values() for p in ps)]
    said = [*told, *symptoms]
    return ProseVocabulary(
        clause_break=build(data.clause_breaks, "$.clause_breaks"),
        failure=build(data.failure, "$.failure"),
        out_of_memory=build(data.out_of_memory, "$.out_of_memory"),
        phases=tuple((phase, build(p, f"$.phases.{phase}")) for phase, p in phases.items()),
        asked=tuple((phase, build(p, f"$.asked.{phase}")) for phase, p in data.asked.items()),
        memory_phases=frozenset(data.memory_phases),
        refusals=frozenset(data.refusals),
        said=build(said, "$.failure"),
        told=build(told, "$.failure"),
        said_lines=(
            build([unbounded_form(p) for p in (*data.failure, *data.out_of_memory)], "$.failure", True),
            *(
                build([unbounded_form(p) for p in ps], f"$.phases.{phase}", True)
                for phase, ps in phases.items()
            ),
            build([unbounded_form(p) for p in symptoms], "$.symptoms.words", True),
        ),
        host=build([*data.host, *data.killers], "$.host"),
        # pinned memory is the host's too
        host_lines=build([*data.host, *data.killers, *data.pinned], "$.host", True),
        killer=build(data.killers, "$.killers"),
        killer_lines=build(data.killers, "$.killers", True),
        pinned=build(data.pinned, "$.pinned"),
        ended=build(data.ended, "$.ended"),
        either=build(data.either, "$.either"),
        either_lines=build(data.either, "$.either", True),
        device=build(data.device, "$.device"),
        device_lines=build(data.device, "$.device", True),
        question=build(data.question, "$.question"),
        presupposed=build(data.presupposed, "$.presupposed"),
        negation=build(data.negation, "$.negation"),
        conjunction=build(data.conjunctions, "$.conjunctions"),
        denial=build(data.denials, "$.denials"),
        plain_negator=build(data.plain_negators, "$.plain_negators"),
        supposing=build(data.supposing, "$.supposing"),
        supposing_lines=build(data.supposing, "$.supposing", True),
        answered=build(data.answered, "$.answered"),
        answered_lines=build(data.answered, "$.answered", True),
        naming=build(data.naming, "$.naming"),
        experienced=build(data.experienced, "$.experienced"),
        change_named=build([p.removeprefix("^") for p in data.change.subjects], "$.change.subjects", True),
        change=build(data.change.subjects, "$.change.subjects"),
        before_change=build(data.change.before, "$.change.before"),
        persists=build(data.change.persists, "$.change.persists"),
        requested=build(data.change.requested, "$.change.requested"),
        requested_lines=build(data.change.requested, "$.change.requested", True),
        problem=build(data.change.problem, "$.change.problem"),
        problem_lines=build(data.change.problem, "$.change.problem", True),
        stages=tuple(
            (stage, build(stage_patterns(words), f"$.stages.{stage}")) for stage, words in data.stages.items()
        ),
        any_stage=build(
            [p for words in data.stages.values() for p in stage_patterns(words)], "$.stages", True
        ),
        shifts=tuple(
            (
                name,
                build(beside.preceding, f"$.stage_shift.{name}.preceding"),
                build(beside.following, f"$.stage_shift.{name}.following"),
            )
            for name, beside in (
                ("over", data.stage_shift.over),
                ("unfinished", data.stage_shift.unfinished),
                ("earlier", data.stage_shift.earlier),
                ("not_begun", data.stage_shift.not_begun),
                ("until_done", data.stage_shift.until_done),
                ("ordinary", data.stage_shift.ordinary),
                ("attached", data.stage_shift.attached),
                ("harness", data.stage_shift.harness),
            )
        ),
        sequel=build(data.sequel, "$.sequel"),
        crashed=build(data.crashed.words, "$.crashed.words"),
        goes_on=frozenset(data.crashed.beside),
        symptoms=tuple(
            (name, build(ps, f"$.symptoms.words.{name}")) for name, ps in data.symptoms.words.items()
        ),
        symptom_conditions=tuple(
            (name, build(ps, f"$.symptoms.conditions.{name}"))
            for name, ps in data.symptoms.conditions.items()
        ),
        symptom_phases=tuple((row.symptom, tuple(row.when), row.phase) for row in data.symptoms.phases),
        silent=build(data.symptoms.silent, "$.symptoms.silent"),
        growing_lines=build(data.crashed.growing, "$.crashed.growing", True),
        condition=build(data.conditions.opens, "$.conditions.opens"),
        condition_end=build(data.conditions.ends, "$.conditions.ends"),
        condition_tried=build(data.conditions.tried, "$.conditions.tried"),
        switchable=frozenset(data.conditions.switchable),
        turned_off=(
            build(data.conditions.turned_off.preceding, "$.conditions.turned_off.preceding"),
            build(data.conditions.turned_off.following, "$.conditions.turned_off.following"),
        ),
        condition_changes=build(data.conditions.changes, "$.conditions.changes"),
        progressed=build(data.conditions.progressed, "$.conditions.progressed"),
        ran=build(data.ran.words, "$.ran.words"),
        ran_lines=build(data.ran.words, "$.ran.words", True),
        ran_unless=build(data.ran.unless, "$.ran.unless"),
        causes=tuple(
            (phase, frozenset(cause.of), build(cause.words, f"$.causes.{phase}.words"))
            for phase, cause in data.causes.items()
        ),
        any_cause=build([p for c in data.causes.values() for p in c.words], "$.causes", True),
        compare_parts=build(data.comparisons.parts, "$.comparisons.parts"),
        compare_works=build(data.comparisons.works, "$.comparisons.works"),
        compare_lines=build(data.comparisons.works, "$.comparisons.works", True),
        compare_not_working=build(data.comparisons.not_working, "$.comparisons.not_working"),
        compare_absent=build(data.comparisons.absent, "$.comparisons.absent"),
        compare_present=build(data.comparisons.present, "$.comparisons.present"),
        compare_lacking=build(data.comparisons.lacking, "$.comparisons.lacking"),
        remedy_worked=build(data.remedies.worked, "$.remedies.worked"),
        remedy_failed=build(data.remedies.failed, "$.remedies.failed"),
        # (a run that got further under a condition is a fix that worked: `conditions.progressed`)
        remedy_lines=build(
            [*data.remedies.worked, *data.remedies.failed, *data.conditions.progressed], "$.remedies", True
        ),
        remedy_unless=build(data.remedies.unless, "$.remedies.unless"),
        remedy_moves=(
            ("lower", build(data.remedies.lower, "$.remedies.lower")),
            ("raise", build(data.remedies.raise_, "$.remedies.raise")),
        ),
        remedy_directions=tuple(
            (direction, frozenset(words)) for direction, words in data.remedies.directions.items()
        ),
    )
