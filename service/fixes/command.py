"""Reading a `vllm serve …` command line and applying one fix to it.

A fix's `change` is either a command edit or an action for a person. Command edits use a small,
fixed grammar so the corrected command can be produced from the fix alone:

    --flag [value ...]                 set the flag (replacing any earlier value)
    --flag [value ...] --other [value ...]
                                       set each flag: a combination that holds where one change does not
    remove --flag                      drop the flag and its values
    --new [value ...] instead of --old drop --old, then set --new
    NAME=value                         run with this environment variable (e.g. CUDA_VISIBLE_DEVICES=1)

Anything else (for example "stop PID 4242 …") is an action and leaves the command unchanged.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CommandEdit",
    "ParsedCommand",
    "corrected_command",
    "edit_of",
    "parse_command",
]

# Flags that never take a value; every other flag takes the tokens after it up to the next flag.
_SWITCH_PREFIXES = ("--enable-", "--disable-", "--no-")
_SWITCHES = frozenset({"--enforce-eager", "--trust-remote-code", "--help", "--version"})
_FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9_.\-]*(=.*)?$")
_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def canonical_flag(flag: str, aliases: Mapping[str, str] | None = None) -> str:
    """`--max_model_len` and `-tp` written the way vLLM's own help spells them.

    `aliases` is the flag history's alias table (`FixPack.aliases`, from rules/fixes/flags.yaml).
    """
    name = flag
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return (aliases or {}).get(name, name)


def _is_switch(flag: str) -> bool:
    return flag in _SWITCHES or flag.startswith(_SWITCH_PREFIXES)


@dataclass(frozen=True)
class _Arg:
    flag: str | None  # canonical flag name, or None for a positional token
    tokens: tuple[str, ...]  # exactly as typed, flag token included


@dataclass(frozen=True)
class ParsedCommand:
    """A command split into its environment prefix and its arguments, each flag with its values."""

    env: tuple[tuple[str, str], ...]
    args: tuple[_Arg, ...]
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)

    def value(self, flag: str) -> str | None:
        """The flag's last value as typed, or None when the flag is absent or a switch."""
        values = self.flags.get(canonical_flag(flag, self.aliases))
        return values[-1] if values else None

    def has(self, flag: str) -> bool:
        return canonical_flag(flag, self.aliases) in self.flags

    def env_value(self, name: str) -> str | None:
        found = [value for key, value in self.env if key == name]
        return found[-1] if found else None


def _tokens(command: str) -> list[str]:
    text = re.sub(r"\\\r?\n", " ", command)
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def parse_command(command: str, aliases: Mapping[str, str] | None = None) -> ParsedCommand:
    """Split a shell command into env assignments, positional words and flags with their values."""
    tokens = _tokens(command)
    env: list[tuple[str, str]] = []
    while tokens and (match := _ENV.match(tokens[0])):
        env.append((match.group(1), match.group(2)))
        tokens.pop(0)
    if tokens and tokens[0] == "env":
        tokens.pop(0)
        while tokens and (match := _ENV.match(tokens[0])):
            env.append((match.group(1), match.group(2)))
            tokens.pop(0)
    args: list[_Arg] = []
    flags: dict[str, tuple[str, ...]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _FLAG.match(token):
            args.append(_Arg(None, (token,)))
            i += 1
            continue
        name, eq, inline = token.partition("=")
        flag = canonical_flag(name, aliases)
        if eq:
            values: tuple[str, ...] = (inline,)
            taken: tuple[str, ...] = (token,)
            i += 1
        elif _is_switch(flag):
            values, taken = (), (token,)
            i += 1
        else:
            j = i + 1
            while j < len(tokens) and not _FLAG.match(tokens[j]):
                j += 1
            values = tuple(tokens[i + 1 : j])
            taken = tuple(tokens[i:j])
            i = j
        args.append(_Arg(flag, taken))
        flags[flag] = values
    return ParsedCommand(env=tuple(env), args=tuple(args), flags=flags, aliases=aliases or {})


@dataclass(frozen=True)
class CommandEdit:
    """One command edit read from a fix's `change`."""

    set_flag: str | None = None
    values: tuple[str, ...] = ()
    remove_flag: str | None = None
    env: tuple[str, str] | None = None
    also_set: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def settings(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Every (flag, values) the edit sets, the first flag first."""
        first = ((self.set_flag, self.values),) if self.set_flag is not None else ()
        return first + self.also_set


def edit_of(change: str, aliases: Mapping[str, str] | None = None) -> CommandEdit | None:
    """The command edit a fix's `change` describes, or None when the change is an action."""
    text = change.strip()
    if text.startswith("remove --"):
        rest = text.removeprefix("remove ").split()
        return CommandEdit(remove_flag=canonical_flag(rest[0], aliases)) if len(rest) == 1 else None
    if text.startswith("--"):
        main, sep, old = text.partition(" instead of ")
        if sep and not (old.startswith("-") and len(old.split()) == 1):
            return None
        settings: list[tuple[str, tuple[str, ...]]] = []
        for word in main.split():
            if word.startswith("--"):
                settings.append((canonical_flag(word, aliases), ()))
            else:
                flag, values = settings[-1]
                settings[-1] = (flag, (*values, word))
        (flag, values), *more = settings
        return CommandEdit(
            set_flag=flag,
            values=values,
            remove_flag=canonical_flag(old, aliases) if sep else None,
            also_set=tuple(more),
        )
    match = _ENV.match(text)
    if match and " " not in text:
        return CommandEdit(env=(match.group(1), match.group(2)))
    return None


def corrected_command(command: str, change: str, aliases: Mapping[str, str] | None = None) -> str:
    """The command with one fix's change applied, ready to paste (one line, shell-quoted).

    An action (a change that is not a command edit) returns the command unchanged, normalized.
    """
    parsed = parse_command(command, aliases)
    edit = edit_of(change, aliases)
    env = list(parsed.env)
    args = list(parsed.args)
    if edit is not None:
        if edit.env is not None:
            env = [(key, value) for key, value in env if key != edit.env[0]] + [edit.env]
        drop = {edit.remove_flag} - {None} | {flag for flag, _ in edit.settings}
        args = [arg for arg in args if arg.flag not in drop]
        args += [_Arg(flag, (flag, *values)) for flag, values in edit.settings]
    words = [f"{key}={value}" for key, value in env]
    words += [token for arg in args for token in arg.tokens]
    return shlex.join(words)
