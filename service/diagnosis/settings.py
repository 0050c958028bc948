"""Engine settings stated anywhere in a paste, in the spellings of vLLM's own flags.

The command reader (`service.launch`) reads a launch command it can recognise whole: `vllm serve …`,
a balanced `LLM(…)`, a compose file. People paste less: a bare `--tensor-parallel-size 4 \\` line of
a script whose first line is not in the chunk, a benchmark script (`python benchmarks/… --model …
--gpu-memory-utilization 0.2`), a compose or k8s `command:`/`args:` list (`"--max-model-len",
"32768"`), the keyword lines of an `LLM(` call split over lines or cut before its `)`, a YAML
config (`block_size: 16`), and sentences (`I tried setting tensor_parallel_size=2`, "TP=4",
"tensor parallel 8"). Each is a flag of `rules/fixes/flags.yaml` (the one flag table: every flag
with a `fact`) followed by its value; this reader finds them in every spelling vLLM accepts or
prints them in: `--max-model-len`/`--max_model_len` (argparse takes both), the field name
`max_model_len` as a keyword, YAML or dict key, its words (`max model len`, and a `… size` flag
without the `size`: "tensor parallel 8"), and the short options (`-tp 4`, and `TP=4` / "tp 8" as
people write them). Values are read by the type of the fact, as a pasted command's are.

What vLLM itself printed or a recognised command stated comes first (`collect_facts`); these only
fill what nothing else stated, first line first. They are the person's settings, never one of the
figures vLLM's logging bugs misprint (rules/misleading.yaml names rules, and these come from none).
No library reads flags out of free text (argparse and `shlex` need the whole command); the pattern is
built from the flag table, so a flag added there is read here too.

One RE2 pass over the flags' names finds where a spelling may start (over each distinct line once
when the paste repeats: only the lines it finds are read then, each with the lines a spelling can run
on to, a YAML list's `- "8192"`), and at each name only the branches of the flags whose names start
there are tried (at `model_weights_gib=` both `--model`'s and `model_weights_gib`'s).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import re2

from service.diagnosis.command import FACT_TYPES, value_of
from service.diagnosis.normalize import Document
from service.first_use import first_use_re
from service.packs.compiled import leftmost_spans
from service.packs.derived import per_pack
from service.packs.fixes import FixPack
from service.packs.signatures import OPTIONS
from service.packs.sre_code import CompiledPatterns

__all__ = ["StatedSetting", "stated_settings"]


@dataclass(frozen=True, slots=True)
class StatedSetting:
    line: int
    fact: str
    value: object


# Between a flag and its value: `=`, `: `, a space, the `", "` of a quoted list (compose, k8s
# `args: [...]`), the next item of a YAML block list (`- --max-model-len` / `- "8192"`), or the
# parenthesis vLLM's messages put a value in (`Tensor parallel size (8) cannot be larger …`).
# A sentence's verb between them comes first ("--max-model-len set to 512", "max_num_seqs was set
# to 64"): else the plain space would read the verb as the value.
# The verbs of a change a sentence gives a setting ("was set to", "I raised it to"): one list for
# both readings below.
_CHANGED = r"set|changed|raised|lowered|increased|reduced|decreased"
_SET_TO = (
    r"""["'`]?[ \t]+(?:(?:is|was|were|are|been|be)[ \t]+)?"""
    rf"""(?:{_CHANGED})[ \t]+to[ \t]+["'`]?"""
)
_SEPARATOR = (
    rf"""(?:["'`]?\s*[=:]\s*["'`]?|["'`]\s*,\s*["'`]|{_SET_TO}|["'`]?[ \t]+["'`]?|["']?\s*\n\s*-\s+["']?"""
    r"""|["'`]?[ \t]*\([ \t]*)"""
)
_SPOKEN = rf"(?:\s*[=:]\s*|[ \t]*\([ \t]*|{_SET_TO}|\s+)(?=\d)"  # after a flag's words, only a number
# A flag of three words or more also goes by its initials in people's and PRs' words ("GMU 0.9",
# `gmu=0.6`, "MML 4096"), only with a number after it; a `… size` flag is left out (its short
# option is its name there, and "TPS" is throughput)
_INITIALS = r"""(?:\s*[=:]\s*|[ \t]+)["'`]?(?=\d)"""
_MIN_INITIALS = 3
_KEYED = r"""["'`]?\s*[=:]\s*["'`]?"""  # a key that is only a setting with `=` or `:` after it
_VALUE = r"(?P<value>[\w.+\-/]+)"
# A bare field name that is one plain word (`dtype`) says little on its own: only as a key.
_ONE_WORD = first_use_re(r"^[a-z]+$")
# `--model` is also other programs' flag (lm-eval's `--model vllm` names its backend): outside a
# whole command it states the model only as a Hugging Face id or a path (`org/name`, `/models/x`),
# and never as a bare key. A bare `dtype=` keyword is as often a tensor's in pasted code
# (`dtype=x.dtype`) as the engine's: string settings are read as flags or a config file's keys.
_MODEL = "model"
_STRING_FACTS = frozenset({"dtype", "quantization", "kv_cache_dtype"})
# The flag's words without a trailing `size`: "tensor parallel 8", "pipeline parallel 2" (never
# one word alone: "block 16" is no block size).
_SIZE_WORD = " size"
# The prefix a trainer's config puts before a vLLM field it passes on (TRL, OpenRLHF: `vllm_…`).
_WRAPPED = "vllm_"


