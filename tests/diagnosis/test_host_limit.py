"""A host memory limit stated as a setting, in each tool's own spelling and units, read against what
vLLM keeps in host RAM (the checkpoint while loading, CPU offload, V0's swap space)."""

from __future__ import annotations

import pytest

from service.diagnosis.host_limit import host_room, told_limit_gib
from service.packs import load_packs

PACKS = load_packs()


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("docker run --gpus all -m 16g vllm/vllm-openai --model Qwen/Qwen2.5-7B-Instruct", 16.0),
        ("docker run --gpus all \\\n  --memory 20g \\\n  vllm/vllm-openai --model x", 20.0),
        ("services:\n  vllm:\n    mem_limit: 8g", 8.0),
        ("deploy:\n  resources:\n    limits:\n      memory: 10G", 10.0),
        ("resources:\n  limits:\n    nvidia.com/gpu: 1\n    memory: 12Gi", 12.0),
        ("resources:\n  limits:\n    memory: 8G", 8e9 / 2**30),
        ("[Service]\nMemoryMax=16G", 16.0),
        ("#SBATCH --mem=32G", 32.0),
        ("#SBATCH --mem=32000", 32000 / 1024),
        ("ulimit -v 8388608", 8.0),
        ("I run vLLM in a 6GB container.", 6.0),
        ("my pod has 8Gi and one L4.", 8.0),
        ("It is an RTX 3090 box with 64 GB of RAM", 64.0),
        ("In an 8GB container on a 32 GB RAM box", 8.0),
    ],
)
def test_a_host_limit_is_read_in_its_tools_units(text: str, gib: float) -> None:
    assert told_limit_gib(text.splitlines()) == pytest.approx(gib)


@pytest.mark.parametrize(
    "text",
    [
        "resources:\n  requests:\n    memory: 12Gi",  # a request is no limit
        "#SBATCH --mem-per-cpu=4G",
        "a 24GB card",  # the GPU's memory, not the host's
        "docker run --gpus all vllm/vllm-openai --model x",
    ],
)
def test_what_limits_no_host_memory_is_not_read(text: str) -> None:
    assert told_limit_gib(text.splitlines()) is None


def _room(text: str, facts: dict[str, object]) -> str | None:
    swap = PACKS.fixes.flag("--swap-space")
    removed = swap.versions.removed if swap is not None else None
    return host_room(text.splitlines(), facts, [], PACKS.catalog, PACKS.evidence.host_plenty, removed)


def test_a_limit_below_the_checkpoint_is_short_and_far_above_it_plenty() -> None:
    facts: dict[str, object] = {"model": "Qwen/Qwen2.5-7B-Instruct"}  # 14.2 GiB at bf16
    assert _room("mem_limit: 8g", facts) == "short"
    assert _room("mem_limit: 128g", facts) == "plenty"
    assert _room("mem_limit: 20g", facts) is None


def test_cpu_offload_and_v0_swap_count_per_gpu() -> None:
    facts: dict[str, object] = {"model": "meta-llama/Llama-3.1-8B-Instruct", "tensor_parallel_size": 4}
    swap = "docker run --memory=48g vllm/vllm-openai --model x --swap-space 16"
    assert _room(swap, {**facts, "vllm_version": "0.6.3"}) == "short"  # 14.96 + 4 × 16
    assert _room(swap, {**facts, "vllm_version": "0.9.2"}) == "plenty"  # V1 never swaps: 48 ≥ 2 × 14.96
    offload = "docker run --memory=20g vllm/vllm-openai --model x --cpu-offload-gb 24"
    assert _room(offload, {"model": "Qwen/Qwen2.5-7B-Instruct"}) == "short"


def test_no_limit_or_no_model_says_nothing() -> None:
    assert _room("vllm serve Qwen/Qwen2.5-7B-Instruct", {"model": "Qwen/Qwen2.5-7B-Instruct"}) is None
    assert _room("mem_limit: 8g", {}) is None
