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
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import re2

from service.diagnosis.command import FACT_TYPES, value_of
from service.diagnosis.normalize import Document
from service.packs.derived import per_pack
from service.packs.fixes import FixPack
from service.packs.signatures import OPTIONS

__all__ = ["StatedSetting", "stated_settings"]


@dataclass(frozen=True, slots=True)
class StatedSetting:
    line: int
    fact: str
    value: object


# Between a flag and its value: `=`, `: `, a space, the `", "` of a quoted list (compose, k8s
# `args: [...]`), the next item of a YAML block list (`- --max-model-len` / `- "8192"`), or the
# parenthesis vLLM's messages put a value in (`Tensor parallel size (8) cannot be larger …`).
_SEPARATOR = (
    r"""(?:["'`]?\s*[=:]\s*["'`]?|["'`]\s*,\s*["'`]|["'`]?[ \t]+["'`]?|["']?\s*\n\s*-\s+["']?"""
    r"""|["'`]?[ \t]*\([ \t]*)"""
)
_SPOKEN = r"(?:\s*[=:]\s*|[ \t]*\([ \t]*|\s+)(?=\d)"  # after a flag's words, only a number
_KEYED = r"""["'`]?\s*[=:]\s*["'`]?"""  # a key that is only a setting with `=` or `:` after it
_VALUE = r"(?P<value>[\w.+\-/]+)"
# A bare field name that is one plain word (`dtype`) says little on its own: only as a key.
_ONE_WORD = re.compile(r"^[a-z]+$")
# `--model` is also other programs' flag (lm-eval's `--model vllm` names its backend): outside a
# whole command it states the model only as a Hugging Face id or a path (`org/name`, `/models/x`),
# and never as a bare key. A bare `dtype=` keyword is as often a tensor's in pasted code
# (`dtype=x.dtype`) as the engine's: string settings are read as flags or a config file's keys.
_MODEL = "model"
_STRING_FACTS = frozenset({"dtype", "quantization", "kv_cache_dtype"})
# The flag's words without a trailing `size`: "tensor parallel 8", "pipeline parallel 2" (never
# one word alone: "block 16" is no block size).
_SIZE_WORD = " size"


@dataclass(frozen=True, slots=True)
class _Reader:
    pattern: re.Pattern[bytes]  # over the UTF-8 text, as RE2 reads it: offsets agree
    facts: tuple[str, ...]  # group index - 1 -> fact
    keys: frozenset[int]  # groups that are a config file's key: only first on their line
    # RE2 over the names alone (no look-arounds, one linear pass over the paste): only the lines
    # it finds are read with `pattern`, whose many branches would try every position of the text
    names: Any


