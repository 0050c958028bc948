"""tools/score_corpus.py on a small corpus of its own: the per-case lines, the totals split by
`carried_by`, the probes, and the known_miss rewrite that keeps tests/diagnosis honest."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"


def _tool() -> ModuleType:
    sys.path.insert(0, str(REPO / "tools"))  # its sibling corpus_files, as `python tools/…` finds it
    spec = importlib.util.spec_from_file_location("score_corpus", REPO / "tools" / "score_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["score_corpus"] = module
    spec.loader.exec_module(module)
    return module


score = _tool()


@pytest.fixture
def tests_dir(tmp_path: Path) -> Path:
    """A tests/ folder with one case the classifier gets right, one it misses, one healthy excerpt."""
    (tmp_path / "corpus").mkdir()
    healthy = tmp_path / "diagnosis" / "healthy_excerpts"
    healthy.mkdir(parents=True)
    (tmp_path / "corpus" / "t-right.log").write_text(
        "ValueError: Total number of attention heads (52) must be divisible by tensor parallel size (3).\n"
    )
    (tmp_path / "corpus" / "t-right.yaml").write_text(
        "phase: parallelism_config\nvllm_version: null\ncarried_by: line\nsource: s\n"
        "note: '`Total number of attention heads (52)`'\nknown_miss: \"stale\"\n"
    )
    (tmp_path / "corpus" / "t-missed.log").write_text("it just died while loading, no log sorry\n")
    (tmp_path / "corpus" / "t-missed.yaml").write_text(
        "phase: weights_oom\nvllm_version: null\ncarried_by: words\nsource: s\nnote: n\n"
        "decisive_line: while loading\n"
    )
    calm = "gh4-3094-v0-stats-82pct-pending-never-swapped-prose.log"
    shutil.copy(REPO / "tests" / "diagnosis" / "healthy_excerpts" / calm, healthy / "t-calm.log")
    return tmp_path


def test_report_splits_by_carried_by_and_rewrites_known_misses(
    tests_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert score.main(["t-", "--tests", str(tests_dir), "--update-known-misses", "--table"]) == 0
    out = capsys.readouterr().out
    assert "ok   t-right  [line]  parallelism_config -> parallelism_config" in out
    assert "MISS t-missed  [words]  weights_oom -> " in out
    assert "phase, carried_by=line:" in out and "phase, carried_by=words:" in out
    assert "healthy excerpts flagged:      0/1" in out
    assert "leave-out windows (2 of 2 cases with a deciding line)" in out
    assert "re-wrap at 80 columns" in out
    assert "| t-missed | words | weights_oom |" in out
    right = (tests_dir / "corpus" / "t-right.yaml").read_text()
    missed = (tests_dir / "corpus" / "t-missed.yaml").read_text()
    assert "known_miss" not in right, "a case it now gets right loses its stale known_miss"
    assert missed.rstrip().splitlines()[-1].startswith('known_miss: "gives ')


def test_deciding_line_comes_from_the_key_then_the_note() -> None:
    lines = ["INFO boot", "ERROR x", "ValueError: No available memory for the cache blocks."]
    assert score._decisive(lines, "ERROR x", "") == 1
    assert score._decisive(lines, None, "quotes `No available memory for the cache blocks...`") == 2
    assert score._decisive(lines, None, "no quote at all") is None


def test_rewrap_cuts_every_line_at_the_width_mid_word() -> None:
    assert score._rewrap("abcdefgh\n\nxy", 3) == "abc\ndef\ngh\n\nxy"


def test_a_pattern_that_matches_nothing_is_a_clear_error(tests_dir: Path) -> None:
    with pytest.raises(SystemExit) as raised:
        score.main(["nothing-", "--tests", str(tests_dir)])
    assert raised.value.code == 2


def test_every_held_out_case_has_a_deciding_line() -> None:
    cases = score._load(REPO / "tests", ["gh4-"])
    assert [c.name for c in cases if c.phase != "no_failure" and c.decisive is None] == []
