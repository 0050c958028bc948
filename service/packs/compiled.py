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
from collections.abc import Callable, Iterable, Iterator
from typing import Any, AnyStr

import re2

from service.packs.loader import remembered

__all__ = ["CheckedSet", "LineFinder", "LineHit", "re2_build", "validated_before"]


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


NEWLINES = (10, "\n")  # a newline read from bytes, from str


class LineHit:
    """Where a LineFinder found its next line: `start()` and `end()` both name one offset inside
    that line (the last byte of the match, or where an empty match stands)."""

    __slots__ = ("_at",)

    def __init__(self, at: int) -> None:
        self._at = at

    def start(self) -> int:
        return self._at

    def end(self) -> int:
        return self._at

    def span(self) -> tuple[int, int]:
        return self._at, self._at


class LineFinder:
    """The next line an alternation of never-newline patterns matches inside, found by one forward
    RE2 pass.

    A searched match needs its start, which RE2 finds by running a reverse program from the match's
    end, built on the first hit: for the OR of every eager prefilter pattern, compiling it cost a
    CLI run a tenth of its instructions, and each hit a second pass. Only the line is wanted, and
    a match never takes in a newline, so its end names its line: the pattern is compiled as
    `\\C*?(?:alternation)` (`\\C*?` is the very prefix RE2 puts before an unanchored search) and
    matched anchored at `pos`, which the forward DFA alone answers. The leftmost match, and so the
    line, is the one the search finds.
    """

    __slots__ = ("_spans", "match", "pattern")

    def __init__(self, alternation: str, options: Any) -> None:
        if not options.never_nl:
            raise ValueError("a LineFinder's patterns must be compiled with never_nl")
        self.pattern = alternation
        regex = re2.compile(f"\\C*?(?:{alternation})", options)
        self.match = regex.match
        # RE2's own anchored match on bytes: its spans, without the wrapper's generator and Match
        self._spans = functools.partial(regex._regexp.Match, re2._re2.RE2.Anchor.ANCHOR_START)

    def search(self, text: AnyStr, pos: int = 0, endpos: int | None = None) -> LineHit | None:
        """The line of the leftmost match in `text[pos:endpos]` (UTF-8 bytes, or str), or None."""
        size = len(text)
        pos, endpos = max(0, min(pos, size)), size if endpos is None else max(0, min(endpos, size))
        if isinstance(text, bytes):
            end = self._spans(text, pos, endpos)[0][1] if pos <= endpos else -1
        else:
            found = self.match(text, pos, endpos)
            end = -1 if found is None else found.end()
        if end < 0:
            return None
        # a match is never empty in practice; an empty one right after a newline is in the next line
        last = text[end - 1] if end > pos else NEWLINES[0]
        return LineHit(end if last in NEWLINES else end - 1)

    def finditer(self, text: AnyStr) -> Iterator[LineHit]:
        """One hit for every line a pattern matches inside, in order."""
        pos = 0
        while (hit := self.search(text, pos)) is not None:
            yield hit
            newline = text.find(b"\n" if isinstance(text, bytes) else "\n", hit.end())
            if newline < 0:
                return
            pos = newline + 1


class CheckedSet:
    """An RE2 search set built from loosened forms, answering what the set of the exact forms
    would: each (exact, loose) pair whose forms differ is checked against its exact form (compiled
    alone, when a text first needs it) wherever the loose form matched.

    `check_now` compiles every exact form at once: a load that validates the patterns must see
    RE2 accept them all (a request never compiles what a load did not check)."""

    __slots__ = ("_checks", "_exact", "_options", "_set")

    def __init__(self, forms: Iterable[tuple[str, str]], options: Any, *, check_now: bool = False) -> None:
        self._options = options
        self._set = re2.Set.SearchSet(options)
        self._exact: dict[int, str] = {}
        for index, (exact, loose) in enumerate(forms):
            self._set.Add(loose)
            if loose != exact:
                self._exact[index] = exact
        self._set.Compile()
        self._checks: dict[int, Any] = {}
        if check_now:
            for index in self._exact:
                self._check(index)

    def _check(self, index: int) -> Any:
        check = self._checks.get(index)
        if check is None:
            check = self._checks[index] = re2.compile(self._exact[index], self._options)
        return check

    def Match(self, text: AnyStr) -> list[int] | None:  # noqa: N802 (RE2's own name, as re2.Set has it)
        """Indexes of the exact forms matching somewhere in `text`, or None (as re2.Set.Match)."""
        found: list[int] | None = self._set.Match(text)
        exact = self._exact
        if not found or exact.keys().isdisjoint(found):
            return found
        kept = [i for i in found if i not in exact or self._check(i).search(text) is not None]
        return kept or None
