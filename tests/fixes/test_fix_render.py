"""Readable fixes: every field a person acts on is printed, in rank order."""

from __future__ import annotations

from pathlib import Path

from service.core import diagnose
from service.fixes.render import render_fixes
from service.packs import load_packs
from service.schemas import DiagnoseRequest, Fix


def test_render_prints_change_why_cost_source_and_the_corrected_command() -> None:
    fixes = [
        Fix(
            id="lower-max-model-len",
            rank=1,
            title="Lower --max-model-len to what the KV cache holds",
            change="--max-model-len 1344",
            why="The KV cache holds one request of at most 1,344 tokens (line 812).",
            tradeoff="Requests longer than this are rejected.",
            source=["line 812"],
        ),
        Fix(
            id="free-gpu-memory",
            rank=2,
            title="Stop the processes holding memory on the GPU",
            change="stop the processes holding 58.69 GiB on this GPU",
            why="58.69 GiB is in use before vLLM loads anything.",
            tradeoff="Whatever those processes do stops.",
            exact=False,
            needs=["other_processes"],
        ),
    ]
    text = render_fixes(fixes, "vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 1344")
    assert text.index("1. Lower --max-model-len") < text.index("2. Stop the processes")
    assert "change:   --max-model-len 1344" in text
    assert "from:     line 812" in text
    assert "exact:    To size this exactly, paste `nvidia-smi` from the host, or name the host." in text
    assert "other_processes" not in text  # a fact name is not words for people
    assert text.endswith("  vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 1344")


def test_render_says_so_when_there_is_nothing_to_fix() -> None:
    assert render_fixes([]) == "Fixes: none to suggest for this failure."


def test_diagnose_attaches_ranked_fixes_and_the_corrected_command() -> None:
    log = (Path(__file__).resolve().parents[1] / "corpus" / "v0.32-kv-capacity-qwen.log").read_text()
    command = "vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 2048"
    diagnosis = diagnose(DiagnoseRequest(log=log, command=command, top=3), load_packs())
    assert diagnosis.fixes[0].change == "--max-model-len 1344"
    assert len(diagnosis.fixes) <= 3
    assert diagnosis.corrected_command == "vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 1344"
