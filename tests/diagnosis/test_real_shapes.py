"""Shapes seen in logs pasted to public vLLM issues: CI prefixes, tracebacks glued to wrappers,
worker tags, bold markdown, lines wrapped by the web page, and the dead-engine errors of serving."""

from __future__ import annotations

from collections.abc import Callable

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

OOM_TAIL = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of 14.62 GiB of which "
    "3.31 MiB is free. Including non-PyTorch memory, this process has 14.61 GiB memory in use. Of the "
    "allocated memory 14.42 GiB is allocated by PyTorch, and 23.14 MiB is reserved by PyTorch but "
    "unallocated."
)


def test_ci_pipe_prefix_and_traceback_glued_to_the_wrapper(run_classify: Classify) -> None:
    prefix = "  | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] "
    log = "\n".join(
        [
            "[2025-03-10T15:07:20Z] INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took "
            "0.2389 GB and 0.977005 seconds",
            "--",
            prefix + "EngineCore hit an exception: Traceback (most recent call last):",
            prefix + '  File "/usr/lib/vllm/v1/engine/core.py", line 59, in __init__',
            prefix + '  File "/usr/lib/vllm/v1/engine/core.py", line 120, in _initialize_kv_caches',
            prefix + "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.",
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "kv_cache_capacity"
    assert diagnosis.facts.model_weights_gib == 0.2389
    assert diagnosis.evidence[-1].line == 6


def test_worker_tagged_oom_under_profiling_frames_with_other_ranks_interleaved(
    run_classify: Classify,
) -> None:
    tag_a = "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] "
    tag_b = "(VllmWorkerProcess pid=195297) INFO 03-02 19:49:43 [model_runner.py:1] "
    log = "\n".join(
        [
            tag_a
            + "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.",
            tag_a + "Traceback (most recent call last):",
            tag_b + "Loading safetensors checkpoint shards: 100% Completed | 4/4",
            tag_a + '  File "/vllm/worker/worker.py", line 229, in determine_num_available_blocks',
            tag_a + '  File "/vllm/worker/model_runner.py", line 1450, in profile_run',
            tag_a + '  File "/vllm/worker/model_runner.py", line 1700, in execute_model',
            tag_a + "torch.OutOfMemoryError: " + OOM_TAIL,
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "warmup_oom"
    assert diagnosis.facts.free_gib == 3.31 / 1024
    assert diagnosis.facts.total_gib == 14.62


def test_bold_markdown_around_a_pasted_line(run_classify: Classify) -> None:
    log = (
        "**(VllmWorker rank=5 pid=50999) ERROR 07-07 15:19:48 [multiproc_executor.py:492] "
        "torch.OutOfMemoryError: " + OOM_TAIL + "**\n"
        "Loading safetensors checkpoint shards:  50% Completed | 2/4\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.facts.torch_reserved_unallocated_gib == 23.14 / 1024
    assert diagnosis.evidence[0].text.startswith("torch.OutOfMemoryError")


def test_web_wrapped_line_keeps_the_numbers_of_each_half(run_classify: Classify) -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 232.00 MiB. GPU 0 has a total "
        "capacity of 23.57 GiB of which 154.25 MiB is free. Including non-PyTorch memory, this proce\n"
        "ss has 23.40 GiB memory in use. Of the allocated memory 22.88 GiB is allocated by PyTorch, and "
        "188.29 MiB is reserved by PyTorch but unallocated.\n"
    )
    facts = run_classify(log).facts
    assert facts.tried_to_allocate_gib == 232 / 1024
    assert facts.torch_allocated_gib == 22.88
    # the wrap splits the word "process", not the number: the second half still states it
    assert facts.process_in_use_gib == 23.4


def test_dead_engine_errors_place_a_context_free_oom_in_serving(run_classify: Classify) -> None:
    log = (
        "ERROR 03-19 10:55:18 [serving_chat.py:677] vllm.engine.multiprocessing.MQEngineDeadError: "
        "Engine loop is not running. Inspect the stacktrace to find the original error: OutOfMemoryError('"
        + OOM_TAIL
        + "').\n"
        "ERROR 03-19 10:55:18 [engine.py:158] OutOfMemoryError('" + OOM_TAIL + "')\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "runtime_oom"
    assert diagnosis.evidence[-1].line == 2


def test_v0_cuda_graph_capture_wording_places_the_oom_in_warmup(run_classify: Classify) -> None:
    log = (
        "INFO 10-28 11:18:06 model_runner.py:1067] Loading model weights took 65.7407 GB\n"
        "INFO 10-28 11:18:08 distributed_gpu_executor.py:57] # GPU blocks: 3140, # CPU blocks: 1638\n"
        "INFO 10-28 11:18:10 model_runner.py:1395] Capturing the model for CUDA graphs. This may lead to "
        "unexpected consequences if the model is not static.\n"
        "torch.OutOfMemoryError: " + OOM_TAIL + "\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "warmup_oom"
    assert diagnosis.facts.model_weights_gib == 65.7407
    assert diagnosis.facts.num_gpu_blocks == 3140


def test_method_named_by_the_worker_wrapper_places_the_oom(run_classify: Classify) -> None:
    log = (
        "(VllmWorkerProcess pid=7) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Exception in worker "
        "VllmWorkerProcess while processing method load_model.\n"
        "(VllmWorkerProcess pid=7) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] "
        "torch.OutOfMemoryError: " + OOM_TAIL
    )
    assert run_classify(log).phase == "weights_oom"


def test_worker_failing_in_its_constructor_places_a_frameless_oom_in_loading(run_classify: Classify) -> None:
    log = (
        "(Worker_TP3 pid=411) ERROR 07-01 10:00:00 [multiproc_executor.py:546] WorkerProc failed to start.\n"
        "(Worker_TP3 pid=411) ERROR 07-01 10:00:00 [multiproc_executor.py:546] torch.OutOfMemoryError: "
        + OOM_TAIL
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "weights_oom"


def test_worker_rpc_exception_is_no_serving_sign(run_classify: Classify) -> None:
    log = (
        "(Worker_TP0 pid=99) ERROR 04-09 20:31:10 [multiproc_executor.py:949] WorkerProc hit an exception.\n"
        "(Worker_TP0 pid=99) ERROR 04-09 20:31:10 [multiproc_executor.py:949] torch.OutOfMemoryError: "
        + OOM_TAIL
    )
    assert run_classify(log).phase == "warmup_oom"


POOLED_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 140.75 MiB is free. Of the allocated memory 68.83 GiB is allocated by PyTorch, with "
    "42.00 MiB allocated in private pools (e.g., CUDA Graphs), and 331.08 MiB is reserved by PyTorch but "
    "unallocated."
)


def test_memory_in_cuda_graph_pools_means_graphs_were_captured(run_classify: Classify) -> None:
    diagnosis = run_classify(POOLED_OOM)
    assert diagnosis.phase == "runtime_oom"
    assert diagnosis.confidence < 0.6


def test_dummy_inputs_in_the_traceback_mean_a_warm_up_run(run_classify: Classify) -> None:
    log = "    sampling_metadata=dummy_metadata)\n    logits = logits.to(torch.float32)\n" + POOLED_OOM
    assert run_classify(log).phase == "warmup_oom"
