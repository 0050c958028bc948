"""One rule for which process in PyTorch's OOM message is vLLM's own (service.processes), used by the
diagnosis (`process_in_use_gib`) and the fixes (which listed processes to free).

The two rules it replaces: the diagnosis took the one listed process holding at least PyTorch's reserve
(allocated + reserved-but-unallocated); the fixes took, when no use was known, the listed process
closest to that reserve within max(1.5 GiB, 10%) above it. Where they agreed, the cases below keep
their answers; where they disagreed, the diagnosis's rule is the one kept (see each test)."""

from __future__ import annotations

from service.processes import failing_process
from service.schemas import OtherProcess


def _p(pid: int, used: float) -> OtherProcess:
    return OtherProcess(pid=pid, used_gib=used)


def test_the_only_listed_process_holding_pytorchs_reserve_is_the_failing_one() -> None:
    # both former rules: a container's worker listed as "Process 29144 has 44.16 GiB memory in use"
    assert failing_process([_p(29144, 44.16)], 43.79, 0.06) == _p(29144, 44.16)
    # a small co-tenant beside it changes nothing
    assert failing_process([_p(7, 0.5), _p(29144, 44.16)], 43.79, 0.06) == _p(29144, 44.16)


def test_a_printed_total_a_rounding_below_the_reserve_still_holds_it() -> None:
    # 43.79 + 0.06 printed to two decimals each; the process's own total printed as 43.84
    assert failing_process([_p(1, 43.84)], 43.79, 0.06) == _p(1, 43.84)
    assert failing_process([_p(1, 43.5)], 43.79, 0.06) is None


def test_a_failing_process_with_many_gib_outside_pytorch_is_still_found() -> None:
    # PyTorch holds 37.65 GiB, the process 44.28: 6.6 GiB of CUDA context, NCCL and other non-torch
    # buffers. The fixes' former window (reserve + max(1.5, 10%)) missed it and offered to free vLLM's
    # own worker; it is the only process holding the reserve, so it is the failing one.
    assert failing_process([_p(3663367, 44.28)], 37.38, 0.26921875) == _p(3663367, 44.28)


def test_two_processes_big_enough_to_be_the_failing_one_name_none() -> None:
    # the diagnosis's rule: 40.00 and 44.28 both hold the 37.65 GiB reserve; the fixes' former window
    # picked 40.00 as the closer one, but the process above shows a failing worker can hold 6.6 GiB
    # beside PyTorch's, so closeness does not say which: neither is named
    assert failing_process([_p(3663367, 44.28), _p(4000, 40.0)], 37.38, 0.26921875) is None


def test_a_stated_this_process_makes_every_listed_one_another() -> None:
    # "Including non-PyTorch memory, this process has 15.92 GiB memory in use": PID 29144 is someone else
    assert failing_process([_p(29144, 44.16)], 15.61, 0.06, in_use_gib=15.92) is None


def test_a_use_read_from_the_list_names_the_same_process_again() -> None:
    # the diagnosis set process_in_use_gib from PID 29144's line; the fixes then find that process
    assert failing_process([_p(29144, 44.16)], 43.79, 0.06, in_use_gib=44.16) == _p(29144, 44.16)


def test_without_pytorchs_figures_or_a_list_nothing_is_named() -> None:
    assert failing_process([_p(1, 10.0)], None) is None
    assert failing_process([], 10.0) is None
