"""The person's words, read as a separate channel: what a sentence says failed, what ran out, and when.

Prose lines are told from log lines by `normalize.is_prose`; the vocabulary is `rules/prose.yaml`.
A sentence is split into clauses; a clause counts when it says something failed or memory ran out,
does not say the failure went away, was avoided or is hypothetical ("the OOM went away after
--enforce-eager", "to avoid CUDA OOM we lowered --max-num-seqs", "没有再报错"), and does not ask
about it ("will it OOM?", "会OOM吗？"). Only lines the vocabulary's failure words hit are examined
(one RE2 pass over the text), so long logs cost one scan.
"""

from __future__ import annotations

import heapq
import itertools
import operator
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Literal

import msgspec

from service.diagnosis.blocks import code_lines
from service.diagnosis.normalize import MEMO_LINES, Document, Line, is_prose, is_record
from service.diagnosis.placement import STAGE_PHASE, HostRoom, stage_after, stage_before
from service.first_use import first_use_re
from service.packs.derived import per_pack
from service.packs.prose import ProseVocabulary
from service.packs.signatures import Stage
from service.schemas import Phase

__all__ = [
    "Memory",
    "ProseCue",
    "affirms_failure",
    "cause_said",
    "describes_change",
    "is_negated_prose",
    "is_sentence",
    "line_memory",
    "memory_grew",
    "memory_side",
    "names_memory_only",
    "ran_said",
    "read_prose",
    "sequel_stage",
    "spoken_clauses",
    "spoken_sentences",
    "stages_said",
]

# The stage a phase's failure happens in, where one stage alone has it (the KV cache's own check).
_STAGE_OF: dict[Phase, Stage] = {
    phase: stage for stage, phase in STAGE_PHASE.items() if list(STAGE_PHASE.values()).count(phase) == 1
}
# Whose memory a clause says ran out: the host's RAM, the GPU's, or it does not say.
Memory = Literal["host", "device", "unstated"]
_SUBCLAUSE = (",", "，", "、")
# start-up without saying which step (rules/prose.yaml `stages.init`): every step is part of it
_WHOLE_STARTUP: Stage = "init"
_SERVING: Stage = "serving"
# A message a person quotes (double, curly or CJK quotes, backticks; four words or more, so a quoted
# flag or a quoted "OOM" stays their word) holds the program's words, not theirs: its "to avoid this
# error" takes nothing back and its "?" asks nothing.
_QUOTED = first_use_re(r'"[^"]*"|“[^”]*”|「[^」]*」|『[^』]*』|`[^`]*`')
_QUOTED_WORDS = 4
_QUOTE_MARKS = ('"', "“", "「", "『", "`")


_QUOTED_MESSAGE = " the message "
# a quote a clause opens and does not close (the sentence's end inside the quoted message split it)
_UNCLOSED = first_use_re(r'(?:"|“|「|『|`)[^"”」』`]*$')


def _quote(match: re.Match[str]) -> str:
    return _QUOTED_MESSAGE if len(match.group().split()) >= _QUOTED_WORDS else match.group()


def _unquoted(text: str) -> str:
    """`text` with each quoted message read as "the message"."""
    if not any(mark in text for mark in _QUOTE_MARKS):
        return text
    return _QUOTED.sub(_quote, text)


class ProseCue(msgspec.Struct, frozen=True):
    """One clause of a person's sentence that says something failed, the stage it names, and, when
    it says memory ran out, whose."""

    line: int
    stage: Stage | None
    text: str
    memory: Memory | None = None
    phase: Phase | None = None  # a failure the words name by what happened (a prompt too long)
    # told in the past as the state before a change: in a paste describing a change, the bug it removes
    before_change: bool = False
    # told under a condition whose change let the run get further ("with --enforce-eager it loads but
    # then OOMs on the first request"): a variant run's failure, its stage not the reported run's
    variant: bool = False


def _utf8(text: str) -> str | bytes:
    """What an RE2 pass over `text` reads: its bytes when it is ASCII (offsets are then the same and
    the RE2 wrapper maps none back to characters), else the text."""
    return text.encode() if text.isascii() else text


def _clauses(text: str, vocabulary: ProseVocabulary) -> list[str]:
    """The clauses of a sentence, each with its closing mark (a question keeps its "?")."""
    parts: list[str] = []
    start = 0
    for match in vocabulary.clause_break.finditer(_utf8(text)):
        parts.append(text[start : match.end()])
        start = match.end()
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _stage(clause: str, vocabulary: ProseVocabulary) -> Stage | None:
    """The stage a clause names: of the stages its words name, one named as it happened before one
    the clause says was over ("after loading the model, the first request OOMs" is serving's); then
    the one its failure word is bound to ("crash during inference … despite successful model load",
    "Decode OOM with CUDA graphs enabled"); the vocabulary's priority order breaking what ties are
    left. Start-up as a whole (`init`) binds nothing: a step the clause names beside it is narrower
    ("an OOM during engine startup, at the sampler warmup")."""
    named: list[tuple[bool, bool, int, Stage]] = []
    failures = [(f.start(), f.end()) for f in vocabulary.said.finditer(clause)]
    for rank, (stage, pattern) in enumerate(vocabulary.stages):
        for found in pattern.finditer(clause):
            said = _shifted(
                stage,
                clause[: found.start()],
                clause[found.start() :],
                found.end() - found.start(),
                vocabulary,
            )
            if said is not None:
                bound = stage != _WHOLE_STARTUP and _bound(
                    clause, found.start(), found.end(), failures, vocabulary
                )
                named.append((said[1], not bound, rank, said[0]))
    return min(named)[3] if named else None


