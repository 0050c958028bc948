"""The error a paste's title names is its root when the body shows only what led up to it: warnings
(preemption, a retold warning), or an out-of-memory line whose own numbers say the request fitted in
the GPU's free memory many times over. Lines are written from vLLM's and torch's message formats."""

from __future__ import annotations

from collections.abc import Callable

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

PREEMPTED = (
    "WARNING 09-12 10:00:00 scheduler.py:1089] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
    "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1\n"
)
# torch's allocator message: 20 MiB refused with 60 GiB free
ROOMY_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
    "of 79.11 GiB of which 60.12 GiB is free. Including non-PyTorch memory, this process has 0 bytes "
    "memory in use. Of the allocated memory 8.51 GiB is allocated by PyTorch, and 0.84 GiB is reserved "
    "by PyTorch but unallocated.\n"
)


def test_preemption_warnings_under_a_titled_exception_are_not_its_cause(run_classify: Classify) -> None:
    log = f'Engine dies with "KeyError: 17" under load\n\n{PREEMPTED}{PREEMPTED}'
    assert run_classify(log).phase == "not_memory"
    assert run_classify(PREEMPTED).phase == "kv_preemption"  # alone they still say preemption


def test_a_roomy_oom_under_a_titled_driver_error_is_that_error(run_classify: Classify) -> None:
    log = f"CUDA Error: invalid argument at csrc/allocator.cpp:119\n\n{ROOMY_OOM}"
    assert run_classify(log).phase == "not_memory"


def test_a_roomy_oom_alone_is_still_an_oom(run_classify: Classify) -> None:
    assert run_classify(ROOMY_OOM).phase != "not_memory"


def test_an_oom_that_did_not_fit_stays_the_root_under_a_titled_error(run_classify: Classify) -> None:
    tight = ROOMY_OOM.replace("60.12 GiB is free", "12.00 MiB is free")
    assert (
        run_classify(f"CUDA Error: invalid argument at csrc/allocator.cpp:119\n\n{tight}").phase
        != "not_memory"
    )
