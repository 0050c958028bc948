"""Median time of one in-process estimate (target under 1 ms), against encoding its Budget to JSON.

Prints numbers only; the ratio is measured in the same run, so a noisy machine moves both sides.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.budget import estimate  # noqa: E402
from service.packs.catalog import load_catalog  # noqa: E402
from service.schemas import EstimateRequest  # noqa: E402

CASES = [
    EstimateRequest(model="Qwen/Qwen2.5-0.5B-Instruct", gpu="L4", kv_cache_memory_bytes=16 * 2**20),
    EstimateRequest(model="meta-llama/Llama-3.1-8B-Instruct", gpu="A100-80GB", max_model_len=32768),
    EstimateRequest(model="meta-llama/Llama-3.1-70B-Instruct", gpu="H100", gpus=4),
    EstimateRequest(model="deepseek-ai/DeepSeek-R1", gpu="H200", gpus=8),
    EstimateRequest(model="google/gemma-3-27b-it", gpu="L40S", max_model_len=8192),
]


def _median_us(func: Callable[[], object], rounds: int = 400) -> float:
    for _ in range(20):
        func()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    catalog = load_catalog(Path(__file__).resolve().parents[1] / "rules")
    print(f"{'case':45s} {'estimate µs':>12s} {'encode µs':>10s} {'ratio':>7s}")
    medians = []
    for request in CASES:
        budget = estimate(request, catalog)
        est = _median_us(lambda request=request: estimate(request, catalog))
        enc = _median_us(lambda budget=budget: msgspec.json.encode(budget))
        medians.append(est)
        print(f"{request.model or '':45s} {est:12.1f} {enc:10.1f} {est / enc:7.1f}")
    print(f"median of one estimate: {statistics.median(medians) / 1000:.3f} ms (target < 1 ms)")


if __name__ == "__main__":
    main()