@dataclass(frozen=True, slots=True)
class _Reader:
    branches: tuple[str, ...]  # every flag's spellings, longest flag first: `--max-model-len` wins
    facts: tuple[str, ...]  # branch -> fact
    keyed: frozenset[int]  # branches that are a config file's key: only first on their line
    # branch -> its spellings followed by the value (group 1, `value`), over the UTF-8 text as RE2
    # reads it (offsets agree): trying the branches in their order at a position is what one
    # alternation of them tries, and each flag's pattern is compiled once (kept in the pack cache)
    patterns: CompiledPatterns
    # RE2 over the names alone (no look-arounds, one linear pass over the paste): only the lines
    # it finds are read, whose many branches would try every position of the text
    names: Any
    spans: Any  # `names`' own search on bytes (`leftmost_spans`): the one a paste runs
    starting: Any  # an RE2 set of the same names, anchored: which names start at a position
    owners: tuple[frozenset[int], ...]  # name (in `starting`'s order) -> the branches it is in
    # the branches some set of names is in, in their order, found when a paste first needs them
    narrowed: dict[frozenset[int], tuple[int, ...]]

    def at(self, names: frozenset[int]) -> tuple[int, ...]:
        """The branches of the flags named by `names`, in their order among all branches."""
        known = self.narrowed.get(names)
        if known is None:
            known = self.narrowed[names] = tuple(sorted(set().union(*(self.owners[n] for n in names))))
        return known


