"""vLLM's startup free-memory check (fact sheet §1), the one home for its arithmetic.

vLLM requests ceil(total × gpu_memory_utilization) bytes (int() before the ceil release) and
refuses to start when less is free. The budget reports the check as vLLM runs it (no margin);
a fix that recommends a utilization may keep a margin. Both call these functions.
"""

from __future__ import annotations

import math

__all__ = ["max_passing_utilization", "passes_startup", "requested_bytes"]


def requested_bytes(total_bytes: int, utilization: float, *, ceil: bool = True) -> int:
    """What vLLM asks for: total × utilization, rounded up (or down, before the ceil release)."""
    product = total_bytes * utilization
    return math.ceil(product) if ceil else int(product)


def passes_startup(
    free_bytes: int, total_bytes: int, utilization: float, *, margin_bytes: int = 0, ceil: bool = True
) -> bool:
    """Whether `utilization` passes the check with `margin_bytes` still free afterwards."""
    return requested_bytes(total_bytes, utilization, ceil=ceil) <= free_bytes - margin_bytes


def max_passing_utilization(
    free_bytes: int, total_bytes: int, *, margin_bytes: int = 0, ceil: bool = True
) -> float | None:
    """The largest utilization, in steps of 0.01, that passes with `margin_bytes` spare.

    None when not even 0.01 passes (the GPU is essentially full).
    """
    if total_bytes <= 0:
        return None
    # round() first: a quotient like 29.999999999999996 is 30 cents, not 29
    cents = min(100, math.floor(round((free_bytes - margin_bytes) / total_bytes * 100, 6)))
    while cents >= 1 and not passes_startup(
        free_bytes, total_bytes, cents / 100, margin_bytes=margin_bytes, ceil=ceil
    ):
        cents -= 1
    return cents / 100 if cents >= 1 else None