def _bound(
    clause: str, start: int, end: int, failures: list[tuple[int, int]], vocabulary: ProseVocabulary
) -> bool:
    """Whether the stage word at `start:end` is bound to one of the clause's failure words
    (`stage_shift.attached`: "OOM during <stage>", "<stage> OOM"). Only the binding counts, not
    nearness: a stage named nearer the failure word is as often a modifier ("the profile run
    prefills the whole context … OOM", "crashes during prefill warmup")."""
    preceding, following = next((p, f) for name, p, f in vocabulary.shifts if name == "attached")
    for low, high in failures:
        if high <= start and preceding.search(clause[high:start]) is not None:
            return True
        if end <= low and following.search(clause[end:low]) is not None:
            return True
    return False


def _shifted(
    stage: Stage, before: str, rest: str, length: int, vocabulary: ProseVocabulary
) -> tuple[Stage, bool] | None:
    """The stage a stage word (the first `length` characters of `rest`, `before` it) names where it
    stands, and whether the words beside it moved it: a stage said to be over names the next one
    ("after loading", "加载完成后"), unless said not to be finished ("还没加载完"); a step told before
    a "then" keeps its stage but gives way to one named after it; a stage said not to have begun
    names the one before it ("before any request" is start-up, "before the weights load" a worker
    setting up its device), unless said not to have run to its end ("before the weights are fully
    loaded" is during loading); a word in its everyday sense ("I capture it", "the page loads")
    names none; a word of the harness that drives the server ("the benchmark's warmup requests",
    "profiling the server with nsys") names serving."""
    beside = {name: (preceding, following) for name, preceding, following in vocabulary.shifts}
    preceding, following = beside["ordinary"]
    if preceding.search(before) or following.search(rest):
        return None  # an everyday verb ("I capture it", "the page is loading")
    after = rest[length:]
    preceding, following = beside["harness"]
    if stage != _SERVING and (preceding.search(before) or following.search(after)):
        return _SERVING, False  # what a load tester warms up or a profiler watches is a serving engine
    preceding, following = beside["not_begun"]
    if preceding.search(before) or following.search(after):
        done_before, done_from = beside["until_done"]
        if done_before.search(before) or done_from.search(rest):
            return stage, False
        return stage_before(stage), True
    preceding, following = beside["over"]
    over = preceding.search(before) or following.search(after)
    if over and not beside["unfinished"][0].search(before):
        return stage_after(stage), True
    return stage, beside["earlier"][1].search(after) is not None


def _is_question(clause: str, said: Any, vocabulary: ProseVocabulary) -> bool:
    """Whether the part of `clause` around its failure word (between commas) asks rather than says."""
    start, end = said.start(), said.end()
    low = max(clause.rfind(mark, 0, start) for mark in _SUBCLAUSE) + 1
    ends = [i for i in (clause.find(mark, end) for mark in _SUBCLAUSE) if i >= 0]
    part = clause[low : min(ends) if ends else len(clause)]
    if vocabulary.presupposed.search(clause) or vocabulary.presupposed.search(part):
        return False  # "why does it OOM?" asks the cause of a failure it takes as given
    return vocabulary.question.search(part) is not None


def _negates(clause: str, vocabulary: ProseVocabulary) -> bool:
    """Whether the clause has words that take a failure back. A plain "not" governs the verb it
    stands before, not the next one "and" joins to it ("the server does not start up and fails"):
    a negation read across a conjunction counts when it opens with a condition or a modal ("if
    it loads and then OOMs"), else only when it holds inside one of the joined parts."""
    clause = _heard(clause, vocabulary)
    found = vocabulary.negation.search(clause)
    if found is None:
        return False
    words = found.group()
    if not vocabulary.conjunction.search(words) or not vocabulary.plain_negator.match(words):
        return True
    return any(vocabulary.negation.search(part) for part in _conjuncts(clause, vocabulary))


def _conjuncts(clause: str, vocabulary: ProseVocabulary) -> list[str]:
    parts: list[str] = []
    start = 0
    for match in vocabulary.conjunction.finditer(clause):
        parts.append(clause[start : match.start()])
        start = match.end()
    parts.append(clause[start:])
    return parts


def _heard(clause: str, vocabulary: ProseVocabulary) -> str:
    """The clause without its words saying only that nothing was printed ("no Python error", "without
    any traceback", 没有任何报错): a process that vanished told its failure by no message, so those
    words neither state a failure nor take one back."""
    return str(vocabulary.silent.sub(" ", clause))


def _symptom(clause: str, vocabulary: ProseVocabulary) -> Phase | None:
    """The phase a failure told by its symptom means, by the condition it was told under
    (`symptoms.phases`, the first that fits): a request that never finishes past a prompt length is
    the KV cache's capacity, throughput collapsing as concurrency grows is preemption."""
    seen = {name for name, pattern in vocabulary.symptoms if pattern.search(clause)}
    if not seen:
        return None
    # (the conditions the person tells, not a message they quote: "NETWORK ERROR DUE TO HIGH TRAFFIC",
    # also one a sentence's end inside the quote cut off from its closing mark)
    told = _UNCLOSED.sub("", _unquoted(clause))
    under = {name for name, pattern in vocabulary.symptom_conditions if pattern.search(told)}
    return next(
        (
            phase
            for symptom, when, phase in vocabulary.symptom_phases
            if symptom in seen and under.issuperset(when)
        ),
        None,
    )


