"""RE2 objects built on first use, and the mark that lets a group of patterns wait for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import re2

from service.errors import PackError
from service.first_use import OnFirstUse
from service.packs.compiled import validated_before


def test_the_object_is_built_on_the_first_attribute_read_and_only_once() -> None:
    builds: list[str] = []

    def build() -> object:
        builds.append("built")
        return re2.compile("out of memory")

    regex = OnFirstUse(build)
    assert builds == []
    assert regex.search("CUDA out of memory.") is not None
    assert regex.search("nothing here") is None
    assert regex.groupindex == {}
    assert builds == ["built"]


def test_dunder_probes_do_not_build_it() -> None:
    regex = OnFirstUse(lambda: pytest.fail("built by a probe"))
    assert not hasattr(regex, "__deepcopy__")
    assert "not built" in repr(regex)


def test_patterns_are_checked_until_a_check_passed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(tmp_path / "cache"))
    checks: list[int] = []
    assert validated_before(["a+", "b"], lambda: checks.append(1)) is False
    assert validated_before(["a+", "b"], lambda: checks.append(2)) is True
    assert validated_before(["b", "a+"], lambda: checks.append(3)) is False  # another order, another key
    assert checks == [1, 3]


def test_a_failed_check_is_never_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(tmp_path / "cache"))

    def fails() -> None:
        raise PackError("prose.yaml", "a pattern RE2 cannot compile")

    for _ in range(2):
        with pytest.raises(PackError):
            validated_before(["(a+)+\\1"], fails)


def test_without_a_cache_every_check_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", "off")
    checks: list[int] = []
    for n in range(2):
        assert validated_before(["a"], lambda n=n: checks.append(n)) is False
    assert checks == [0, 1]
