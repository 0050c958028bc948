"""Objects built the first time something uses them: a start pays only for what its work reaches.

`vramdoc diagnose` of a short log imports every module that reads logs, and Python compiles a
module's `re.compile(...)` constants while importing it: about 12 ms of a CLI run, most of it for
patterns a short log never reaches (IPython cells, rich tracebacks, diff hunks, help text). A
pattern built with `first_use_re` is compiled by `re` when one of its methods is first called, the
same pattern with the same flags, so every match is what the eager constant gave.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, AnyStr, cast

__all__ = ["OnFirstUse", "first_use_re"]


class OnFirstUse:
    """Stands for the object `build()` returns, built when one of its attributes is first read.

    Each attribute read is then kept on this object (a bound `search`, a `groupindex`), so a later
    call costs what a call on the built object costs. Two threads racing on the first read build it
    twice at worst; both builds are the same object's equal.
    """

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._built: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe dunders: not the built object's
            raise AttributeError(name)
        built = self._built
        if built is None:
            built = self._built = self._build()
        value = getattr(built, name)
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"OnFirstUse({'built' if self._built is not None else 'not built'})"


# What builds a first-use pattern: `re.compile`, or what the process was told to use instead
# (`compile_with`): one that gives the same pattern faster, as code stored by an earlier process.
_compile: Callable[[Any, int], Any] = re.compile


def compile_with(compile_: Callable[[Any, int], Any]) -> None:
    """Build every first-use pattern not built yet with `compile_(pattern, flags)`, which must
    return what `re.compile(pattern, flags)` returns (the pack cache's stored code, `sre_code`)."""
    global _compile
    _compile = compile_


def _built(pattern: AnyStr, flags: int) -> re.Pattern[AnyStr]:
    built: re.Pattern[AnyStr] = _compile(pattern, flags)
    return built


# every first-use pattern defined so far, in order: what a compiler may prepare for at once
_DEFINED: dict[tuple[str | bytes, int], None] = {}


def defined() -> tuple[tuple[str | bytes, int], ...]:
    """(pattern, flags) of every first-use pattern the modules imported so far define, in order."""
    return tuple(_DEFINED)


def first_use_re(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:
    """`re.compile(pattern, flags)`, compiled when one of its methods or attributes is first used.

    Only attribute use is deferred: pass it where a function calls `re.compile` or `re.sub` on it
    and it is not a pattern (use its methods, as every module-level constant here does)."""
    _DEFINED[(pattern, int(flags))] = None
    return cast("re.Pattern[AnyStr]", OnFirstUse(functools.partial(_built, pattern, int(flags))))
