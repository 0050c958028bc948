"""Export the calibration samples people's pastes gave as rows for the estimator's fitted dataset.

Each sample (service.calibration_store, in the Redis the service uses) becomes one point in the
schema of tests/budget/realworld_numbers.yaml (tests/budget/profiles.py): the configuration the log
stated and the figures vLLM measured. There is no `excerpt` (vramdoc never stores log text) and no
public `url`, so a reviewer checks each row against its thread before it joins the fitted data.

    VRAMDOC_REDIS_URL=redis://localhost:6379/0 python tools/export_calibration.py -o rows.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from service.calibration_store import CalibrationStore
from service.redis_link import connect_redis
from service.schemas import CalibrationSample

# the sample's measured figure -> the point's field (realworld_numbers.yaml's names)
_FIGURES = {
    "weights_gib": "weights_gib",
    "activation_peak_gib": "activation_gib",
    "non_torch_gib": "non_torch_gib",
    "cuda_graph_gib": "cudagraph_gib",
    "available_kv_gib": "kv_gib",
}
_INPUTS = (
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
)


def point_of(sample: CalibrationSample) -> dict[str, Any]:
    """One realworld_numbers.yaml point for one sample (fields it does not know are left out)."""
    point: dict[str, Any] = {
        "id": f"calibration-{sample.key}",
        "url": f"vramdoc:calibration/{sample.key}",
        "model": sample.model,
        "gpu": sample.gpu,
        "vllm_version": sample.vllm_version,
        "tp": sample.tensor_parallel_size,
        "pp": sample.pipeline_parallel_size,
    }
    if sample.block_size is not None:
        point["block_size"] = sample.block_size
    point.update({name: getattr(sample, name) for name in _INPUTS if getattr(sample, name) is not None})
    point.update(
        {field: sample.measured[figure] for figure, field in _FIGURES.items() if figure in sample.measured}
    )
    predicted = ", ".join(f"{figure} {value:g}" for figure, value in sorted(sample.predicted.items()))
    point["note"] = (
        f"from a pasted log (vramdoc calibration sample {sample.key}; the estimator predicted {predicted}); "
        "no excerpt: vramdoc keeps no log text, check the thread before fitting on it"
    )
    return point


def export(samples: list[CalibrationSample]) -> bytes:
    """The points as a YAML document shaped like realworld_numbers.yaml (`points:` list)."""
    return msgspec.yaml.encode({"points": [point_of(s) for s in samples]})


async def _samples(redis_url: str, prefix: str) -> list[CalibrationSample]:
    store = CalibrationStore(connect_redis(redis_url, timeout_s=5.0), key_prefix=f"{prefix}:")
    try:
        return await store.samples()
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default=os.environ.get("VRAMDOC_REDIS_URL"))
    parser.add_argument("--prefix", default=os.environ.get("VRAMDOC_REDIS_PREFIX") or "vramdoc")
    parser.add_argument("-o", "--output", help="write here instead of standard output")
    args = parser.parse_args(argv)
    if not args.redis_url:
        print("export_calibration: give --redis-url or set VRAMDOC_REDIS_URL.", file=sys.stderr)
        return 2
    document = export(asyncio.run(_samples(args.redis_url, args.prefix)))
    if args.output:
        Path(args.output).write_bytes(document)
    else:
        sys.stdout.buffer.write(document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