@per_pack()
def _reader(history: FixPack) -> _Reader:
    """The one pattern over every spelling of every flag that states a fact (built once per pack)."""
    branches: list[str] = []
    facts: list[str] = []
    names: dict[str, set[int]] = {}  # a name -> the branches spelling it
    keyed: list[tuple[str, str, str]] = []  # a config file's key: (spelling, fact, name)

    def spelled_by(pattern: str, branch: int) -> None:
        names.setdefault(pattern, set()).add(branch)

    for name in sorted(history.flags, key=len, reverse=True):  # longest first: `--max-model-len` wins
        setting = history.setting(name)
        if setting is None or setting.fact is None or not name.startswith("--"):
            continue
        words = name[2:].split("-")
        field = "_".join(words)
        if setting.switch:  # a switch states a value only as a config file's key (`enforce_eager: true`)
            if FACT_TYPES[setting.fact] == bool | None:
                spelling = rf"(?<![\w\-.]){re.escape(field)}[\"']?[ \t]*:[ \t]*"
                keyed.append((spelling, setting.fact, _name_words(words)))
            continue
        spelled_by(_name_words(words), len(branches))
        spellings = [rf"(?<![\w\-])--{'[-_]'.join(map(re.escape, words))}{_SEPARATOR}"]
        if setting.fact == _MODEL:
            pass  # only as the flag, and only an id or a path (`_setting`)
        elif setting.fact in _STRING_FACTS:
            # only as a flag (`--dtype half`) or a config file's key (`kv_cache_dtype: fp8`, below)
            spelling = rf"(?<![\w\-.]){re.escape(field)}[\"']?[ \t]*:[ \t]*[\"']?"
            keyed.append((spelling, setting.fact, _name_words(words)))
        elif _ONE_WORD.match(field):
            spellings.append(rf"(?<![\w\-.]){re.escape(field)}{_KEYED}")
        else:
            spellings.append(rf"(?<![\w\-.]){re.escape(field)}{_SEPARATOR}")
            spellings.append(rf"(?<![\w\-.]){'-'.join(map(re.escape, words))}{_KEYED}")
            # a wrapper's own key for it: the last part of a Hydra/OmegaConf override's dotted path
            # (verl's `actor_rollout_ref.rollout.max_model_len=256`), and the `vllm_` field a trainer
            # passes on to vLLM (TRL's `vllm_gpu_memory_utilization: 0.8`)
            spellings.append(rf"(?<=\w\.){re.escape(field)}=")
            spellings.append(rf"(?<![\w\-.])(?i:{_WRAPPED}){re.escape(field)}{_SEPARATOR}")
            spoken = " ".join(words)
            spoken_forms = [spoken]
            if spoken.endswith(_SIZE_WORD) and len(words) > 2:  # not "block 16"
                spoken_forms.append(spoken.removesuffix(_SIZE_WORD))
            for form in spoken_forms:
                spellings.append(rf"(?<![\w\-.])(?i:{re.escape(form)}){_SPOKEN}")
            if len(words) >= _MIN_INITIALS and words[-1] != "size":
                initials = "".join(word[0] for word in words)
                spelled_by(rf"\b{initials}\b", len(branches))
                spellings.append(rf"(?<![\w\-.])(?i:{initials}){_INITIALS}")
        for alias in history.flags[name].aliases if name in history.flags else ():
            letters = alias.lstrip("-")
            short = rf"\b{re.escape(letters)}(?:\b|_|\d)" if len(letters) > 1 else rf"{re.escape(alias)}\b"
            spelled_by(short, len(branches))
            spellings.append(rf"(?<![\w\-]){re.escape(alias)}{_SEPARATOR}")
            if len(letters) > 1:  # `TP=4`, "tp 8", "TP8" as people write the short option,
                # and `tp_size=8` / "TP size (8)" as vLLM's messages name the setting
                spellings.append(rf"(?<![\w\-.])(?i:{re.escape(letters)})\s*[=:]?\s*(?=\d+(?![\w.]))")
                spellings.append(rf"(?<![\w\-.])(?i:{re.escape(letters)}[_ ]size){_SEPARATOR}")
        branches.append("(" + "|".join(spellings) + ")")
        facts.append(setting.fact)
    # a fact's own name (DESIGN §3.2) as vLLM's messages print it: `num_attention_heads=64 must be
    # divisible by tp_size=3`, `num_gpu_blocks=1024`
    for fact, kind in FACT_TYPES.items():
        if fact in facts or kind not in (int | None, float | None) or _ONE_WORD.match(fact):
            continue
        spelled_by(_name_words(fact.split("_")), len(branches))
        branches.append(rf"((?<![\w\-.]){re.escape(fact)}{_SEPARATOR})")
        facts.append(fact)
    keyed_branches = frozenset(range(len(branches), len(branches) + len(keyed)))
    for spelling, fact, words_name in keyed:
        spelled_by(words_name, len(branches))
        branches.append(f"({spelling})")
        facts.append(fact)
    ordered = sorted(names)
    prefilter = re2.compile("(?i)" + "|".join(ordered), OPTIONS)
    starting = re2.Set.MatchSet(OPTIONS)
    for each in ordered:
        starting.Add("(?i)" + each)
    starting.Compile()
    return _Reader(
        branches=tuple(branches),
        facts=tuple(facts),
        keyed=keyed_branches,
        patterns=CompiledPatterns([(branch + _VALUE).encode() for branch in branches]),
        names=prefilter,
        spans=leftmost_spans(prefilter),
        starting=starting,
        owners=tuple(frozenset(names[each]) for each in ordered),
        narrowed={},
    )


