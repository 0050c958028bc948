"""The arithmetic behind fix values: vLLM's startup check, utilization rounding, valid TP sizes, defaults.

Kept apart from the calculators so the consistency properties (a recommended utilization passes
the startup check with the stated free memory) can be tested on these functions directly.
"""

from __future__ import annotations

import math

from service import budget

__all__ = [
    "GIB",
    "STARTUP_MARGIN_GIB",
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
