"""vLLM version strings as comparable release tuples: the one version parser of the project.

Release strings look like `0.10.2`, `0.12.0rc1`, `0.8.5.post1`, `0.11.1.dev42+g1234abc` or
`v0.29.1`; `packaging` (PEP 440) reads them all. Only the numeric release part matters for which
flags and messages exist (a pre-release of 0.12.0 already has 0.12's flags), so a version is its
(major, minor, patch) tuple; ranges (`>=0.9.1,<=0.13`) are read as PEP 440 specifiers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from packaging.specifiers import Specifier

__all__ = [
    "EARLIEST",
    "NEWEST",
    "Version",
    "VersionRange",
    "VersionSpan",
    "flag_exists",
    "has_floor",
    "parse_span",
    "parse_version",
    "release",
]

Version = tuple[int, int, int]
# The versions a fix must hold for: one stated version, or the known ends of an inferred range.
VersionSpan = tuple[Version | None, ...]

# The oldest release whose flags rules/fixes/flags.yaml records: the floor of a range given only
# an upper bound (`<=0.10.2` includes every release up to it, not just 0.10.2).
EARLIEST: Version = (0, 2, 7)
# An unknown version is taken as the newest release; this orders after every real one.
NEWEST: Version = (999, 0, 0)


# Ranges in the packs are read on every diagnosis (each recipe's and flag's bounds), and a log states
# one version: the same few strings come back, so their parses are kept (bounded: logs choose them).
@functools.lru_cache(maxsize=4096)
def parse_version(text: str) -> Version | None:
    """The (major, minor, patch) of a vLLM version string, or None when it is not one."""
    stated = text.strip()
    parts = _plain_release(stated)
    if parts is None:
        # imported here: its pattern costs a start a compile, and most strings are plain releases
        from packaging.version import InvalidVersion
        from packaging.version import Version as Pep440

        try:
            parts = Pep440(stated).release
        except InvalidVersion:
            return None
    major, minor, patch = (*parts, 0, 0)[:3]
    return major, minor, patch


def _plain_release(text: str) -> tuple[int, ...] | None:
    """The release of a version written as PEP 440's release segment alone (`0.10.2`, `v0.9`),
    as `packaging` reads it; None for any other form (left to `packaging`)."""
    numbers = (text[1:] if text[:1] in ("v", "V") else text).split(".")
    if not all(n.isascii() and n.isdigit() for n in numbers):
        return None
    return tuple(map(int, numbers))


def release(text: str) -> Version:
    """Like `parse_version`, for versions written in the rule packs: raises ValueError when bad."""
    parsed = parse_version(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a vLLM version such as 0.29.1")
    return parsed


class VersionRange(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Releases [introduced, removed) in which a flag, a wording or a default holds.

    The one range convention of the rule packs: `introduced` is the first release that has it,
    `removed` the first release without it; either end may be open (None).
    """

    introduced: str | None = None
    removed: str | None = None

    def __post_init__(self) -> None:
        for name in ("introduced", "removed"):
            text = getattr(self, name)
            if text is not None and parse_version(text) is None:
                raise ValueError(f"{name} {text!r} is not a vLLM version like 0.10.2")
        low, high = self.bounds
        if low is not None and high is not None and high <= low:
            raise ValueError("removed must be a later release than introduced")

    @property
    def bounds(self) -> tuple[Version | None, Version | None]:
        low = parse_version(self.introduced) if self.introduced else None
        high = parse_version(self.removed) if self.removed else None
        return low, high

    @property
    def is_open(self) -> bool:
        return self.introduced is None and self.removed is None

    def contains(self, version: Version | None) -> bool:
        """Whether `version` is in range; an unknown version counts as the newest release."""
        return flag_exists(version, *self.bounds)

    def inclusive(self) -> tuple[Version, Version]:
        """(lowest, highest) release in range; `removed` X.Y.0 makes the highest every (X, Y-1).x."""
        low, high = self.bounds
        if high is None:
            last = NEWEST
        elif high[2] > 0:
            last = (high[0], high[1], high[2] - 1)
        elif high[1] > 0:
            last = (high[0], high[1] - 1, 999)
        else:
            last = (high[0] - 1, 999, 999)
        return low or (0, 0, 0), last


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
    for spec in _specifiers(range_text):
        bound = parse_version(spec.version)
        if bound is None:
            continue
        if spec.operator.startswith("<") and spec.version.count(".") == 1:
            bound = (bound[0], bound[1], 999)
        bounds.append(bound)
    if len(bounds) == 1 and has_floor(None, range_text):
        bounds.append(None)  # no upper bound: up to the newest release
    elif bounds and not has_floor(None, range_text):
        bounds.insert(0, min(EARLIEST, *(b for b in bounds if b is not None)))
    return tuple(bounds) or (None,)


def _specifiers(range_text: str | None) -> list[Specifier]:
    """The parts of a range (PEP 440 specifiers), in the order written; others are skipped."""
    # imported here: most diagnoses state a version and never read a range (about 10 ms a start)
    from packaging.specifiers import InvalidSpecifier, Specifier

    parts: list[Specifier] = []
    for part in (range_text or "").split(","):
        try:
            parts.append(Specifier(part.strip()))
        except InvalidSpecifier:
            continue
    return parts


def has_floor(version: str | None, range_text: str | None = None) -> bool:
    """Whether the oldest version the user may run is known (a stated version, or a `>=` bound).

    Without it, a flag that was removed cannot be called missing: an older release may have it.
    """
    if version and parse_version(version) is not None:
        return True
    return any(spec.operator.startswith(">") for spec in _specifiers(range_text))
