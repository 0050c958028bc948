"""What a pasted launch command states, and the flags its vLLM version rejects.

`service.launch` reads the command in any form (shell, `LLM(…)`, `Namespace(…)`, env file, compose).

The command states the configuration the person asked for (facts), and may name flags that do not
exist in their vLLM version: `--disable-cuda-graphs` never existed, `--swap-space` was removed in
0.18.0 (fact sheet §6). Those become findings, so no advice ever builds on a flag vLLM rejects.
Which flags exist when, which fact each states and their short aliases are data: the flag
history in `rules/fixes/flags.yaml` (`FixPack`), the same the fixes are checked against.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_type_hints

import msgspec

from service.diagnosis.normalize import Document
from service.diagnosis.scan import Hit
from service.launch import parse_launch, python_call_open
from service.packs.fixes import FixPack, FlagSpec
from service.packs.signatures import string_fact
from service.quantities import HumanNumberError, command_int
from service.schemas import Facts, Severity
from service.versions import EARLIEST, parse_version

__all__ = [
    "FACT_TYPES",
    "FlagIssue",
    "ParsedCommand",
    "human_int",
    "command_lines",
    "join_commands",
    "parse_command",
    "value_of",
]

# how a flag's value is read follows the type of the fact it states (DESIGN §3.2)
FACT_TYPES = get_type_hints(Facts)


class FlagIssue(msgspec.Struct, frozen=True):
    """A flag the command uses that vLLM does not accept (in that version)."""

    rule: str
    flag: str
    severity: Severity
    message: str


class ParsedCommand(msgspec.Struct):
    facts: dict[str, object] = msgspec.field(default_factory=dict)
    flags: list[str] = msgspec.field(default_factory=list)
    issues: list[FlagIssue] = msgspec.field(default_factory=list)


# A pasted command continues over at most this many lines.
_MAX_COMMAND_LINES = 40


def join_commands(doc: Document, hits: list[Hit]) -> list[Hit]:
    """`hits` with each pasted command read to its end: over the `\\` continuation lines of a shell
    block (and lines that go on with `--flag …` after one without), and, for a command inside an
    inline code span a terminal or a hard wrap split, up to the closing backtick."""
    out: list[Hit] = []
    for hit in hits:
        command = hit.facts.get("command")
        if isinstance(command, str):
            joined, last = _continued(doc, hit.line.number, hit.line.text, command)
            doc.memo[(_COMMAND_END, hit.line.number, "")] = last
            if joined != command:
                hit = replace(hit, facts={**hit.facts, "command": joined})
        out.append(hit)
    return out


_COMMAND_END = "pasted command's last line"


def command_lines(doc: Document, hits: list[Hit]) -> set[int]:
    """The lines a pasted command takes (its first line and the continuation lines `join_commands`
    read with it): settings the person chose, not messages a program printed."""
    lines: set[int] = set()
    for hit in hits:
        last = doc.memo.get((_COMMAND_END, hit.line.number, ""))
        if isinstance(last, int) and "command" in hit.facts:
            lines.update(range(hit.line.number, last + 1))
    return lines


def _continued(doc: Document, number: int, text: str, command: str) -> tuple[str, int]:
    """The command read over its continuation lines, and the number of its last line."""
    if python_call_open(command):
        return _call_continued(doc, number, command)
    last = number
    start = text.find(command)
    in_span = start >= 0 and text.count("`", 0, start) % 2 == 1 and "`" not in command
    joined, previous = command, doc.lines[number - 1]
    for following in range(number + 1, min(len(doc), number + _MAX_COMMAND_LINES) + 1):
        raw = doc.lines[following - 1]
        piece = doc.line(following).text
        stripped = joined.rstrip()
        if stripped.endswith("\\"):  # a shell continuation: the next line goes on with the command
            joined = stripped[:-1].rstrip() + " " + piece.strip()
        elif in_span and piece.strip():  # a wrap inside the span: no space where it fell in a word
            spaced = previous[-1:].isspace() or raw[:1].isspace()
            joined = joined + (" " if spaced else "") + piece.strip()
        elif piece.lstrip().startswith("--") and not in_span:  # a flag line after a lost backslash
            joined = stripped + " " + piece.strip()
        else:
            break
        previous, last = raw, following
        if in_span and "`" in piece:
            break
    return joined, last


def _call_continued(doc: Document, number: int, command: str) -> tuple[str, int]:
    """A Python call split over lines (`llm = LLM(` then one keyword a line): read to its `)`, a
    code fence's end or the line limit, lines kept apart (a `# comment` ends only its own line)."""
    joined, last = command, number
    for following in range(number + 1, min(len(doc), number + _MAX_COMMAND_LINES) + 1):
        piece = doc.line(following).text
        if piece.lstrip().startswith("```"):
            break
        joined, last = joined + "\n" + piece, following
        if ")" in piece and not python_call_open(joined):  # only a `)` can close it: tokenize then
            break
    return joined, last


def human_int(text: str) -> int | None:
    """A length or count as `vllm serve` reads it (service.quantities); -1, auto or junk -> None."""
    try:
        return command_int(text)
    except HumanNumberError:
        return None


def value_of(fact: str, raw: str) -> object | None:
    """`raw` as the fact `fact` holds it (its Facts type), or None when it does not read as one."""
    kind = FACT_TYPES[fact]
    if kind == int | None:
        return human_int(raw)
    if kind == bool | None:  # a switch's value where a config file sets it (`enforce_eager: true`)
        return {"true": True, "false": False}.get(raw.lower())
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
    if launch.model is not None and (model := string_fact("model", launch.model)) is not None:
        parsed.facts["model"] = model
    if launch.entrypoint == "llm":  # `serve` is what an unstated entry point is taken to be
        parsed.facts["entrypoint"] = "llm"
    for arg in launch.args:
        if arg.name is None:
            continue
        name = history.expand(arg.name, version)  # argparse reads an unambiguous prefix as the option
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
            if FACT_TYPES[setting.fact] == bool | None:
                parsed.facts[setting.fact] = negated is None
            continue
        if arg.values and (value := value_of(setting.fact, arg.values[0])) is not None:
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
