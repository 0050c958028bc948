"""A bare out-of-memory error is placed by the furthest stage the run shows, wherever the paste puts
it: frames of graph capture printed below a person's "OOM", the engine's dump after a failed model
execution, a later process's capture line. A command or the person's "when starting it" says only
that the run started, and takes the stage the log shows. Lines from vLLM's own sources (file, line
and function of the release named), not copied from a collected case."""

from __future__ import annotations

from collections.abc import Callable

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

SITE = "/usr/local/lib/python3.10/dist-packages"
OOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB."

# vLLM 0.2.7 under Ray: RayWorkerVllm.execute_method (engine/ray_utils.py:30) -> Worker.warm_up_model
# (worker/worker.py:125, `self.model_runner.capture_model(self.gpu_cache)`), entering torch's
# `@torch.inference_mode()` wrapper; the paste stops there
CAPTURE_0_2_7 = [
    "ERROR worker.py:405 -- Unhandled error: ray::RayWorkerVllm.execute_method() (pid=10548, ip=172.17.0.2)",
    f'  File "{SITE}/vllm/engine/ray_utils.py", line 30, in execute_method',
    "    return executor(*args, **kwargs)",
    f'  File "{SITE}/vllm/worker/worker.py", line 125, in warm_up_model',
    "    self.model_runner.capture_model(self.gpu_cache)",
    f'  File "{SITE}/torch/utils/_contextlib.py", line 115, in decorate_context',
]


def test_capture_frames_below_a_persons_oom_place_it_in_warm_up(run_classify: Classify) -> None:
    words = ["Llama-2-70B-AWQ with tensor_parallel_size=8 OOMs", ""]
    log = "\n".join(
        [*words, 'llm = LLM(model="TheBloke/Llama-2-70B-AWQ", tensor_parallel_size=8)', "", *CAPTURE_0_2_7]
    )
    assert run_classify(log).phase == "warmup_oom"


def test_a_prefix_the_document_keeps_does_not_hide_a_frames_code_line(run_classify: Classify) -> None:
    # a serving container's stderr prefix on every line, the frame's and its code line's alike
    prefix = "WARN  PyProcess W-252-model-stderr: "
    log = "\n".join(
        ["The model OOMs with tensor_parallel_size=8", "", *(prefix + line for line in CAPTURE_0_2_7)]
    )
    assert run_classify(log).phase == "warmup_oom"


def test_the_engines_dump_after_a_failed_step_places_an_oom_in_serving(run_classify: Classify) -> None:
    # v1/engine/core.py execute_model_with_error_logging -> logging_utils/dump_input.py (0.9+)
    engine = "(EngineCore_DP0 pid=2647451) ERROR 05-20 10:42:56 [dump_input.py:81] "
    log = "\n".join(
        [
            "GPU OOM with data parallel and expert parallel",
            "",
            f'  File "{SITE}/vllm/model_executor/models/deepseek_v2.py", line 1067, in forward',
            "    return self.mla_attn(positions, hidden_states)",
            f"{engine}Dumping scheduler stats: SchedulerStats(num_running_reqs=809, num_waiting_reqs=0)",
        ]
    )
    assert run_classify(log).phase == "runtime_oom"


def test_start_up_words_take_the_stage_a_later_process_line_shows(run_classify: Classify) -> None:
    capture = (
        "(RayWorkerVllm pid=74362) INFO 12-18 21:44:36 model_runner.py:501] Capturing the model for CUDA "
        "graphs. This may lead to unexpected consequences if the model is not static."
    )
    said = "在8块4090上部署Qwen-72B-Chat，报错："
    assert run_classify(f"{said}\nRuntimeError: CUDA error: out of memory\n{capture}").phase == "warmup_oom"
    # without a log line to say how far it got, start-up words keep loading's phase
    assert run_classify(f"{said}\nRuntimeError: CUDA error: out of memory").phase == "weights_oom"