def _name_words(words: list[str]) -> str:
    """What every spelling of a name holds: its words (a trailing `size` optional after two or
    more), any joint."""
    if len(words) > 2 and words[-1] == "size":
        words = words[:-1]
    return "[-_ ]".join(map(re.escape, words))


def stated_settings(doc: Document, history: FixPack) -> Iterator[StatedSetting]:
    """Every flag value the paste states, in line order (a value told back after its name last)."""
    reader = _reader(history)
    yield from _stated(doc, reader)
    yield from _told_back(doc, reader)


def _stated(doc: Document, reader: _Reader) -> Iterator[StatedSetting]:
    if not doc.repeating:  # one pass over the text as it is
        yield from _read(reader, doc.data, 1)
        return
    lines = doc.lines
    for first, last in _windows(doc, reader.names):
        text = "\n".join(lines[first : last + 1])
        key = ("stated settings", id(reader), text)  # the same lines pasted again are read once
        found = doc.memo.get(key)
        if found is None:
            found = doc.memo[key] = list(_read(reader, text.encode("utf-8", errors="replace"), 1))
        for setting in found:  # type: ignore[attr-defined]
            yield StatedSetting(first + setting.line, setting.fact, setting.value)


# A value a person's sentence gives back to a setting named just before it ("should I increase
# `gpu_memory_utilization`?" / "I have raised it to 0.8"): a verb of change, a word standing for the
# setting, then the value. Only the nearest line above (of the `_BACK` not blank) naming one flag.
_TOLD_WORDS = (
    rf"(?i)\b(?:{_CHANGED}|bumped|put|tried)\s+"
    r"(?:it|them|all(?: of them)?|that|this|both|each|the values?)\s+(?:up\s+|down\s+)?to\s+"
    r"(?P<value>\d+(?:\.\d+)?)\b"
)
_TOLD = first_use_re(_TOLD_WORDS)
# every such sentence holds " to " and a digit: one C-level pass finds the lines that do, over each
# distinct line once where lines repeat (a 2 MB paste of one OOM line pasted over and over is read
# as its one line), where a Python loop over each " to " cost such a paste 14,000 iterations
_TO_NUMBER = first_use_re(rb" to (?=\d)")
_BACK = 3


def _told_back(doc: Document, reader: _Reader) -> Iterator[StatedSetting]:
    """The values sentences give back to a flag a line above named without one."""
    lines = doc.lines
    for number, _ in doc.matched_runs(_TO_NUMBER):
        told = _TOLD.search(lines[number - 1])
        fact = _named_above(reader, lines, number - 1) if told is not None else None
        value = value_of(fact, told.group("value")) if fact is not None and told is not None else None
        if fact is not None and value is not None:
            yield StatedSetting(number, fact, value)


def _named_above(reader: _Reader, lines: list[str], index: int) -> str | None:
    """The one fact the nearest line above `index` that names flags names (none: None)."""
    looked = 0
    for above in range(index - 1, -1, -1):
        if looked >= _BACK:
            return None
        data = lines[above].encode("utf-8", errors="replace")
        if not data.strip():
            continue
        looked += 1
        facts = set()
        for found in reader.names.finditer(data):
            named = reader.starting.Match(data[found.start() :])
            facts |= {reader.facts[b] for n in named for b in reader.owners[n]}
        if facts:
            return facts.pop() if len(facts) == 1 else None
    return None


