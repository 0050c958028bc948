"""Which process in PyTorch's out-of-memory message is vLLM's own, failing one.

PyTorch (2.1+) lists every process NVML reports on the device: the one that failed as "Including
non-PyTorch memory, this process has X memory in use", the others as "Process N has X memory in use".
In containers NVML reports host PIDs, which never equal the container's own, so the failing process is
listed as "Process N has …" too and no "this process" sentence is printed (fact sheet §8). Read from
the message alone: the failing process holds at least what PyTorch reserved in it (allocated plus
reserved but unallocated) and more beside (its CUDA context, NCCL and other non-torch buffers, which
can be many GiB). When exactly one listed process holds that much, it is the failing one; when
several do, the message does not say which, and none is named.

One home for the diagnosis (the `process_in_use_gib` fact) and the fixes (which listed processes
are someone else's, to free).
"""

from __future__ import annotations

from collections.abc import Sequence

from service.schemas import OtherProcess

__all__ = ["ROUNDING_GIB", "failing_process"]

# PyTorch prints each figure to two decimals: the sum of two printed figures and a printed process
# total may differ by this much though the process holds the sum.
ROUNDING_GIB = 0.02


def failing_process(
    listed: Sequence[OtherProcess],
    allocated_gib: float | None,
    unallocated_gib: float | None = None,
    in_use_gib: float | None = None,
) -> OtherProcess | None:
    """The listed process that is the failing one, or None when the message does not say.

    `in_use_gib` is the failing process's use when known: stated ("this process has X", then every
    listed process is another), or read before from this same list (then the listed process holding
    exactly that is the one).
    """
    if allocated_gib is None or not listed:
        return None
    reserved = allocated_gib + (unallocated_gib or 0.0)
    holding = [p for p in listed if p.used_gib >= reserved - ROUNDING_GIB]
    if len(holding) != 1:
        return None
    found = holding[0]
    if in_use_gib is not None and found.used_gib != in_use_gib:
        return None  # "this process has …" was stated: the listed ones are other processes
    return found
