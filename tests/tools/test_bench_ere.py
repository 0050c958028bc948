"""bench/classify.py gives grep the scan's own patterns: every one must be valid POSIX ERE."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from service.packs import RulePacks

BENCH = Path(__file__).resolve().parents[2] / "bench" / "classify.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_classify", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bracket_with_a_class_and_an_escaped_bracket_keeps_both() -> None:
    bench = _bench()
    assert bench.to_ere(r"x[\s:\]|,]") == "x[][:space:]:|,]"
    assert bench.to_ere(r"[^\s(]+") == "[^[:space:](]+"


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs GNU grep")
def test_grep_accepts_every_exported_pattern(packs: RulePacks, tmp_path: Path) -> None:
    bench = _bench()
    patterns = [e for e in (bench.to_ere(p) for p in bench.eager_patterns(packs)) if e is not None]
    listed = tmp_path / "patterns.txt"
    listed.write_text("\n".join(patterns) + "\n", encoding="utf-8")
    grep = shutil.which("grep")
    assert grep is not None
    checked = subprocess.run([grep, "-E", "-c", "-f", str(listed), "/dev/null"], capture_output=True)
    assert checked.returncode == 1, checked.stderr.decode()  # 1: no match in an empty file, no error