@per_pack()
def _reader(history: FixPack) -> _Reader:
    """The one pattern over every spelling of every flag that states a fact (built once per pack)."""
    branches: list[str] = []
    facts: list[str] = []
    names: set[str] = set()
    keyed: list[tuple[str, str]] = []  # a config file's key: (spelling, fact)
    for name in sorted(history.flags, key=len, reverse=True):  # longest first: `--max-model-len` wins
        setting = history.setting(name)
        if setting is None or setting.fact is None or not name.startswith("--"):
            continue
        words = name[2:].split("-")
        field = "_".join(words)
        if setting.switch:  # a switch states a value only as a config file's key (`enforce_eager: true`)
            if FACT_TYPES[setting.fact] == bool | None:
                names.add(_name_words(words))
                keyed.append((rf"(?<![\w\-.]){re.escape(field)}[\"']?[ \t]*:[ \t]*", setting.fact))
            continue
        names.add(_name_words(words))
        spellings = [rf"(?<![\w\-])--{'[-_]'.join(map(re.escape, words))}{_SEPARATOR}"]
        if setting.fact == _MODEL:
            pass  # only as the flag, and only an id or a path (`_setting`)
        elif setting.fact in _STRING_FACTS:
            # only as a flag (`--dtype half`) or a config file's key (`kv_cache_dtype: fp8`, below)
            keyed.append((rf"(?<![\w\-.]){re.escape(field)}[\"']?[ \t]*:[ \t]*[\"']?", setting.fact))
        elif _ONE_WORD.match(field):
            spellings.append(rf"(?<![\w\-.]){re.escape(field)}{_KEYED}")
        else:
            spellings.append(rf"(?<![\w\-.]){re.escape(field)}{_SEPARATOR}")
            spellings.append(rf"(?<![\w\-.]){'-'.join(map(re.escape, words))}{_KEYED}")
            spoken = " ".join(words)
            spoken_forms = [spoken]
            if spoken.endswith(_SIZE_WORD) and len(words) > 2:  # not "block 16"
                spoken_forms.append(spoken.removesuffix(_SIZE_WORD))
            for form in spoken_forms:
                spellings.append(rf"(?<![\w\-.])(?i:{re.escape(form)}){_SPOKEN}")
        for alias in history.flags[name].aliases if name in history.flags else ():
            letters = alias.lstrip("-")
            names.add(rf"\b{re.escape(letters)}(?:\b|_|\d)" if len(letters) > 1 else rf"{re.escape(alias)}\b")
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
        branches.append(rf"((?<![\w\-.]){re.escape(fact)}{_SEPARATOR})")
        facts.append(fact)
        names.add(_name_words(fact.split("_")))
    keys = frozenset(range(len(facts) + 1, len(facts) + len(keyed) + 1))
    for spelling, fact in keyed:
        branches.append(f"({spelling})")
        facts.append(fact)
    pattern = re.compile(("(?:" + "|".join(branches) + ")" + _VALUE).encode())
    prefilter = re2.compile("(?i)" + "|".join(sorted(names)), OPTIONS)
    return _Reader(pattern=pattern, facts=tuple(facts), keys=keys, names=prefilter)


def _name_words(words: list[str]) -> str:
    """What every spelling of a name holds: its words (a trailing `size` optional after two or
    more), any joint."""
    if len(words) > 2 and words[-1] == "size":
        words = words[:-1]
    return "[-_ ]".join(map(re.escape, words))


def stated_settings(doc: Document, history: FixPack) -> Iterator[StatedSetting]:
    """Every flag value the paste states, in line order."""
    reader = _reader(history)
    data = doc.text.encode("utf-8", errors="replace")
    pos, number, counted, taken = 0, 1, 0, 0
    while (found := reader.names.search(data, pos)) is not None:
        pos = found.end()
        # a spelling starts at the name or at the dashes before it (`--max-model-len`, `-tp`)
        at = found.start()
        dashes = 2 if data[at - 2 : at] == b"--" else 1 if data[at - 1 : at] == b"-" else 0
        for start in range(max(taken, at - dashes), at + 1):
            match = reader.pattern.match(data, start)
            if match is None:
                continue
            number += data.count(b"\n", counted, match.start())
            counted = match.start()
            taken = pos = max(pos, match.end())
            yield from _setting(reader, match, number, data)
            break


def _setting(reader: _Reader, match: re.Match[bytes], number: int, data: bytes) -> Iterator[StatedSetting]:
    group = next((i for i in range(1, len(reader.facts) + 1) if match.start(i) >= 0), None)
    if group is None:
        return
    if group in reader.keys:  # a key opens its line (`  - kv_cache_dtype: fp8`), a YAML mapping's
        opening = data[data.rfind(b"\n", 0, match.start()) + 1 : match.start()]
        if opening.strip(b" \t-\"'{,"):
            return
    raw = match.group("value").decode("utf-8", errors="replace").strip("\"'`").rstrip(".,")
    if reader.facts[group - 1] == _MODEL and "/" not in raw:
        return
    value = value_of(reader.facts[group - 1], raw)
    if value is not None:
        yield StatedSetting(number, reader.facts[group - 1], value)
