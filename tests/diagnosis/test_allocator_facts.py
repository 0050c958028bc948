"""The failing process's own memory use, read from PyTorch's older allocator message: before 2.2 it
lists every process on the device (`Process N has X memory in use`), the failing one included."""

from __future__ import annotations

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest

OLD_PROCESS_FORM = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total "
    "capacty of 44.35 GiB of which 53.38 MiB is free. Process 3663367 has 44.28 GiB memory in use. {other}"
    "Of the allocated memory 37.38 GiB is allocated by PyTorch, and 275.68 MiB is reserved by PyTorch "
    "but unallocated."
)


def test_the_only_listed_process_holding_pytorchs_reserve_is_the_failing_one(packs: RulePacks) -> None:
    facts = classify(DiagnoseRequest(log=OLD_PROCESS_FORM.format(other="")), packs).facts
    assert facts.process_in_use_gib == 44.28
    assert [p.pid for p in facts.other_processes or []] == [3663367]


def test_two_processes_big_enough_to_be_the_failing_one_name_none(packs: RulePacks) -> None:
    log = OLD_PROCESS_FORM.format(other="Process 4000 has 40.00 GiB memory in use. ")
    assert classify(DiagnoseRequest(log=log), packs).facts.process_in_use_gib is None


def test_the_newer_form_states_the_failing_process_itself(packs: RulePacks) -> None:
    log = OLD_PROCESS_FORM.format(
        other="Including non-PyTorch memory, this process has 40.00 GiB memory in use. "
    )
    assert classify(DiagnoseRequest(log=log), packs).facts.process_in_use_gib == 40.0