# A flag's value may sit on a later line than its name: after a separator that takes in newlines
# (`=` or `,` on a line of its own, a YAML list's `- "8192"` on the next), never further than the
# second line after it that is not blank (as Python's bytes `\s` reads blank).
_FOLLOWING = 2
_BLANK = " \t\r\x0b\x0c"


def _windows(doc: Document, names: Any) -> Iterator[tuple[int, int]]:
    """0-based (first, last) line ranges holding every line a name is on, each with the lines its
    spelling can run on to; overlapping ranges are merged, so no spelling crosses one's end."""
    lines, total = doc.lines, len(doc.lines)
    low = high = -1
    for number, repeats in doc.matched_runs(names):
        first, last = number - 1, number + repeats - 2
        ahead = 0
        while ahead < _FOLLOWING and last + 1 < total:
            last += 1
            ahead += bool(lines[last].strip(_BLANK))
        if low >= 0 and first <= high:
            high = max(high, last)
            continue
        if low >= 0:
            yield low, high
        low, high = first, last
    if low >= 0:
        yield low, high


def _read(reader: _Reader, data: bytes, first_number: int) -> Iterator[StatedSetting]:
    """The flag values stated in `data` (UTF-8 lines, the first of them line `first_number`)."""
    pos, number, counted, taken = 0, first_number, 0, 0
    size, spans = len(data), reader.spans
    while (found := spans(data, pos, size)[0])[0] >= 0:
        # a spelling starts at the name or at the dashes before it (`--max-model-len`, `-tp`), and
        # is one of the flags whose names start there (the line's end closes every name)
        at, pos = found
        before = data[at - 2 : at] if at >= 2 else data[:at]
        dashes = 2 if before == b"--" else 1 if before.endswith(b"-") else 0
        if data[max(at - len(_WRAPPED), 0) : at].lower() == _WRAPPED.encode():
            dashes = len(_WRAPPED)  # a trainer's `vllm_` key starts before the name
        elif not dashes and before[-1:].isalnum() or before.endswith(b"_"):
            continue  # every spelling starts after a character that is not a word's (`load_model`)
        end = data.find(b"\n", at)
        branches = reader.at(frozenset(reader.starting.Match(data[at : end if end >= 0 else len(data)])))
        found_at = _first_match(reader, branches, data, range(max(taken, at - dashes), at + 1))
        if found_at is None:
            continue
        branch, match = found_at
        number += data.count(b"\n", counted, match.start())
        counted = match.start()
        taken = pos = max(pos, match.end())
        yield from _setting(reader, branch, match, number, data)


def _first_match(
    reader: _Reader, branches: tuple[int, ...], data: bytes, starts: range
) -> tuple[int, re.Match[bytes]] | None:
    """The first start at which a branch matches, and the first branch there (in their order)."""
    patterns = reader.patterns
    for start in starts:
        for branch in branches:
            match = patterns[branch].match(data, start)
            if match is not None:
                return branch, match
    return None


def _setting(
    reader: _Reader, branch: int, match: re.Match[bytes], number: int, data: bytes
) -> Iterator[StatedSetting]:
    fact = reader.facts[branch]
    if branch in reader.keyed:  # a key opens its line (`  - kv_cache_dtype: fp8`), a YAML mapping's
        opening = data[data.rfind(b"\n", 0, match.start()) + 1 : match.start()]
        if opening.strip(b" \t-\"'{,"):
            return
    raw = match.group("value").decode("utf-8", errors="replace").strip("\"'`").rstrip(".,")
    if fact == _MODEL and "/" not in raw:
        return
    value = value_of(fact, raw)
    if value is not None:
        yield StatedSetting(number, fact, value)
