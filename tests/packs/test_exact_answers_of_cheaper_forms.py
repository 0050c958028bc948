"""The cheaper RE2 forms of the combined indexes answer what the exact forms answer: the line finder
(one forward pass, no reverse program) finds the lines the searched alternation finds, the finder
built from loosened wide repeats the lines the exact finder finds, and the set built from loosened
wide repeats matches the patterns the exact set matches."""

from __future__ import annotations

from pathlib import Path

import pytest
import re2

from service.diagnosis.normalize import Document
from service.packs import RulePacks
from service.packs.compiled import CheckedLineFinder, CheckedSet, LineFinder, leftmost_spans
from service.packs.signatures import COMBINED_OPTIONS, LINE_OPTIONS, WIDE_LINE_REPEAT, unbounded_form

TESTS = Path(__file__).resolve().parents[1]


def _texts() -> list[str]:
    folders = (TESTS / "corpus", TESTS / "healthy", TESTS / "diagnosis" / "healthy_excerpts")
    return [p.read_text(encoding="utf-8", errors="replace") for f in folders for p in sorted(f.glob("*.log"))]


def _searched_lines(regex: object, data: bytes) -> list[int]:
    """Start offsets of the lines a searched pattern matches inside, each line once."""
    starts, pos = [], 0
    while (match := regex.search(data, pos)) is not None:  # type: ignore[attr-defined]
        start = data.rfind(b"\n", 0, match.start()) + 1
        starts.append(start)
        end = data.find(b"\n", match.start())
        if end < 0:
            break
        pos = end + 1
    return starts


@pytest.mark.parametrize(
    ("pattern", "loose"),
    [
        ("a{0,120}b", "a{0,}b"),
        ("[^)]{1,300}\\)", "[^)]{1,}\\)"),
        ("[\\w ]{1,40}? backend", "[\\w ]{1,}? backend"),
        ("\\d{1,3}\\.\\d{2,4}", "\\d{1,3}\\.\\d{2,4}"),  # narrow repeats cost little: kept
        ("[{0,120}]x", "[{0,120}]x"),  # braces in a class are characters
        ("\\{0,120}", "\\{0,120}"),  # an escaped brace too
        ("\\Qa{0,99}\\E", "\\Qa{0,99}\\E"),  # and quoted text
    ],
)
def test_a_wide_bounded_repeat_is_loosened_and_nothing_else(pattern: str, loose: str) -> None:
    assert unbounded_form(pattern) == loose


def test_the_line_finder_finds_the_lines_the_search_finds(packs: RulePacks) -> None:
    for index in (packs.signatures.eager, packs.signatures.lazy):
        alternation = "|".join(f"(?:{p})" for r in index.rules for p in r.prefilter)
        searched = re2.compile(f"(?m){alternation}", LINE_OPTIONS)
        finder = LineFinder(f"(?m:{alternation})", LINE_OPTIONS)
        for text in _texts():
            data = Document(text).data
            found = [data.rfind(b"\n", 0, hit.start()) + 1 for hit in finder.finditer(data)]
            assert found == _searched_lines(searched, data)


def test_a_line_finder_names_the_line_of_a_match_at_either_end_of_the_text() -> None:
    finder = LineFinder("(?m:^oom|killed$)", LINE_OPTIONS)
    assert finder.search(b"oom at start") is not None and finder.search(b"oom")
    assert [hit.start() for hit in finder.finditer(b"x\noom\nfine\nworker killed")] == [4, 23]
    assert finder.search("kein oom\nalles killed") is not None  # str reads alike
    assert finder.search(b"x\noom", 3) is None  # anchored where asked: a later line only
    with pytest.raises(ValueError, match="never_nl"):
        LineFinder("oom", COMBINED_OPTIONS)


def test_the_checked_set_matches_what_the_exact_set_matches(packs: RulePacks) -> None:
    for index in (packs.signatures.eager, packs.signatures.lazy):
        forms = [f for r in index.rules for f in r.set_forms]
        assert any(unbounded_form(f) != f for f in forms)  # the eager set has wide repeats to check
        exact = re2.Set.SearchSet(COMBINED_OPTIONS)
        for form in forms:
            exact.Add(form)
        exact.Compile()
        checked = CheckedSet(((f, unbounded_form(f)) for f in forms), COMBINED_OPTIONS)
        for text in _texts():
            data = Document(text).data
            assert sorted(checked.Match(data) or ()) == sorted(exact.Match(data) or ())
            for line in data.split(b"\n"):
                assert sorted(checked.Match(line) or ()) == sorted(exact.Match(line) or ())


