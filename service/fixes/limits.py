"""The arithmetic behind fix values: vLLM's startup check, utilization rounding, valid TP sizes, defaults.

Kept apart from the calculators so the consistency properties (a recommended utilization passes
the startup check with the stated free memory) can be tested on these functions directly.
"""

from __future__ import annotations

import math

from service import budget
from service.versions import Version

__all__ = [
    "GIB",
    "STARTUP_MARGIN_GIB",
    "default_max_num_batched_tokens",
    "default_max_num_seqs",
    "default_utilization",
    "divisors",
    "max_passing_utilization",
    "passes_startup",
    "round_down",
    "round_up",
]

GIB = 2**30
# Kept free below what the log says is free: the log rounds to 0.01 GiB, other processes move a
# little between runs, and a new CUDA context costs a few hundred MiB that may not have been counted.
STARTUP_MARGIN_GIB = 0.5
_NEWEST: Version = (999, 0, 0)


def _bytes(gib: float) -> int:
    return round(gib * GIB)


def passes_startup(free_gib: float, total_gib: float, utilization: float, margin_gib: float = 0.0) -> bool:
    """vLLM's startup check (0.9.1+) in GiB, with `margin_gib` left free (service.budget.startup)."""
    return budget.passes_startup(
        _bytes(free_gib), _bytes(total_gib), utilization, margin_bytes=_bytes(margin_gib)
    )


def round_down(value: float, step: float = 0.01) -> float:
    """`value` rounded down to a multiple of `step`, robust to binary floating-point error."""
    return math.floor(round(value / step, 6)) * step


def round_up(value: float, step: float = 0.01) -> float:
    return math.ceil(round(value / step, 6)) * step


def max_passing_utilization(
    free_gib: float, total_gib: float, margin_gib: float = STARTUP_MARGIN_GIB
) -> float | None:
    """The largest utilization, in steps of 0.01, that passes the startup check with `margin_gib` spare.

    None when not even 0.01 passes (the GPU is essentially full).
    """
    return budget.max_passing_utilization(
        _bytes(free_gib), _bytes(total_gib), margin_bytes=_bytes(margin_gib)
    )


def divisors(n: int) -> list[int]:
    """Every tensor-parallel size that divides `n` attention heads evenly, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def default_utilization(version: Version | None) -> float:
    """`--gpu-memory-utilization` default: 0.90 through 0.19.x, 0.92 from 0.20.0."""
    return 0.92 if (version or _NEWEST) >= (0, 20, 0) else 0.90


def _big_tier(version: Version, gpu_name: str | None, total_gib: float) -> bool | None:
    """Whether vLLM puts this GPU in its large-memory tier of scheduler defaults (V1, 0.8.5+)."""
    if version >= (0, 28, 0) and total_gib >= 160:
        return True
    if total_gib < 70:
        return False
    if gpu_name is None:
        return None
    name = gpu_name.lower()
    if version >= (0, 9, 0) and "a100" in name:
        return False
    return not (version >= (0, 33, 0) and "gb10" in name)


def default_max_num_seqs(
    version: Version | None, gpu_name: str | None, total_gib: float | None
) -> int | None:
    """vLLM's `--max-num-seqs` default for `vllm serve` on this GPU, or None when it cannot be known."""
    v = version or _NEWEST
    if v < (0, 8, 0):
        return 256
    if v < (0, 8, 5):
        return 1024
    if total_gib is None:
        return None
    big = _big_tier(v, gpu_name, total_gib)
    return None if big is None else (1024 if big else 256)


def default_max_num_batched_tokens(
    version: Version | None, gpu_name: str | None, total_gib: float | None
) -> int | None:
    """vLLM's `--max-num-batched-tokens` default for `vllm serve` (V1 with chunked prefill)."""
    v = version or _NEWEST
    if v < (0, 8, 5) or total_gib is None:
        return None
    if v >= (0, 28, 0) and total_gib >= 160:
        return 16384
    big = _big_tier(v, gpu_name, total_gib)
    return None if big is None else (8192 if big else 2048)
