"""Python `re` patterns built from the pack data, kept in the pack cache as the code `re` compiled.

`re` parses a pattern and generates its matcher code in Python: about a millisecond for each of the
settings reader's 1,000-character flag patterns, the largest single share of `vramdoc diagnose` on
a short log after RE2. What `re.compile` hands the C matcher is a list of integers and the group
names; the cache keeps those (keyed by the patterns and by the interpreter, whose `_sre` defines the
code), so a later process only has the C side check and load them. The C side validates the code it
is given, and anything unexpected (another interpreter, a damaged entry) compiles the pattern with
`re` instead: every pattern returned matches what `re.compile` of the same text gives.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any, AnyStr

import msgspec

from service import first_use
from service.packs.loader import cached_decode, pack_cache_dir

__all__ = ["CompiledPatterns", "stored_compile"]


class _Code(msgspec.Struct, array_like=True, frozen=True):
    """One pattern's arguments to `_sre.compile`, as `re._compiler.compile` passes them."""

    flags: int
    code: list[int]
    groups: int
    groupindex: dict[str, int]
    indexgroup: list[str | None]


class _Codes(msgspec.Struct, array_like=True, frozen=True):
    codes: list[_Code]


@functools.cache
def _internals() -> tuple[Any, Any, Any] | None:
    """`re`'s parser and code generator and the `_sre` extension, where this interpreter has them."""
    try:
        return tuple(importlib.import_module(name) for name in ("_sre", "re._compiler", "re._parser"))  # type: ignore[return-value]
    except ImportError:
        return None


def _generated(pattern: str | bytes, internals: tuple[Any, Any, Any], flags: int = 0) -> _Code:
    """What `re._compiler.compile(pattern, flags)` passes to `_sre.compile`."""
    _, compiler, parser = internals
    parsed = parser.parse(pattern, flags)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, index in parsed.state.groupdict.items():
        indexgroup[index] = name
    return _Code(
        flags=flags | parsed.state.flags,
        code=[int(op) for op in compiler._code(parsed, flags)],  # its opcodes are int subclasses
        groups=parsed.state.groups - 1,
        groupindex=dict(parsed.state.groupdict),
        indexgroup=indexgroup,
    )


def _loaded(pattern: AnyStr, code: _Code, sre: Any, flags: int = 0) -> re.Pattern[AnyStr]:
    try:
        built: re.Pattern[AnyStr] = sre.compile(
            pattern, code.flags, code.code, code.groups, code.groupindex, tuple(code.indexgroup)
        )
    except (RuntimeError, TypeError, ValueError, OverflowError):
        return re.compile(pattern, flags)  # code this `_sre` rejects: compile the text itself
    return built


def _interpreter(sre: Any) -> bytes:
    """What the stored code depends on besides the pattern: this interpreter and its `_sre`."""
    return f"{sys.implementation.cache_tag}\0{sys.version}\0{sre.MAGIC}\0{sre.CODESIZE}".encode()


class _FirstUseCodes(msgspec.Struct, array_like=True, frozen=True):
    codes: list[_Code | None]  # None: a pattern `re` rejects (compiled, and so raised, at its use)


def _source(pattern: str | bytes, flags: int) -> bytes:
    text = pattern.encode("utf-8", errors="surrogatepass") if isinstance(pattern, str) else pattern
    return b"%d\0%s\0" % (flags, b"str" if isinstance(pattern, str) else b"bytes") + text


def _generated_or_none(pattern: str | bytes, flags: int, internals: tuple[Any, Any, Any]) -> _Code | None:
    try:
        return _generated(pattern, internals, flags)
    except re.error:
        return None


@functools.cache
def _first_use_codes(defined: tuple[tuple[str | bytes, int], ...]) -> dict[tuple[str | bytes, int], _Code]:
    """The code of every first-use pattern `defined` (one pack cache entry for them all, built by
    `re` on a miss), by (pattern, flags)."""
    internals = _internals()
    if internals is None or pack_cache_dir() is None or not defined:
        return {}
    try:
        found = cached_decode(
            b"\0\0".join(_source(pattern, flags) for pattern, flags in defined),
            _FirstUseCodes,
            lambda: _FirstUseCodes([_generated_or_none(p, f, internals) for p, f in defined]),
            salt=b"first-use\0" + _interpreter(internals[0]),
        )
    except (AttributeError, TypeError):  # an interpreter whose `re` is laid out otherwise
        return {}
    if len(found.codes) != len(defined):
        return {}
    return {key: code for key, code in zip(defined, found.codes, strict=True) if code is not None}


_PREPARED: list[tuple[tuple[str | bytes, int], ...]] = []  # the `defined()` the codes were read for


def stored_compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """`re.compile(pattern, flags)` from the code the pack cache holds for it: the modules' own
    patterns (`first_use_re`), which a short paste's diagnosis compiled in `re`'s Python parser on
    every start (about 60 of them, the largest a few milliseconds each). The code of every
    first-use pattern defined when the first one is built is one cache entry (generated by `re` on
    a miss, for the next process); a pattern defined later (a module imported since) is compiled
    by `re`."""
    if not _PREPARED:
        _PREPARED.append(first_use.defined())
    code = _first_use_codes(_PREPARED[0]).get((pattern, flags))
    internals = _internals()
    if code is None or internals is None:
        return re.compile(pattern, flags)
    return _loaded(pattern, code, internals[0], flags)


class CompiledPatterns:
    """`re.compile` of each of some patterns (no flags), by index, each built when first asked for:
    from the pack cache's code where it holds these patterns, else by `re`. Where there is a cache
    folder and no entry yet, the code of them all is generated once and stored for the next process."""

    def __init__(self, patterns: Sequence[bytes]) -> None:
        self._patterns = tuple(patterns)
        self._built: dict[int, re.Pattern[bytes]] = {}
        self._codes: list[_Code] | None = None
        self._sre: Any = None
        internals = _internals()
        if internals is None or pack_cache_dir() is None:
            return  # each pattern compiled by `re` when first asked for
        sre = internals[0]
        interpreter = _interpreter(sre)
        try:
            found = cached_decode(
                b"\0\0".join(self._patterns),
                _Codes,
                lambda: _Codes([_generated(p, internals) for p in self._patterns]),
                salt=interpreter,
            )
        except (AttributeError, TypeError):  # an interpreter whose `re` is laid out otherwise
            return
        if len(found.codes) == len(self._patterns):
            self._codes, self._sre = found.codes, sre

    def __len__(self) -> int:
        return len(self._patterns)

    def __getitem__(self, index: int) -> re.Pattern[bytes]:
        built = self._built.get(index)
        if built is None:
            pattern = self._patterns[index]
            if self._codes is None:
                built = re.compile(pattern)
            else:
                built = _loaded(pattern, self._codes[index], self._sre)
            self._built[index] = built
        return built
