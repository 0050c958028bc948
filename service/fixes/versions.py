"""vLLM version strings as comparable tuples, so a fix never names a flag the user's version lacks.

Release strings look like `0.10.2`, `0.12.0rc1`, `0.11.1.dev42+g1234abc` or `v0.29.1`; only the
numeric release part matters for which flags exist (a pre-release of 0.12.0 already has 0.12's flags).
"""

from __future__ import annotations

import re

__all__ = ["Version", "flag_exists", "parse_version"]

Version = tuple[int, int, int]

_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version | None:
    """The (major, minor, patch) of a vLLM version string, or None when it is not one."""
    match = _RELEASE.match(text)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def flag_exists(version: Version | None, introduced: Version | None, removed: Version | None) -> bool:
    """Whether a flag introduced at `introduced` and gone from `removed` exists in `version`.

    An unknown version is taken as the newest release: a flag that has been removed is never
    offered to someone whose version we do not know, and a flag that exists today is.
    """
    if version is None:
        return removed is None
    if introduced is not None and version < introduced:
        return False
    return removed is None or version < removed
