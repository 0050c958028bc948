"""RE2 objects built the first time something uses them, once their patterns passed this RE2 build.

A start compiled every combined prefilter, RE2 set and prose vocabulary before reading a line: a
fifth of what `vramdoc diagnose` on a short log costs, and `vramdoc estimate` needs none of them. A
pattern RE2 rejects must still fail the load, never a request: so a group of patterns is deferred
only when the very same patterns were compiled by this RE2 build before (remembered in the pack
cache, `validated_before`); otherwise the group is compiled at load, which checks it, and the
success is remembered for the next process.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable

import re2

from service.packs.loader import remembered

__all__ = ["re2_build", "validated_before"]


@functools.cache
def re2_build() -> bytes:
    """Which RE2 checked a cached pattern: its extension module's size and time (a new google-re2
    is a new file), so an upgrade checks every pattern again."""
    try:
        found = os.stat(re2._re2.__file__)
    except (AttributeError, OSError):
        return b"re2"
    return f"re2:{found.st_size}:{found.st_mtime_ns}".encode()


def validated_before(patterns: Iterable[str], check: Callable[[], None]) -> bool:
    """True when these patterns (in this order) were compiled by this RE2 build before, so what is
    built from them may be built on first use; else `check()` runs now (raising PackError for a
    pattern RE2 rejects), its success is remembered, and False says it ran."""
    source = "\0".join(patterns).encode("utf-8")
    return remembered(source, check, salt=b"re2-compiled\0" + re2_build())
