"""The corrected command: the user's own command with exactly the top fix applied."""

from __future__ import annotations

import pytest

from service.fixes import corrected_command, first_command_fix
from service.fixes.command import edit_of, parse_command
from service.packs.fixes import FixPack
from service.schemas import Fix


def _fix(change: str) -> Fix:
    return Fix(id="lower-max-model-len", rank=1, title="t", change=change, why="w", tradeoff="x")


COMMAND = """CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct \\
    --max-model-len 131072 --gpu_memory_utilization=0.95 -tp 1 --enforce-eager \\
    --cuda-graph-sizes 1 2 4 --swap-space 4"""


def test_parse_reads_env_aliases_underscores_and_multi_value_flags(pack: FixPack) -> None:
    parsed = parse_command(COMMAND, pack.aliases)
    assert parsed.env_value("CUDA_VISIBLE_DEVICES") == "0"
    assert parsed.value("--max-model-len") == "131072"
    assert parsed.value("--gpu-memory-utilization") == "0.95"
    assert parsed.value("--tensor-parallel-size") == "1"
    assert parsed.has("--enforce-eager") and parsed.value("--enforce-eager") is None
    assert parsed.flags["--cuda-graph-sizes"] == ("1", "2", "4")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            "--max-model-len 27584",
            "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct "
            "--gpu_memory_utilization=0.95 -tp 1 --enforce-eager --cuda-graph-sizes 1 2 4 --swap-space 4 "
            "--max-model-len 27584",
        ),
        (
            "remove --swap-space",
            "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 "
            "--gpu_memory_utilization=0.95 -tp 1 --enforce-eager --cuda-graph-sizes 1 2 4",
        ),
        (
            "--cudagraph-capture-sizes 1 2 4 instead of --cuda-graph-sizes",
            "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 "
            "--gpu_memory_utilization=0.95 -tp 1 --enforce-eager --swap-space 4 "
            "--cudagraph-capture-sizes 1 2 4",
        ),
        (
            "CUDA_VISIBLE_DEVICES=3",
            "CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 "
            "--gpu_memory_utilization=0.95 -tp 1 --enforce-eager --cuda-graph-sizes 1 2 4 --swap-space 4",
        ),
        (
            "--tensor-parallel-size 2",
            "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 "
            "--gpu_memory_utilization=0.95 --enforce-eager --cuda-graph-sizes 1 2 4 --swap-space 4 "
            "--tensor-parallel-size 2",
        ),
    ],
)
def test_corrected_command_applies_exactly_one_change(change: str, expected: str, pack: FixPack) -> None:
    assert corrected_command(COMMAND, _fix(change), pack) == expected


def test_an_action_leaves_the_command_as_it_was(pack: FixPack) -> None:
    fix = _fix("stop PID 4242 (58.19 GiB) on GPU 0")
    assert edit_of(fix.change) is None
    assert corrected_command("vllm serve m --max-model-len 4096", fix, pack) == (
        "vllm serve m --max-model-len 4096"
    )


def test_values_that_need_quoting_stay_quoted(pack: FixPack) -> None:
    command = """vllm serve m --compilation-config '{"cudagraph_mode": "NONE"}'"""
    assert corrected_command(command, _fix("--max-num-seqs 64"), pack) == (
        """vllm serve m --compilation-config '{"cudagraph_mode": "NONE"}' --max-num-seqs 64"""
    )


def test_first_command_fix_skips_actions() -> None:
    fixes = [_fix("stop PID 1 (2.00 GiB) on GPU 0"), _fix("--gpu-memory-utilization 0.25")]
    assert first_command_fix(fixes) == fixes[1]
    assert first_command_fix(fixes[:1]) is None
