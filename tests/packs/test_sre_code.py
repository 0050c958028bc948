"""`re` patterns kept in the pack cache as their compiled code match as `re.compile` of their text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.packs.sre_code import CompiledPatterns

PATTERNS = [
    rb"((?<![\w\-])--max[-_]model[-_]len(?:[ \t]*=[ \t]*|[ \t]+))(?P<value>[\w.+\-/]+)",
    rb"((?<![\w\-.])(?i:tp)\s*[=:]?\s*(?=\d+(?![\w.])))(?P<value>[\w.+\-/]+)",
    rb"((?<=\w\.)max_model_len=)(?P<value>[\w.+\-/]+)",
]
TEXTS = [
    b"vllm serve m --max-model-len 8192",
    b"I set TP=4 and tp 8",
    b"rollout.max_model_len=256",
    b"x--max_model_len=1",
]


def _same(built: re.Pattern[bytes], pattern: bytes) -> None:
    expected = re.compile(pattern)
    assert built.pattern == expected.pattern
    assert dict(built.groupindex) == dict(expected.groupindex) and built.groups == expected.groups
    for text in TEXTS:
        for start in range(len(text)):
            got, want = built.match(text, start), expected.match(text, start)
            assert (got and (got.span(), got.groups())) == (want and (want.span(), want.groups()))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(tmp_path))
    return tmp_path


def test_patterns_from_the_cache_match_as_re_compile_of_their_text(cache: Path) -> None:
    CompiledPatterns(PATTERNS)  # the first process generates and stores the code
    assert list(cache.glob("*.msgpack"))
    later = CompiledPatterns(PATTERNS)
    assert len(later) == len(PATTERNS)
    for index, pattern in enumerate(PATTERNS):
        _same(later[index], pattern)


def test_a_damaged_cache_entry_compiles_the_text_instead(cache: Path) -> None:
    CompiledPatterns(PATTERNS)
    for entry in cache.glob("*.msgpack"):
        entry.write_bytes(entry.read_bytes()[:-7])
    for index, pattern in enumerate(PATTERNS):
        _same(CompiledPatterns(PATTERNS)[index], pattern)


def test_without_a_cache_folder_each_pattern_is_compiled_by_re(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", "off")
    patterns = CompiledPatterns(PATTERNS)
    for index, pattern in enumerate(PATTERNS):
        _same(patterns[index], pattern)