def _named_only(clause: str, vocabulary: ProseVocabulary) -> str:
    """The clause with each failure word that only modifies a noun ("update the error message")
    read as "the message", unless the clause says the person met it ("got the error message")."""
    if vocabulary.naming.search(clause) is None or vocabulary.experienced.search(clause) is not None:
        return clause
    return str(vocabulary.naming.sub(" the message ", clause))


def _affirms(clause: str, vocabulary: ProseVocabulary) -> bool:
    return _affirmed_part(clause, vocabulary) is not None


def affirms_failure(clause: str, vocabulary: ProseVocabulary) -> bool:
    """Whether a clause states a failure: a failure word not taken back, asked about or only naming
    a thing."""
    return _affirms(clause, vocabulary)


def _changes(clause: str, vocabulary: ProseVocabulary) -> bool:
    """Whether the clause's subject is a change ("This PR fixes the OOM in…", "we reduce peak
    memory…", "本 PR 修复了…"): it tells what the change does to a failure, unless it says the
    failure persists ("this PR still OOMs")."""
    return vocabulary.change.search(clause) is not None and vocabulary.persists.search(clause) is None


def _before_change(clause: str, vocabulary: ProseVocabulary) -> bool:
    """Whether the clause tells the state before a change in the past ("the engine OOMed during
    capture", "before this fix", 原来…): in a paste describing a change, the bug it removes."""
    return vocabulary.before_change.search(clause) is not None and vocabulary.persists.search(clause) is None


def _affirmed_part(clause: str, vocabulary: ProseVocabulary) -> str | None:
    """What of `clause` states a failure: all of it when nothing takes the failure back, else the
    statements beside a negated one that state their own (`_affirmed_beside`), else None."""
    if _changes(clause, vocabulary):
        return None
    named = _heard(_named_only(clause, vocabulary), vocabulary)
    said = vocabulary.said.search(named)
    if said is None or _is_question(named, said, vocabulary):
        return None
    if vocabulary.told.search(named) is None and _symptom(named, vocabulary) is None:
        return None  # a symptom under no condition that names its phase ("throughput collapses") is none
    if not _negates(named, vocabulary):
        return clause
    return _affirmed_beside(named, vocabulary)


def _affirmed_beside(clause: str, vocabulary: ProseVocabulary) -> str | None:
    """The statements joined to a negated one by a comma and a conjunction ("the pod dies
    suddenly, and I don't see any error") that state a failure of their own: a plain "not" governs
    the statement it stands in, not the one beside it; a denial of what the failure is ("it's not an
    OOM, the server just hangs") governs only its comma-bounded part. A negation of another kind
    anywhere in the clause (a condition, a fix, "went away") still takes the whole clause back."""
    parts = _coordinated(clause, vocabulary)
    if len(parts) < 2 and (vocabulary.denial.search(clause) or vocabulary.remedy_worked.search(clause)):
        parts = [p for p in re.split("[,，、]", clause) if p.strip()]
    if len(parts) < 2:
        return None
    solved = [i for i, p in enumerate(parts) if _solved(p, vocabulary)]
    if solved:
        # a failure the person says was solved is past ("the loading OOM was solved with TP 2, and
        # now it runs out of memory after 50 requests"): the failure told after it is the present one
        later = parts[solved[-1] + 1 :]
        kept = [
            p.strip() for p in later if vocabulary.said.search(p) is not None and not _negates(p, vocabulary)
        ]
        return ", ".join(kept) or None
    for part in parts:
        found = vocabulary.negation.search(part)
        if found is not None and not vocabulary.plain_negator.match(found.group()):
            return None
    kept = [p.strip() for p in parts if vocabulary.said.search(p) is not None and not _negates(p, vocabulary)]
    return ", ".join(kept) or None


def _solved(part: str, vocabulary: ProseVocabulary) -> bool:
    """Whether a part of a clause names a failure and says it was cured (`remedies.worked`: "the
    GPU0 OOM is solved", "加载时的显存不足已经解决了")."""
    return vocabulary.said.search(part) is not None and vocabulary.remedy_worked.search(part) is not None


def _coordinated(clause: str, vocabulary: ProseVocabulary) -> list[str]:
    """The statements of a clause joined by a comma and a conjunction (", and", "，然后"), or by a
    "then" (it orders events, it never joins two nouns: "starts without errors and then crashes"); a
    bare conjunction may join two nouns ("no OOM and crash"), so it splits nothing."""
    parts: list[str] = []
    start = 0
    for match in vocabulary.conjunction.finditer(clause):
        word = match.group().lower()
        if clause[: match.start()].rstrip().endswith(_SUBCLAUSE) or word.endswith("then") or word == "然后":
            parts.append(clause[start : match.start()])
            start = match.end()
    parts.append(clause[start:])
    return parts


def _takes_back(clause: str, vocabulary: ProseVocabulary) -> bool:
    if _negates(clause, vocabulary) or _changes(clause, vocabulary):
        return True
    said = vocabulary.said.search(clause)
    return said is not None and _is_question(clause, said, vocabulary)


