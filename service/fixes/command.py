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

import shlex
from collections.abc import Mapping

import msgspec

from service.first_use import first_use_re
from service.launch import Argument, LaunchCommand, canonical_flag, parse_launch

__all__ = [
    "CommandEdit",
    "ParsedCommand",
    "corrected_command",
    "edit_of",
    "parse_command",
]

_ENV = first_use_re(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# the fixes read the one launch-command parse (service.launch) under the name they have always used
ParsedCommand = LaunchCommand


def parse_command(command: str, aliases: Mapping[str, str] | None = None) -> ParsedCommand:
    """The command in any form `service.launch` reads, flags keyed by the setting they change."""
    return parse_launch(command, aliases)


class CommandEdit(msgspec.Struct, frozen=True):
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
        args += [Argument(flag, (flag, *values), flag, values) for flag, values in edit.settings]
    words = [f"{key}={value}" for key, value in env]
    # a Python or Namespace form is given back as the equivalent `vllm serve` line
    words += ["vllm", "serve"] if parsed.form in ("python", "namespace") else list(parsed.prefix)
    words += [token for arg in args for token in arg.tokens]
    return shlex.join(words)
