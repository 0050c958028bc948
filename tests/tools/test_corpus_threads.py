"""tools/corpus_threads.py on a small tree of its own: every trace a round leaves names a used thread,
and a candidate is checked by repository and number, not by URL spelling."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_threads", REPO / "tools" / "corpus_threads.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_threads"] = module
    spec.loader.exec_module(module)
    return module


threads = _tool()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A checkout with one trace of each kind: sidecar sources, a budget url, REALWORLD.md, names."""
    corpus = tmp_path / "tests" / "corpus"
    healthy = tmp_path / "tests" / "diagnosis" / "healthy_excerpts"
    budget = tmp_path / "tests" / "budget"
    for folder in (corpus, healthy, budget):
        folder.mkdir(parents=True)
    (corpus / "gh5-a.log").write_text("see https://github.com/not/cited/issues/1 in the log itself\n")
    (corpus / "gh5-a.yaml").write_text(
        "phase: not_memory\nsource: 'vllm-project/vllm issue #111 (t), https://github.com/vllm-project/vllm/issues/111'\n"
        "note: 'like kaiko-ai/eva pull request #966'\n"
    )
    (healthy / "gh2-222-v0-stats.log").write_text("INFO stats\n")
    (healthy / "gh3-miaai47-gb10-ok.log").write_text("INFO ok\n")
    (budget / "realworld_numbers.yaml").write_text(
        "points:\n  - id: p\n    url: https://github.com/Org/Repo/pull/333\n"
    )
    (corpus / "REALWORLD.md").write_text("Skipped: #444, #555 and QwenLM/Qwen#666.\n")
    return tmp_path


def test_every_trace_a_round_leaves_names_a_used_thread(root: Path) -> None:
    used = threads.used_threads(root)
    expected = {
        "vllm-project/vllm#111",
        "kaiko-ai/eva#966",
        "vllm-project/vllm#222",
        "org/repo#333",
        "vllm-project/vllm#444",
        "vllm-project/vllm#555",
        "qwenlm/qwen#666",
    }
    assert expected <= used
    assert "not/cited#1" not in used, "a URL inside an excerpt is the paste's, not a thread the round used"


def test_a_candidate_is_matched_by_repository_and_number_whatever_its_spelling(root: Path) -> None:
    used = threads.used_threads(root)
    aliases = threads.aliased_stems(root)
    results = dict(
        threads.check(
            [
                "https://github.com/vllm-project/vllm/pull/111",
                "Kaiko-AI/eva#966",
                "vllm-project/vllm#112",
                "MiaAI-Lab/GLM-Flash#47",
                "other/GLM-Flash#47",
            ],
            used,
            aliases,
        )
    )
    assert results == {
        "https://github.com/vllm-project/vllm/pull/111": True,
        "Kaiko-AI/eva#966": True,
        "vllm-project/vllm#112": False,
        "MiaAI-Lab/GLM-Flash#47": True,
        "other/GLM-Flash#47": False,
    }


def test_text_that_names_no_thread_is_refused_with_a_clear_error() -> None:
    with pytest.raises(SystemExit, match="not a thread reference"):
        threads.check(["just words"], set())