def _memory(clause: str, vocabulary: ProseVocabulary) -> Memory | None:
    read = _utf8(clause)
    if not vocabulary.out_of_memory.search(read):
        return None
    if vocabulary.pinned.search(read):  # page-locked host memory, whatever error it surfaced as
        return "host"
    if vocabulary.device.search(read):  # the kernel's OOM killer acts on the host's memory alone
        return "host" if vocabulary.killer.search(read) else "device"
    return "host" if vocabulary.host.search(read) else "unstated"


def line_memory(text: str, vocabulary: ProseVocabulary) -> Memory | None:
    """Whose memory a line says ran out, read clause by clause like a sentence but whatever the line
    looks like (a title with identifiers, a quoted platform message): the host's only when a clause
    names host memory and none names the device's; None when no clause says memory ran out."""
    read = _reading(vocabulary, "memory", text)  # every OOM placed asks of its line, as each request does
    if read is None:
        sides = {m for c in _clauses(text, vocabulary) if (m := _memory(c, vocabulary)) is not None}
        side = "device" if "device" in sides else "host" if "host" in sides else "unstated"
        read = (side if sides else None,)
        _remember(vocabulary, "memory", text, read)
    memory: Memory | None = read[0]
    return memory


def names_memory_only(text: str, vocabulary: ProseVocabulary) -> bool:
    """Whether every word of `text` saying memory ran out only names a thing (`naming`: "invisible
    to dmesg OOM detection"), so that the line says nothing ran out."""
    clauses = _clauses(text, vocabulary)
    said = [c for c in clauses if _memory(c, vocabulary) is not None]
    return bool(said) and all(_memory(_named_only(c, vocabulary), vocabulary) is None for c in said)


def _phase(clause: str, vocabulary: ProseVocabulary, memory: Memory | None) -> Phase | None:
    """The failure the clause names by what happened. Where it also says memory ran out, the named
    failure holds only when its words contain that saying ("not enough memory at startup" is the
    start-up check, more than a bare "not enough memory"), when it is memory's own shortfall
    (`memory_phases`: "only 4096 context fits, I'm short on VRAM"), or a refusal vLLM raises before
    it allocates anything (`refusals`: "I thought it was OOM, but at TP 8 the weights cannot be split
    evenly")."""
    for phase, pattern in vocabulary.phases:
        found = pattern.search(clause)
        if found is None:
            continue
        if memory is None or phase in vocabulary.memory_phases or phase in vocabulary.refusals:
            return phase
        ran_out = vocabulary.out_of_memory.search(clause)
        if ran_out is not None and found.start() <= ran_out.start() and ran_out.end() <= found.end():
            return phase
    return None


def _prose_lines(doc: Document, finder: Any) -> Iterator[tuple[Line, int]]:
    """The unprefixed lines `finder` hits (a LineFinder, or several: the lines any of them hits), in
    order, each with how many times it repeats in a row (a line pasted over and over is read once);
    a line with a logger or process prefix (a program printed it) is dropped."""
    unprefixed: dict[str, bool] = {}
    for number, repeats in _hit_runs(doc, finder):
        text = doc.lines[number - 1]
        plain = unprefixed.get(text)
        if plain is None:
            source, level, _ = doc.split(text)
            plain = unprefixed[text] = not source and not level
        if plain:
            yield doc.line(number), repeats


def _hit_runs(doc: Document, finder: Any) -> Iterator[tuple[int, int]]:
    """(number, repeats) of the runs of identical lines `finder` (or any of several) hits, in order:
    each finder's runs are the runs of the lines it hits, so a run any finder hits is one run."""
    if not isinstance(finder, tuple):
        return doc.unprefixed_runs(finder)
    merged = heapq.merge(*(doc.unprefixed_runs(each) for each in finder))
    return (next(runs) for _, runs in itertools.groupby(merged, key=operator.itemgetter(0)))


_SENTENCE_END = first_use_re(r"[.!?;。！？；]$")


def _sentences(clauses: list[str]) -> Iterator[list[str]]:
    """The clauses grouped by sentence: a clause that closes with a sentence's mark ends one (a
    clause broken at "but" does not)."""
    current: list[str] = []
    for clause in clauses:
        current.append(clause)
        if _SENTENCE_END.search(clause.rstrip()):
            yield current
            current = []
    if current:
        yield current


def _variant(sentence: list[str], vocabulary: ProseVocabulary) -> tuple[bool, Stage | None]:
    """What a sentence opening with a condition (`conditions`) says of the reported run: whether its
    failures are a variant run's (a change under which the run got further: "with --enforce-eager it
    loads but then OOMs"), and the stage the condition switches off ("when warmup is disabled, …"):
    that stage ran in the reported run, and its failures are read there."""
    first = sentence[0]
    opened = vocabulary.condition.search(first)
    if opened is None:
        return False, None
    rest = first[opened.end() :]
    end = vocabulary.condition_end.search(rest)
    part = first[: opened.end() + (end.start() if end is not None else len(rest))]
    before, after = vocabulary.turned_off
    for stage, pattern in vocabulary.stages:
        if stage not in vocabulary.switchable:
            continue
        for found in pattern.finditer(part):
            if before.search(part[: found.start()]) or after.search(part[found.end() :]):
                return True, stage
    if vocabulary.condition_changes.search(part) is None:
        return False, None
    got_further = any(
        vocabulary.progressed.search(c) is not None and not _negates(c, vocabulary) for c in sentence
    )
    return got_further, None


