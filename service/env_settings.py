"""One way every process (service, agent, bot) reads its settings from the environment.

A process declares its settings as a msgspec Struct whose numeric fields carry `Meta` bounds, and
names the variable behind each field; `msgspec.convert` does the typing and the bounds, and a bad
value becomes one `SettingsError` sentence naming the variable. The agent's bearer token is read
here too, because the bot sends the same token the agent demands and must apply the same rules.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import msgspec

from service.errors import SettingsError

__all__ = ["MIN_TOKEN_CHARS", "EnvVar", "convert_env", "read_agent_token"]

# A bearer token shorter than this can be guessed or brute-forced over the network.
MIN_TOKEN_CHARS = 32
_FIELD_AT = re.compile(r"at `\$\.(\w+)`")
# Whole numbers may group digits with underscores, as Python writes them (1_048_576).
_GROUPED_DIGITS = re.compile(r"\d+(_\d+)+")

SettingsT = TypeVar("SettingsT", bound=msgspec.Struct)


class EnvVar(msgspec.Struct, frozen=True):
    """The variable behind one settings field, and the words for what it must hold."""

    name: str
    expects: str


def convert_env(
    settings_type: type[SettingsT],
    env: Mapping[str, str],
    variables: Mapping[str, EnvVar],
    **given: object,
) -> SettingsT:
    """A settings Struct from `env`: unset or blank variables keep the field's default; `given` holds
    fields the caller already derived (URLs, paths, token lists) and overrides nothing in `variables`."""
    raw: dict[str, object] = dict(given)
    for field, variable in variables.items():
        value = env.get(variable.name, "").strip()
        if value:
            raw[field] = value.replace("_", "") if _GROUPED_DIGITS.fullmatch(value) else value
    try:
        return msgspec.convert(raw, settings_type, strict=False, dec_hook=_paths)
    except msgspec.ValidationError as err:
        match = _FIELD_AT.search(str(err))
        culprit = variables.get(match.group(1)) if match else None
        if culprit is None:
            raise SettingsError(f"A setting cannot be used: {err}.") from None
        shown = env.get(culprit.name, "").strip()
        raise SettingsError(f"{culprit.name} must be {culprit.expects}, not {shown!r}.") from None


def _paths(kind: type, value: object) -> object:
    """msgspec has no Path type: a path setting arrives as text, or as the Path a caller made."""
    if isinstance(value, kind):
        return value
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)  # msgspec's dec_hook protocol: "not a type this hook decodes"


def _check_token_file_mode(path: Path) -> None:
    """A token file other users can read, or anyone but its owner can rewrite, protects nothing."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading it next reports the reason in one sentence
    if mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
        raise SettingsError(
            f"The token file named by VRAMDOC_AGENT_TOKEN_FILE is readable by other users or writable by "
            f"more than its owner (mode {stat.S_IMODE(mode):04o}): run `chmod 600 {path}` "
            "(or `chmod 640` to share it with a group)."
        )


def read_agent_token(env: Mapping[str, str]) -> str | None:
    """The agent's bearer token from VRAMDOC_AGENT_TOKEN or VRAMDOC_AGENT_TOKEN_FILE; None when
    neither is set. The agent refuses to start without one; the bot then sends none."""
    direct = env.get("VRAMDOC_AGENT_TOKEN", "").strip()
    path = env.get("VRAMDOC_AGENT_TOKEN_FILE", "").strip()
    if direct and path:
        raise SettingsError("Set only one of VRAMDOC_AGENT_TOKEN and VRAMDOC_AGENT_TOKEN_FILE, not both.")
    if path:
        _check_token_file_mode(Path(path))
        try:
            direct = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise SettingsError(
                f"The token file named by VRAMDOC_AGENT_TOKEN_FILE cannot be read ({err.__class__.__name__})."
            ) from None
        if not direct:
            raise SettingsError("The token file named by VRAMDOC_AGENT_TOKEN_FILE is empty.")
    if not direct:
        return None
    if any(c.isspace() for c in direct):
        raise SettingsError("The agent token must not contain whitespace.")
    if len(direct) < MIN_TOKEN_CHARS:
        raise SettingsError(
            f"The agent token has {len(direct)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. the output of `openssl rand -hex 32`)."
        )
    return direct
