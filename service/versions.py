"""vLLM version strings as comparable tuples, so a fix never names a flag the user's version lacks.

Release strings look like `0.10.2`, `0.12.0rc1`, `0.11.1.dev42+g1234abc` or `v0.29.1`; only the
numeric release part matters for which flags exist (a pre-release of 0.12.0 already has 0.12's flags).
"""

from __future__ import annotations

import re

__all__ = [
    "EARLIEST",
    "NEWEST",
    "Version",
    "VersionSpan",
    "flag_exists",
    "has_floor",
    "parse_span",
    "parse_version",
]

Version = tuple[int, int, int]
# The versions a fix must hold for: one stated version, or the known ends of an inferred range.
VersionSpan = tuple[Version | None, ...]

# The oldest release whose flags rules/fixes/flags.yaml records: the floor of a range given only
# an upper bound (`<=0.10.2` includes every release up to it, not just 0.10.2).
EARLIEST: Version = (0, 2, 7)
# An unknown version is taken as the newest release; this orders after every real one.
NEWEST: Version = (999, 0, 0)
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


def parse_span(version: str | None, range_text: str | None = None) -> VersionSpan:
    """The stated version, else the bounds of a range like `>=0.9.1,<=0.13` (a minor bound covers
    all its patches), else (None,): unknown, taken as the newest release.

    Flag histories are contiguous, so a flag present at both ends of a range is present throughout.
    """
    if version and (parsed := parse_version(version)) is not None:
        return (parsed,)
    bounds: list[Version | None] = []
    for part in (range_text or "").split(","):
        part = part.strip()
        bound = parse_version(part.lstrip("<>="))
        if bound is None:
            continue
        if part.startswith("<") and part.count(".") == 1:
            bound = (bound[0], bound[1], 999)
        bounds.append(bound)
    if len(bounds) == 1 and range_text and range_text.strip().startswith(">"):
        bounds.append(None)  # no upper bound: up to the newest release
    elif bounds and not has_floor(None, range_text):
        bounds.insert(0, min(EARLIEST, *(b for b in bounds if b is not None)))
    return tuple(bounds) or (None,)


def has_floor(version: str | None, range_text: str | None = None) -> bool:
    """Whether the oldest version the user may run is known (a stated version, or a `>=` bound).

    Without it, a flag that was removed cannot be called missing: an older release may have it.
    """
    if version and parse_version(version) is not None:
        return True
    return any(part.strip().startswith(">") for part in (range_text or "").split(","))