def _affirmed(text: str, vocabulary: ProseVocabulary) -> list[ProseCue]:
    """The failure clauses a prose line affirms (as cues of line 0), with the stage each names, what
    ran out, or the failure it names by what happened, and whether each tells the state before a
    change; a sentence opening with a condition that tells a variant run reads its failures in the
    stage the condition switches off, or in none (`_variant`)."""
    cues: list[ProseCue] = []
    asked: Phase | None = None  # what a question before asked is supported ("…支持bfloat16吗？")
    for sentence in _sentences(_clauses(text, vocabulary)):
        found, asked = _affirmed_clauses(sentence, vocabulary, asked)
        variant, off = _variant(sentence, vocabulary) if found else (False, None)
        if variant:
            found = [msgspec.structs.replace(c, stage=off, variant=off is None) for c in found]
        cues.extend(found)
    return cues


def _affirmed_clauses(
    clauses: list[str], vocabulary: ProseVocabulary, asked: Phase | None
) -> tuple[list[ProseCue], Phase | None]:
    """The cues of one sentence's clauses, and what a question asked so far (`asked`, carried on to
    the sentences after it: "Does the V100 support bf16? I get an error when running")."""
    cues: list[ProseCue] = []
    for clause in clauses:
        part = _affirmed_part(clause, vocabulary)
        if part is None:
            asked = asked or _asked(clause, vocabulary)
        else:  # what ran out and when, read in the part that states it
            # a failure word naming a thing ("dmesg OOM detection") says nothing ran out
            stage, memory = _stage(part, vocabulary), _memory(_named_only(part, vocabulary), vocabulary)
            phase = _phase(part, vocabulary, memory)
            if phase is None and memory is None:
                # told by what was seen ("hangs once prompts pass 8k tokens"), else what a question
                # before asked about ("does the 910A support bf16? I get an error when running")
                phase = _symptom(_heard(part, vocabulary), vocabulary) or asked
            if stage is None and phase in vocabulary.memory_phases:
                stage = _STAGE_OF.get(phase)  # "causes KV cache OOM" names the cache's own stage
            before = _before_change(part, vocabulary)
            cues.append(ProseCue(0, stage, part.strip(), memory, phase, before))
    return cues, asked


def _asked(clause: str, vocabulary: ProseVocabulary) -> Phase | None:
    """The phase of the format a question asks the hardware supports ("Does the V100 support
    bf16?"), or None for a clause that does not ask that."""
    if vocabulary.question.search(clause) is None:
        return None
    return next((phase for phase, pattern in vocabulary.asked if pattern.search(clause)), None)


# An issue's title opens with its tracker's tags ("[Bug]: ", "[Usage][V1] ", "【求助】"): whatever
# follows is the person's statement, however few its words ("[Bug]: 4090 爆显存 during loading").
_TITLE_TAGS = first_use_re(r"^\s*(?:\[[A-Za-z][\w /.-]{0,30}\]|【[^】]{1,12}】)+:?\s*\S")


def _reads_as_words(line: Line) -> bool:
    """A sentence, or a title after its tracker's tags; a program's record under a tag of its own
    (`[Stage-1] INFO 03-12 …`) is neither."""
    if is_prose(line):
        return True
    titled = not line.source and not line.level and _TITLE_TAGS.match(line.text) is not None
    return titled and not is_record(line.text)