def test_a_loose_match_the_exact_form_refuses_is_dropped() -> None:
    checked = CheckedSet([("a{0,2}b", "a{0,}b"), ("zzz", "zzz")], COMBINED_OPTIONS, check_now=True)
    assert checked.Match(b"xaab") == [0]
    assert checked.Match(b"-aaab") == [0]  # "aab" inside it: the exact form matches too
    assert CheckedSet([("^a{0,2}b", "^a{0,}b")], COMBINED_OPTIONS).Match(b"aaab") is None
    assert checked.Match(b"zzz aaab") is not None and checked.Match(b"nothing") is None


def _line_of(data: bytes, hit: object) -> int | None:
    return None if hit is None else data.rfind(b"\n", 0, hit.start()) + 1  # type: ignore[attr-defined]


def test_the_checked_line_finder_finds_the_lines_the_exact_finder_finds(packs: RulePacks) -> None:
    eager = packs.signatures.eager
    assert isinstance(eager.prefilter._part("loose"), LineFinder)  # built from loosened forms
    assert any(unbounded_form(p, WIDE_LINE_REPEAT) != p for r in eager.rules for p in r.prefilter)
    for index in (eager, packs.signatures.lazy):
        alternation = "|".join(f"(?:{p})" for r in index.rules for p in r.prefilter)
        exact = LineFinder(f"(?m:{alternation})", LINE_OPTIONS)
        for text in _texts():
            data = Document(text).data
            found = [_line_of(data, hit) for hit in index.prefilter.finditer(data)]
            assert found == [_line_of(data, hit) for hit in exact.finditer(data)]
            for pos in range(0, len(data), 1499):  # from inside a line, up to inside another
                end = pos + 2500
                assert _line_of(data, index.prefilter.search(data, pos, end)) == _line_of(
                    data, exact.search(data, pos, end)
                )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (b"fine\nxx aab\n", 5),  # a loosened form, its exact form matching
        (b"fine\nxaaab\n", 5),  # the loose form matches, the exact one too ("aab" in it)
        (b"fine\nccccd\nzzz\n", 11),  # the loose form only: its line is not one
        (b"fine\nccccd zzz\n", 5),  # the loose form only, and a form never loosened
        (b"fine\n", None),
    ],
)
def test_a_line_only_a_loosened_form_matches_loosely_is_skipped(text: bytes, line: int | None) -> None:
    forms = [("(?m:a{1,2}b)", "(?m:a{1,}b)"), ("(?m:^c{1,2}d)", "(?m:^c{1,}d)"), ("(?m:zzz)", "(?m:zzz)")]
    for check_now in (False, True):
        finder = CheckedLineFinder(forms, LINE_OPTIONS, check_now=check_now)
        assert _line_of(text, finder.search(text)) == line
        assert _line_of(text, finder.search(text.decode())) == line  # str reads alike


def test_a_checked_line_finder_reads_the_text_around_a_window_as_the_exact_one() -> None:
    forms = [("(?m:^c{1,2}b)", "(?m:^c{1,}b)"), ("(?m:\\bzz)", "(?m:\\bzz)")]
    finder = CheckedLineFinder(forms, LINE_OPTIONS)
    exact = LineFinder("(?m:^c{1,2}b)|(?:\\bzz)", LINE_OPTIONS)
    text = b"x ccb yzz\nccb\n"
    for pos in range(len(text)):
        for end in range(pos, len(text) + 1):
            found = finder.search(text, pos, end)
            assert _line_of(text, found) == _line_of(text, exact.search(text, pos, end))


def test_leftmost_spans_are_what_the_search_finds() -> None:
    regex = re2.compile("(?i)model|tp", LINE_OPTIONS)
    spans = leftmost_spans(regex)
    text = b"the Model, -tp 2"
    assert spans(text, 0, len(text))[0] == regex.search(text).span()
    assert spans(text, 11, len(text))[0] == regex.search(text, 11).span()
    assert spans(text, 0, 3)[0] == (-1, -1)


def test_the_candidate_lines_of_a_checked_line_finder_hold_every_line_it_finds(packs: RulePacks) -> None:
    for index in (packs.signatures.eager, packs.signatures.lazy):
        for text in _texts():
            data = Document(text).data
            exact = {_line_of(data, hit) for hit in index.prefilter.finditer(data)}
            candidates = set()
            pos = 0
            while (hit := index.prefilter.candidates(data, pos)) is not None:
                candidates.add(_line_of(data, hit))
                newline = data.find(b"\n", hit.end())
                if newline < 0:
                    break
                pos = newline + 1
            assert exact <= candidates


def test_a_line_only_a_loose_form_matches_is_a_candidate_and_no_hit() -> None:
    forms = [("(?m:^c{1,2}d)", "(?m:^c{1,}d)"), ("(?m:zzz)", "(?m:zzz)")]
    finder = CheckedLineFinder(forms, LINE_OPTIONS)
    text = b"fine\nccccd\nzzz\n"
    assert _line_of(text, finder.candidates(text)) == 5
    assert _line_of(text, finder.search(text)) == 11
