"""Median time of one in-process estimate (target under 1 ms), against encoding its Budget to JSON;
then the cost of resolving a model the catalog lacks, cold (a loopback Hub stand-in, empty caches)
and warm (the resolved-model cache), as ratios to the in-process catalog estimate.

Prints numbers only; the ratios are measured in the same run, so a noisy machine moves both sides.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the Hub stand-in the tests use

from hub_standin import HubRepo, HubStandIn, serve_hub  # noqa: E402

from service.budget import estimate  # noqa: E402
from service.models.chain import DiskModelCache, ModelResolver, ModelSettings, cite  # noqa: E402
from service.packs.catalog import Catalog, load_catalog  # noqa: E402
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
    rounds: list[list[tuple[float, float]]] = []
    for _ in range(3):
        timings = []
        for request in CASES:
            budget = estimate(request, catalog)
            est = _median_us(lambda request=request: estimate(request, catalog))
            enc = _median_us(lambda budget=budget: msgspec.json.encode(budget))
            timings.append((est, enc))
        rounds.append(timings)
    print(f"{'case (3 rounds: min / median / max)':45s} {'estimate µs':>26s} {'over encoding it':>22s}")
    for index, request in enumerate(CASES):
        est = [r[index][0] for r in rounds]
        ratio = [r[index][0] / r[index][1] for r in rounds]
        print(f"{request.model or '':45s} {_spread(est, '{:8.1f}')} {_spread(ratio, '{:6.1f}')}")
    overall = [statistics.median(t[0] for t in r) / 1000 for r in rounds]
    print(f"median of one estimate, ms: {_spread(overall, '{:.3f}')} (target < 1 ms)")
    resolution(catalog)


def _spread(values: list[float], fmt: str) -> str:
    return " ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


HUB_MODEL = "Qwen/Qwen3-Next-80B-A3B-Instruct"
HUB_CONFIG = ROOT / "tests" / "models" / "configs" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json"


def _resolved_estimate(settings: ModelSettings, cache: DiskModelCache, catalog: Catalog) -> None:
    request = EstimateRequest(model=HUB_MODEL, gpu="H200", max_model_len=32768)
    prepared, resolved = ModelResolver(settings, cache).prepare(request, catalog)
    cite(estimate(prepared, catalog), resolved)


def _round(hub: HubStandIn, catalog: Catalog) -> tuple[float, float, float]:
    """(cold, warm, pasted) time of the Hub model's estimate over the catalog estimate's, in one round.

    `pasted` is the same model with its config.json in the request: what sizing it costs without
    any resolution, so cold − pasted and warm − pasted are the chain's own cost.
    """
    catalog_us = _median_us(lambda: estimate(CASES[1], catalog), rounds=100)
    config = msgspec.json.decode(HUB_CONFIG.read_bytes())
    pasted = EstimateRequest(model=HUB_MODEL, config=config, gpu="H200", max_model_len=32768)
    pasted_us = _median_us(lambda: estimate(pasted, catalog), rounds=100)
    colds = []
    for _ in range(5):
        with tempfile.TemporaryDirectory() as scratch:
            settings = ModelSettings(endpoint=hub.url, cache_dir=f"{scratch}/hf", timeout_s=5.0)
            start = time.perf_counter()
            _resolved_estimate(settings, DiskModelCache(Path(scratch) / "models"), catalog)
            colds.append(time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as scratch:
        settings = ModelSettings(endpoint=hub.url, cache_dir=f"{scratch}/hf", timeout_s=5.0)
        cache = DiskModelCache(Path(scratch) / "models")
        warm_us = _median_us(lambda: _resolved_estimate(settings, cache, catalog), rounds=100)
    return statistics.median(colds) * 1e6 / catalog_us, warm_us / catalog_us, pasted_us / catalog_us


def resolution(catalog: Catalog) -> None:
    repo = HubRepo(files={"config.json": HUB_CONFIG.read_bytes()}, parameters={"BF16": 81_324_862_976})
    with serve_hub(HubStandIn(repos={HUB_MODEL: repo})) as hub:
        rounds = [_round(hub, catalog) for _ in range(3)]
    labels = ("cold (Hub stand-in)", "warm (cached)", "config pasted, no resolution")
    print(f"{HUB_MODEL}, each over one catalog estimate of {CASES[1].model}:")
    for i, label in enumerate(labels):
        ratios = [r[i] for r in rounds]
        low, mid, high = min(ratios), statistics.median(ratios), max(ratios)
        print(f"  {label:30s} min {low:7.1f}  median {mid:7.1f}  max {high:7.1f}")


if __name__ == "__main__":
    main()