# The exception a sentence shows after its own words, unquoted ("加载模型时…导致出现报错：torch.cuda.
# OutOfMemoryError: CUDA out of memory…", "while loading it dies with torch.OutOfMemoryError: …"): a
# class name ending in Error or Exception, with its module path
_SHOWN_EXCEPTION = first_use_re(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b")


def _spoken(line: Line) -> str | None:
    """The person's words of a line: all of it when it reads as words; without the message it
    quotes (`I get "…Tried to allocate 2.00 GiB…" while loading`); or the sentence before the
    exception it shows unquoted, when that reads as words (the message is the program's, cut or
    whole); None when no part of it is a sentence."""
    if _reads_as_words(line):
        return line.text
    unquoted = _unquoted(line.text)
    if unquoted != line.text and is_prose(replace(line, text=unquoted)):
        return unquoted
    shown = _SHOWN_EXCEPTION.search(line.text)
    if shown is not None and shown.start() > 0:
        head = line.text[: shown.start()].rstrip()
        if is_prose(replace(line, text=head)):
            return head
    return None


def _read_line(line: Line, vocabulary: ProseVocabulary) -> list[ProseCue]:
    """A prose line's cues, read in its person's words (`_spoken`)."""
    spoken = _spoken(line)
    return [] if spoken is None else _affirmed(spoken, vocabulary)


def _opens_with_change(line: Line, vocabulary: ProseVocabulary) -> bool:
    clauses = _clauses(_unquoted(line.text), vocabulary)
    return is_sentence(line) and any(vocabulary.change.search(c) for c in clauses)


def describes_change(doc: Document, vocabulary: ProseVocabulary) -> bool:
    """Whether the paste describes a change rather than a run: one of its sentences has the change
    as its subject ("This PR adds…", "we reduce…", "本 PR 修复了…", a title opening "Implement…").
    Log lines it shows still decide; only its words telling the state before the change in the
    past are then read as the bug it removes. A paste that asks for a change (a feature-request form)
    describes none: its motivation's failure is one met (cached per document)."""
    key = ("describes a change", id(vocabulary), "")
    known = doc.memo.get(key)
    if not isinstance(known, bool):
        known = doc.memo[key] = any(
            _opens_with_change(line, vocabulary) for line, _ in _prose_lines(doc, vocabulary.change_named)
        ) and not any(True for _ in _prose_lines(doc, vocabulary.requested_lines))
    return known


def is_sentence(line: Line) -> bool:
    """Whether `line` is a person's sentence, also when the message it quotes or shows after its
    words has a log line's marks (`I get "…Tried to allocate 2.00 GiB…"`)."""
    if line.source or line.level:
        return False
    return _spoken(line) is not None


@per_pack()
def _readings(vocabulary: ProseVocabulary) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {}


def _reading(vocabulary: ProseVocabulary, kind: str, text: str) -> tuple[Any, ...] | None:
    """What an earlier read of a line with this text found (`kind`: which reading), or None: a
    line's reading depends on its text alone, so a line pasted again (in this paste, on every
    rank, in a later request) is read once per process."""
    return _readings(vocabulary).get((kind, text))


def _remember(vocabulary: ProseVocabulary, kind: str, text: str, found: tuple[Any, ...]) -> None:
    memo = _readings(vocabulary)
    if len(memo) >= MEMO_LINES:
        memo.clear()
    memo[(kind, text)] = found


def read_prose(doc: Document, vocabulary: ProseVocabulary) -> list[ProseCue]:
    """Every affirmative failure clause in the document's prose lines, in line order."""
    cues: list[ProseCue] = []
    for line, repeats in _prose_lines(doc, vocabulary.said_lines):
        read = _reading(vocabulary, "cues", line.text)
        if read is None:
            read = tuple(_read_line(line, vocabulary))
            _remember(vocabulary, "cues", line.text, read)
        for number in range(line.number, line.number + repeats):
            cues.extend(msgspec.structs.replace(cue, line=number) for cue in read)
    if cues and describes_change(doc, vocabulary):
        # the bug the change removes: told in the past, or in the change's problem statement
        told = _problem_lines(doc, vocabulary)
        return [c for c in cues if not c.before_change and c.line not in told]
    return cues


# A line that opens the next part of a description: a markdown heading, a bold line, a label
# ("Fix:", "Test plan:") or a line of a few words with no sentence's end ("Fix", "Solution")
_PART_HEADING = first_use_re(
    r"^\s*#|^\s*\*\*[^*]+\*\*\s*[:：]?\s*$|^\s*[\w ]{1,30}[:：]\s*$|^\s*\w+(?: \w+){0,2}\s*$"
)
_PROBLEM_LINES = 40  # lines a problem statement may run (the work stays bounded)


def _problem_lines(doc: Document, vocabulary: ProseVocabulary) -> frozenset[int]:
    """The lines of a change's problem statement: a label's line ("Problem: …", "## Motivation") and
    the lines after it up to the next part's heading (cached per document)."""
    key = ("problem lines", id(vocabulary), "")
    known = doc.memo.get(key)
    if isinstance(known, frozenset):
        return known
    found: set[int] = set()
    total = len(doc)
    for line, _ in _prose_lines(doc, vocabulary.problem_lines):
        label = vocabulary.problem.search(line.text)
        if label is None:
            continue
        found.add(line.number)
        inline = bool(line.text[label.end() :].strip())  # "Problem: …" runs to its paragraph's end
        for number in range(line.number + 1, min(total, line.number + _PROBLEM_LINES) + 1):
            text = doc.lines[number - 1]
            if not text.strip() and inline:
                break
            if text.strip() and (_PART_HEADING.match(text) or vocabulary.problem.search(text)):
                break
            found.add(number)
    known = doc.memo[key] = frozenset(found)
    return known


def _doing(clause: str, vocabulary: ProseVocabulary) -> Stage | None:
    """The stage a clause says the person was in, when it does not ask ("does it OOM while
    loading?"); it need not say anything failed, so words that take a failure back do not matter
    ("with a fixed context length of 8K")."""
    return None if vocabulary.question.search(clause) else _stage(clause, vocabulary)


def stages_said(doc: Document, vocabulary: ProseVocabulary) -> list[tuple[Stage, int, str]]:
    """What the person says they were doing, in any of their sentences (not only the one saying it
    failed: "I use batch size 512 to test the rollout phase … cuda OOM happens"): the stage each
    clause names, with its line and text, in line order (one RE2 pass finds the lines)."""
    found: list[tuple[Stage, int, str]] = []
    for line, _ in _prose_lines(doc, vocabulary.any_stage):
        read = _reading(vocabulary, "doing", line.text)
        if read is None:
            doing: list[tuple[Stage, str]] = []
            if is_sentence(line):
                for clause in _clauses(_unquoted(line.text), vocabulary):
                    stage = _doing(clause, vocabulary)
                    if stage is not None:
                        doing.append((stage, clause.strip()))
            read = tuple(doing)
            _remember(vocabulary, "doing", line.text, read)
        found.extend((stage, line.number, text) for stage, text in read)
    return found


def cause_said(doc: Document, vocabulary: ProseVocabulary, phase: Phase) -> tuple[Phase, int, str] | None:
    """The first cause the person's clauses (not questions) name for a failure of `phase` (the
    vocabulary's `causes`), with its line and clause."""
    wanted = [(cause, words) for cause, of, words in vocabulary.causes if phase in of]
    if not wanted:
        return None
    for line, _ in _prose_lines(doc, vocabulary.any_cause):
        if not is_sentence(line):
            continue
        for clause in _clauses(_unquoted(line.text), vocabulary):
            if vocabulary.question.search(clause):
                continue
            for cause, words in wanted:
                if words.search(clause):
                    return cause, line.number, clause.strip()
    return None


def spoken_clauses(doc: Document, finder: Any, vocabulary: ProseVocabulary) -> Iterator[tuple[int, str]]:
    """The clauses of the person's own words (a quoted message read as "the message") on the lines
    `finder` hits, each with its line number, in line order."""
    for line, _ in _prose_lines(doc, finder):
        spoken = _spoken(line)
        if spoken is not None:
            for clause in _clauses(_unquoted(spoken), vocabulary):
                yield line.number, clause


def spoken_sentences(doc: Document, finder: Any) -> Iterator[tuple[int, str]]:
    """The person's own words of each line `finder` hits (a quoted message read as "the message"),
    whole, with its line number, in line order."""
    for line, _ in _prose_lines(doc, finder):
        spoken = _spoken(line)
        if spoken is not None:
            yield line.number, _unquoted(spoken)


def ran_said(doc: Document, vocabulary: ProseVocabulary) -> int | None:
    """The line of the first of the person's clauses saying a run went through ("I was able to run
    it on an A100"), not under a condition, asked or taken back; None when none says so."""
    for line, _ in _prose_lines(doc, vocabulary.ran_lines):
        spoken = _spoken(line)
        for clause in _clauses(spoken, vocabulary) if spoken is not None else []:
            if (
                vocabulary.ran.search(clause)
                and not vocabulary.ran_unless.search(clause)
                and not vocabulary.condition.search(clause)  # "without LoRA it works fine"
                and not vocabulary.question.search(clause)
                and not _negates(clause, vocabulary)
            ):
                return line.number
    return None


# A pasted launch command reads like words to `is_prose`, but its flags are settings: `docker run
# --gpus all` names no GPU memory that ran out
_LAUNCH_LINE = first_use_re(
    r"^\s*(?:\$\s*)?(?:sudo\s+)?(?:(?:docker|podman)\s+run|vllm\s+serve|srun|sbatch|python3?\s+-m)\b"
)


def _said_in_prose(doc: Document, pattern: Any) -> bool:
    return any(is_prose(line) and not _LAUNCH_LINE.match(line.text) for line, _ in _prose_lines(doc, pattern))


def memory_grew(doc: Document, vocabulary: ProseVocabulary) -> bool:
    """Whether one of the person's sentences tells memory growing over time ("显存会逐渐增加",
    "memory keeps climbing", `crashed.growing`)."""
    return any(is_sentence(line) for line, _ in _prose_lines(doc, vocabulary.growing_lines))


def memory_side(doc: Document, vocabulary: ProseVocabulary, room: HostRoom | None = None) -> Memory:
    """Whose memory the person's words are about as a whole: the host's when they name the kernel's
    OOM killer (it acts on no GPU's memory), else the device's when they name the GPU's memory, else
    the host's when they name host RAM, else, for memory of either side or none named, what the host
    limit the paste states says (`room`, service/diagnosis/host_limit.py): the host's below what vLLM
    keeps in host RAM, not the host's with plenty; without a limit, either side reads as the host's."""
    if _said_in_prose(doc, vocabulary.killer_lines):
        return "host"
    if _said_in_prose(doc, vocabulary.device_lines):
        return "device"
    if _said_in_prose(doc, vocabulary.host_lines):
        return "host"
    if room is not None:
        return "host" if room == "short" else "unstated"
    return "host" if _said_in_prose(doc, vocabulary.either_lines) else "unstated"


def is_negated_prose(doc: Document, number: int, vocabulary: ProseVocabulary) -> bool:
    """Whether line `number` is a person's sentence that takes a failure back (a clause negates it,
    only asks about it, or names a message with it) and affirms none. A line no program prefixed
    counts even when it is too short to read as prose when it ends in a question mark ("will it
    OOM?"). Words the person quotes
    (`"RuntimeError: … to avoid this error."`) are the program's, not theirs, and are not read."""
    raw = doc.lines[number - 1]  # identical lines read alike, in this paste and in later ones
    known = _reading(vocabulary, "negated", raw)
    if known is None:  # as read alone, and as read in a paste describing a change
        line = doc.line(number)
        known = (_negated(line, vocabulary), _negated(line, vocabulary, changing=True))
        _remember(vocabulary, "negated", raw, known)
    if known[0] and known[1]:
        return True
    if not describes_change(doc, vocabulary):
        return bool(known[0])
    # in a paste describing a change, its problem statement's sentences tell the bug it removes
    return bool(known[1]) or (number in _problem_lines(doc, vocabulary) and is_sentence(doc.line(number)))


# A comment in a script or a notebook cell (`# lower --max-model-len if you get CUDA out of memory`):
# what follows its mark, read as a sentence, can take back the failure a rule matched in it
_COMMENT = first_use_re(r"^\s*#\s+(?=\S)")


def _negated(line: Line, vocabulary: ProseVocabulary, changing: bool = False) -> bool:
    comment = _COMMENT.match(line.text)
    if comment is not None and not line.source and not line.level:
        line = replace(line, text=line.text[comment.end() :])
    asks = line.text.rstrip().endswith(("?", "？"))
    if line.source or line.level or not (asks or is_sentence(line)):
        return False
    # a message quoted in the sentence ("…to avoid this error.") is what the program said
    clauses = _clauses(_unquoted(line.text), vocabulary)
    # a failure word that only names a message ("improve the OOM error messages") takes back the
    # bare "OOM" a rule matched in it, like a negation does
    # in a paste describing a change, a failure told in the past is the bug it removes
    read = [(c, changing and _before_change(c, vocabulary)) for c in clauses]
    taken_back = any(
        past or _takes_back(c, vocabulary) or _named_only(c, vocabulary) != c for c, past in read
    )
    return taken_back and not any(
        (_affirms(c, vocabulary) and not past) or _met_quoted(c, vocabulary) for c, past in read
    )


def _met_quoted(clause: str, vocabulary: ProseVocabulary) -> bool:
    """Whether a clause says the person met the message it quotes ("I encountered the issue with
    vLLM complaining `Input prompt … is too long`", "we get \"…\""): the quote is what the run printed,
    so a later clause's "should avoid this problem" does not take the line back; one that takes it
    back itself ("the `…` error no longer appears") met nothing."""
    return (
        _QUOTED_MESSAGE in clause
        and vocabulary.experienced.search(clause) is not None
        and not _takes_back(clause, vocabulary)
    )


_INTRODUCER_ENDS = (":", "：")
_BLOCK_LINES = 40  # lines a quoted block after its introducer may run (the work stays bounded)


def shown_not_run(doc: Document, vocabulary: ProseVocabulary) -> frozenset[int]:
    """Lines a paste shows that did not happen in this run: code, diffs, configs and help text
    (`blocks.code_lines`), and the block a person's sentence introduces as only supposed
    ("很可能会出现如下情况：", "you may see the following error:", "if it is too long it could fail
    with:"), up to its first blank line."""
    key = ("shown not run", id(vocabulary), "")
    known = doc.memo.get(key)
    if not isinstance(known, frozenset):
        known = doc.memo[key] = (
            code_lines(doc)
            | frozenset(_supposed_blocks(doc, vocabulary))
            | frozenset(_answered_headings(doc, vocabulary))
        )
    return known


_HEADING = first_use_re(r"^\s*(#{1,6})\s")
_SECTION_LINES = 400  # lines an answered section may run (the work stays bounded)


def _answered_headings(doc: Document, vocabulary: ProseVocabulary) -> Iterator[int]:
    """The headings inside a section an FAQ or troubleshooting heading opens (one RE2 pass finds
    those), up to the next heading of its level or above: each names a problem a reader may meet."""
    if "#" not in doc.text:  # no markdown heading: spare the whole-text pass
        return
    total = len(doc)
    for line, _ in _prose_lines(doc, vocabulary.answered_lines):
        opened = _HEADING.match(line.text)
        if opened is None or not vocabulary.answered.search(line.text):
            continue
        level = len(opened.group(1))
        for number in range(line.number + 1, min(total, line.number + _SECTION_LINES) + 1):
            heading = _HEADING.match(doc.lines[number - 1])
            if heading is None:
                continue
            if len(heading.group(1)) <= level:
                break
            yield number


def _supposed_blocks(doc: Document, vocabulary: ProseVocabulary) -> Iterator[int]:
    total = len(doc)
    for line, _ in _prose_lines(doc, vocabulary.supposing_lines):
        text = line.text.rstrip()
        if not text.endswith(_INTRODUCER_ENDS) or not is_sentence(line) or not _supposes(text, vocabulary):
            continue
        number = line.number + 1
        if number <= total and not doc.lines[number - 1].strip():
            number += 1  # one blank line between the introducer and its block
        last = min(total, number + _BLOCK_LINES - 1)
        while number <= last and doc.lines[number - 1].strip():
            yield number
            number += 1


def _supposes(text: str, vocabulary: ProseVocabulary) -> bool:
    """Whether the introducer's last clause supposes what follows and states nothing happened."""
    clauses = _clauses(_unquoted(text), vocabulary)
    last = clauses[-1] if clauses else text
    return vocabulary.supposing.search(last) is not None and not _affirms(last, vocabulary)


_SEQUEL_LINES = 3  # how far back the statement a "then" follows may stand (a short list of steps)


def sequel_stage(cue: ProseCue, doc: Document, vocabulary: ProseVocabulary) -> Stage | None:
    """The stage of the statement a failure clause that names none follows, when it opens by saying
    it comes next ("model weights took 27 GB" / "then i got OOM"): the nearest clause naming a stage
    before it, on its own line or the few unprefixed lines above (a terse note of figures counts: it
    is the person's, no program printed it)."""
    if cue.stage is not None or vocabulary.sequel.search(cue.text) is None:
        return None
    own = doc.lines[cue.line - 1]
    at = own.find(cue.text)
    for number in range(cue.line, max(0, cue.line - _SEQUEL_LINES - 1), -1):
        line = doc.line(number)
        if line.source or line.level:
            continue
        text = line.text[: at if number == cue.line and at >= 0 else len(line.text)]
        named = [s for c in _clauses(_unquoted(text), vocabulary) if (s := _doing(c, vocabulary)) is not None]
        if named:
            return named[-1]
    return None
