"""Reading a pasted `vllm serve …` or `python -m vllm.entrypoints.openai.api_server …` command.

The command states the configuration the person asked for (facts), and may name flags that do not
exist in their vLLM version: `--disable-cuda-graphs` never existed, `--swap-space` was removed in
0.18.0 (fact sheet §6). Those become findings, so no advice ever builds on a flag vLLM rejects.
Which flags exist when, which fact each states and their short aliases are data: the flag
history in `rules/fixes/flags.yaml` (`FixPack`), the same the fixes are checked against.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import get_type_hints

from service.packs.fixes import FixPack, FlagSpec
from service.packs.signatures import string_fact
from service.quantities import HumanNumberError, command_int
from service.schemas import Facts, Severity
from service.versions import EARLIEST, parse_version

__all__ = ["FlagIssue", "ParsedCommand", "human_int", "parse_command"]

# how a flag's value is read follows the type of the fact it states (DESIGN §3.2)
_FACT_TYPES = get_type_hints(Facts)


_VLLM_START = re.compile(r"\bvllm\s+serve\b|-m\s+vllm\.entrypoints\.(?:openai\.)?api_server\b|vllm-openai\S*")


@dataclass(frozen=True, slots=True)
class FlagIssue:
    """A flag the command uses that vLLM does not accept (in that version)."""

    rule: str
    flag: str
    severity: Severity
    message: str


@dataclass(slots=True)
class ParsedCommand:
    facts: dict[str, object] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    issues: list[FlagIssue] = field(default_factory=list)


def human_int(text: str) -> int | None:
    """A length or count as `vllm serve` reads it (service.quantities); -1, auto or junk -> None."""
    try:
        return command_int(text)
    except HumanNumberError:
        return None


def _tokens(command: str) -> list[str]:
    command = command.split("`", 1)[0]  # an inline code span ends the command
    joined = re.sub(r"\\\s*\n", " ", command).replace("\n", " ")
    try:
        return shlex.split(joined)
    except ValueError:
        return joined.split()


def _value(fact: str, raw: str) -> object | None:
    kind = _FACT_TYPES[fact]
    if kind == int | None:
        return human_int(raw)
    if kind == float | None:
        try:
            return float(raw)
        except ValueError:
            return None
    return string_fact(fact, raw)


def parse_command(command: str, history: FixPack, version: str | None = None) -> ParsedCommand:
    """Facts and flag issues of one pasted command; `version` enables removed/added checks."""
    parsed = ParsedCommand()
    tokens = _tokens(command)
    start = _vllm_start(tokens)
    rest = tokens[start:]
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            if i == 1 and start > 0 and _looks_like_model(token):
                parsed.facts.setdefault("model", token)
            continue
        typed, _, inline = token.partition("=")
        name = _long_name(typed, history)
        parsed.flags.append(name)
        spec = history.flag(name)
        negated = _negated(name, history)
        if spec is None and negated is None:
            continue
        if spec is not None and (issue := _version_issue(name, spec, version)):
            parsed.issues.append(issue)
        setting = history.setting(name) if spec is not None else negated
        if setting is None or setting.switch or negated is not None:
            if setting is not None and setting.fact is not None and _FACT_TYPES[setting.fact] == bool | None:
                parsed.facts[setting.fact] = negated is None
            continue
        raw = inline
        if not inline and i < len(rest) and not rest[i].startswith("--"):
            raw = rest[i]
            i += 1
        if setting.fact is not None and (value := _value(setting.fact, raw)) is not None:
            parsed.facts[setting.fact] = value
    return parsed


def _long_name(typed: str, history: FixPack) -> str:
    """`--max_model_len` → `--max-model-len`, `-tp` → `--tensor-parallel-size` (flags.yaml aliases)."""
    if typed.startswith("--"):
        typed = "--" + typed[2:].replace("_", "-")
    alias = history.aliases.get(typed)
    return alias if alias is not None and typed.startswith("-") and not typed.startswith("--") else typed


def _negated(name: str, history: FixPack) -> FlagSpec | None:
    """The switch `--no-X` turns off (argparse BooleanOptionalAction), when X is a known switch."""
    if not name.startswith("--no-") or name in history.flags:
        return None
    spec = history.flag("--" + name.removeprefix("--no-"))
    return spec if spec is not None and spec.switch else None


def _looks_like_model(token: str) -> bool:
    return bool(re.match(r"^[\w.\-~/]+$", token))


def _vllm_start(tokens: list[str]) -> int:
    """Index just after `vllm serve` / `-m vllm.entrypoints…api_server` / the docker image name."""
    for index, token in enumerate(tokens):
        if token == "serve" and index > 0 and tokens[index - 1].endswith("vllm"):
            return index + 1
        if re.match(r"vllm\.entrypoints\.(?:openai\.)?api_server$", token):
            return index + 1
        if re.match(r"^(?:[\w.\-]+/)*vllm-openai(?::\S+)?$", token):
            return index + 1
    return 0


def _version_issue(name: str, spec: FlagSpec, version: str | None) -> FlagIssue | None:
    if spec.never:
        use = f"; use {spec.replacement}" if spec.replacement else ""
        return FlagIssue(
            "vllm-flag-never-existed", name, "error", f"{name} is not a vLLM flag in any release{use}."
        )
    introduced, removed = spec.versions.bounds
    current = parse_version(version) if version else None
    if current is None:
        if removed is None:
            return None
        return FlagIssue(
            "vllm-flag-removed",
            name,
            "warning",
            f"{name} was removed in vLLM {_text(removed)}; only older releases accept it.",
        )
    if removed is not None and current >= removed:
        return FlagIssue(
            "vllm-flag-removed",
            name,
            "error",
            f"{name} was removed in vLLM {_text(removed)}, so {version} rejects it.",
        )
    # flags.yaml dates flags no later than 0.2.7 only by the oldest sources read, not by when they came
    if introduced is not None and introduced > EARLIEST and current < introduced:
        return FlagIssue(
            "vllm-flag-not-yet-added",
            name,
            "error",
            f"{name} first appeared in vLLM {_text(introduced)}, so {version} rejects it.",
        )
    return None


def _text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def find_command(text: str) -> bool:
    """Whether `text` holds a vLLM launch command."""
    return bool(_VLLM_START.search(text))
