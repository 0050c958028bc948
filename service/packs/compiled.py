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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, AnyStr

import re2

from service.packs.loader import remembered

__all__ = [
    "CheckedLineFinder",
    "CheckedSet",
    "LineFinder",
    "LineHit",
    "leftmost_spans",
    "re2_build",
    "validated_before",
]


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


def leftmost_spans(regex: Any) -> Callable[[bytes, int, int], list[tuple[int, int]]]:
    """`regex`'s own RE2 search on UTF-8 bytes: `(text, pos, endpos)` -> the spans of the leftmost
    match in `text[pos:endpos]` and of its groups, `(-1, -1)` first when none (0 <= pos <= endpos
    <= len(text)); what `regex.search` reads, without the wrapper's generator and Match object."""
    return functools.partial(regex._regexp.Match, re2._re2.RE2.Anchor.UNANCHORED)


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


def hits_by_line(search: Callable[[AnyStr, int], LineHit | None], text: AnyStr) -> Iterator[LineHit]:
    """The first hit of each line `search` finds, in order: a finder answers lines, so the next
    search starts at the line after a hit."""
    pos = 0
    while (hit := search(text, pos)) is not None:
        yield hit
        newline = text.find(b"\n" if isinstance(text, bytes) else "\n", hit.end())
        if newline < 0:
            return
        pos = newline + 1


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

    def found_in(self, text: AnyStr, pos: int, endpos: int) -> bool:
        """Whether a pattern matches inside `text[pos:endpos]` (0 <= pos <= endpos <= len(text)), the
        text around it read as a search of the whole text reads it."""
        if isinstance(text, bytes):
            return bool(self._spans(text, pos, endpos)[0][1] >= 0)
        return self.match(text, pos, endpos) is not None

    def finditer(self, text: AnyStr) -> Iterator[LineHit]:
        """One hit for every line a pattern matches inside, in order."""
        return hits_by_line(self.search, text)


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


class CheckedLineFinder:
    """The lines a LineFinder of exact never-newline patterns finds, found by one forward pass of
    their loosened forms (`unbounded_form`: a wide bounded repeat compiled as n copies of its atom
    made most of what the exact alternation cost to compile, and its DFA grew so many states over a
    dense log that each byte cost several times more), each line that pass finds checked exactly.

    A line is checked only against what could have made the loose pass match wrongly: when no
    loosened form matches inside it (one small finder over the line), a form that was not loosened
    did, and it is an exact hit. Otherwise the exact forms run on it: each loosened form whose loose
    form matches the line (an RE2 set says which), then the alternation of the forms never loosened,
    each compiled alone when a line first needs it. Every check runs on the text itself over the
    line's part of `pos:endpos`, so a match sees the same text around it as in the exact pass.

    `check_now` compiles every exact form at once: a load that validates the patterns must see RE2
    accept them all (a request never compiles what a load did not check)."""

    __slots__ = ("_built", "_options", "_pairs", "_parts", "pattern")

    def __init__(self, forms: Sequence[tuple[str, str]], options: Any, *, check_now: bool = False) -> None:
        self._options = options
        self.pattern = "|".join(f"(?:{exact})" for exact, _ in forms)  # what it answers for
        self._pairs = tuple((exact, loose) for exact, loose in forms if exact != loose)
        kept = [exact for exact, loose in forms if exact == loose]
        # what a check builds when a line first needs it: by name, its source
        self._parts: dict[str, str | tuple[str, ...] | None] = {
            "loose": "|".join(f"(?:{loose})" for _, loose in forms),
            "loosened": "|".join(f"(?:{loose})" for _, loose in self._pairs),
            "kept": "|".join(f"(?:{p})" for p in kept) if kept else None,
            "candidates": tuple(loose for _, loose in self._pairs),
        }
        self._built: dict[object, Any] = {}
        self._part("loose"), self._part("loosened")
        if check_now:
            for name in ("loosened", "kept", "candidates", *range(len(self._pairs))):
                self._part(name)

    def _part(self, name: str | int) -> Any:
        """A finder (`loose`, `loosened`, `kept`), the RE2 set of the loosened forms (`candidates`),
        or exact form `name` (an int), built on first use."""
        built = self._built.get(name)
        if built is None and name not in self._built:
            if isinstance(name, int):
                built = re2.compile(self._pairs[name][0], self._options)
            elif name == "candidates":
                built = re2.Set.SearchSet(self._options)
                for loose in self._parts[name] or ():
                    built.Add(loose)
                built.Compile()
            else:
                source = self._parts[name]
                built = None if source is None else LineFinder(str(source), self._options)
            self._built[name] = built
        return built

    def search(self, text: AnyStr, pos: int = 0, endpos: int | None = None) -> LineHit | None:
        """The line of the leftmost exact match in `text[pos:endpos]` (UTF-8 bytes, or str), or None."""
        size = len(text)
        endpos = size if endpos is None else max(0, min(endpos, size))
        loose: LineFinder = self._built["loose"]
        if not self._pairs:
            return loose.search(text, pos, endpos)
        newline: Any = b"\n" if isinstance(text, bytes) else "\n"
        loosened = self._built["loosened"].found_in
        while (hit := loose.search(text, pos, endpos)) is not None:
            at = hit.start()
            start, end = text.rfind(newline, 0, at) + 1, text.find(newline, at)
            low, high = start if start > pos else pos, endpos if end < 0 or end > endpos else end
            # no loosened form inside: one never loosened matched, an exact hit
            if not loosened(text, low, high) or self._exact_in(
                text, (start, size if end < 0 else end), low, high
            ):
                return hit
            if high >= endpos:
                return None
            pos = high + 1
        return None

    def _exact_in(self, text: AnyStr, line: tuple[int, int], low: int, high: int) -> bool:
        """Whether an exact form matches inside `text[low:high]`, part of the line `line` (its start
        and end offsets) that a loosened form matched inside."""
        for index in self._part("candidates").Match(text[line[0] : line[1]]) or ():
            if self._part(index).search(text, low, high) is not None:
                return True
        kept = self._part("kept")
        return kept is not None and kept.search(text, low, high) is not None

    def candidates(self, text: AnyStr, pos: int = 0, endpos: int | None = None) -> LineHit | None:
        """The line of the leftmost match of the loosened forms in `text[pos:endpos]`: every line
        `search` finds, and the few more a loosened form alone matches, for a caller that reads each
        line it is given exactly anyway (one forward pass, no check per line)."""
        size = len(text)
        loose: LineFinder = self._built["loose"]
        return loose.search(text, pos, size if endpos is None else max(0, min(endpos, size)))

    def finditer(self, text: AnyStr) -> Iterator[LineHit]:
        """One hit for every line an exact pattern matches inside, in order."""
        return hits_by_line(self.search, text)
