"""Memory exhaustion as other stacks word it: XLA on TPU, Triton, TensorRT, the kernel's OOM killer
and Ray's memory monitor. Device exhaustion is an OOM placed like any other; host exhaustion is
host_oom, and a Ray host OOM is never read as a CUDA OOM. Lines written from each stack's own
message formats, not from collected cases."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]
DEVICE_OOM_PHASES = {"weights_oom", "warmup_oom", "runtime_oom"}

DEVICE = [
    "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
    "Ran out of memory in memory space vmem. Used 16.5M of 16.0M vmem.",
    "RESOURCE_EXHAUSTED: Error loading program 'jit_step_fun': Attempting to reserve 2.50G at the "
    "bottom of memory. That was not possible.",
    "RuntimeError: Triton Error [CUDA]: out of memory",
    "[TRT] [E] 2: [executionContext.cpp::allocate::1000] Error Code 2: OutOfMemory (Requested size "
    "was 2147483648 bytes.)",
]

HOST = [
    "[ 2457.202445] Tasks state (memory values in pages):",
    "[1234.5] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
    "Memory on the node (IP: 10.0.0.5, ID: 2f0c) where the task (actor ID: 0dab, pid=308, memory "
    "used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage "
    "threshold of 0.95. Ray killed this worker (ID: 9c1e) because it was the most recently scheduled",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
]


@pytest.mark.parametrize("line", DEVICE)
def test_another_stacks_device_oom_is_an_oom(run_classify: Classify, line: str) -> None:
    assert run_classify(line).phase in DEVICE_OOM_PHASES


@pytest.mark.parametrize("line", HOST)
def test_a_host_oom_report_is_host_oom(run_classify: Classify, line: str) -> None:
    assert run_classify(line).phase == "host_oom"


def test_a_ray_host_oom_with_its_oom_advice_is_never_a_cuda_oom(run_classify: Classify) -> None:
    log = "\n".join(
        [
            HOST[2],
            "Refer to the documentation on how to address the out of memory issue: "
            "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
            "Set max_restarts and max_task_retries to enable retry when the task crashes due to OOM.",
        ]
    )
    assert run_classify(log).phase == "host_oom"


def test_rays_oom_advice_alone_under_a_short_oom_title_is_host_oom(run_classify: Classify) -> None:
    # a job log truncated to its last lines keeps the memory monitor's advice without the kill line;
    # a line that also reads as a sentence is still the program's wording, not the person's "OOM"
    log = "\n".join(
        [
            "Trainer OOM",
            "",
            "PID     MEM(GB) COMMAND",
            "7001    30.12   ray::RolloutActor",
            "7002    29.87   ray::RolloutActor",
            "Refer to the documentation on how to address the out of memory issue: "
            "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider "
            "provisioning more memory on this node or reducing task parallelism by requesting more CPUs.",
        ]
    )
    assert run_classify(log).phase == "host_oom"


def test_an_out_of_resources_error_is_not_an_oom(run_classify: Classify) -> None:
    line = "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 66560"
    assert run_classify(line).phase not in DEVICE_OOM_PHASES | {"host_oom"}


def test_a_host_oom_says_the_stage_it_happened_in(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "INFO 05-02 10:11:12 model_runner.py:1008] Loading model weights took 13.48 GB",
            "INFO 05-02 10:11:20 gpu_executor.py:122] # GPU blocks: 2048, # CPU blocks: 8192",
            "Killed",
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "host_oom"
    assert "after the weights loaded" in diagnosis.summary
