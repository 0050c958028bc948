"""What a pasted launch command states, and the flags its vLLM version rejects.

`service.launch` reads the command in any form (shell, `LLM(…)`, `Namespace(…)`, env file, compose).

The command states the configuration the person asked for (facts), and may name flags that do not
exist in their vLLM version: `--disable-cuda-graphs` never existed, `--swap-space` was removed in
0.18.0 (fact sheet §6). Those become findings, so no advice ever builds on a flag vLLM rejects.
Which flags exist when, which fact each states and their short aliases are data: the flag
history in `rules/fixes/flags.yaml` (`FixPack`), the same the fixes are checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_type_hints

from service.launch import parse_launch
from service.packs.fixes import FixPack, FlagSpec
from service.packs.signatures import string_fact
from service.quantities import HumanNumberError, command_int
from service.schemas import Facts, Severity
from service.versions import EARLIEST, parse_version

__all__ = ["FlagIssue", "ParsedCommand", "human_int", "parse_command"]

# how a flag's value is read follows the type of the fact it states (DESIGN §3.2)
_FACT_TYPES = get_type_hints(Facts)


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
    """Facts and flag issues of one pasted command (any form `service.launch` reads); `version`
    enables removed/added checks. A logged `Namespace(…)` is what vLLM already accepted: no issues."""
    parsed = ParsedCommand()
    launch = parse_launch(command, history.aliases, history.switches)
    if launch.model is not None:
        parsed.facts["model"] = launch.model
    if launch.entrypoint == "llm":  # `serve` is what an unstated entry point is taken to be
        parsed.facts["entrypoint"] = "llm"
    for arg in launch.args:
        if arg.name is None:
            continue
        name = arg.name
        parsed.flags.append(name)
        spec = history.flag(name)
        negated = _negated(name, history)
        if spec is None and negated is None:
            continue
        if spec is not None and launch.form != "namespace" and (issue := _version_issue(name, spec, version)):
            parsed.issues.append(issue)
        setting = history.setting(name) if spec is not None else negated
        if setting is None or setting.fact is None:
            continue
        if setting.switch or negated is not None:
            if _FACT_TYPES[setting.fact] == bool | None:
                parsed.facts[setting.fact] = negated is None
            continue
        if arg.values and (value := _value(setting.fact, arg.values[0])) is not None:
            parsed.facts[setting.fact] = value
    return parsed


def _negated(name: str, history: FixPack) -> FlagSpec | None:
    """The switch `--no-X` turns off (argparse BooleanOptionalAction), when X is a known switch."""
    if not name.startswith("--no-") or name in history.flags:
        return None
    spec = history.flag("--" + name.removeprefix("--no-"))
    return spec if spec is not None and spec.switch else None


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
