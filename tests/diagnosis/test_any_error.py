"""Any error in any format is seen, a non-memory error is named, and a vLLM message cut or retold
without its head is still known from its template."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis

REPO = Path(__file__).resolve().parents[2]


def _diagnose(packs: RulePacks, log: str) -> Diagnosis:
    return classify(DiagnoseRequest(log=log), packs)


FRAMES = (
    'File "/opt/venv/lib/python3.10/site-packages/vllm/distributed/parallel_state.py", '
    "line 228, in __init__\n"
    "    self.pynccl_comm = PyNcclCommunicator(\n"
)


@pytest.mark.parametrize(
    ("log", "named"),
    [
        pytest.param(
            "Traceback (most recent call last): "
            + FRAMES.replace("\n", " ")
            + "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "RuntimeError: NCCL error: unhandled system error",
            id="traceback-squashed-onto-one-line",
        ),
        pytest.param(
            "> Traceback (most recent call last):\n> "
            + FRAMES.replace("\n", "\n> ")
            + "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970",
            "torch.distributed.DistBackendError: NCCL error in",
            id="quoted-traceback",
        ),
        pytest.param(
            "---------------------------------------------------------------------------\n"
            "LocalEntryNotFoundError                   Traceback (most recent call last)\n"
            "Cell In[3], line 1\n----> 1 llm = LLM(model='meta-llama/Llama-3.1-8B-Instruct')\n"
            "File ~/envs/x/lib/python3.11/site-packages/vllm/engine/arg_utils.py:98, "
            "in EngineArgs.create(self)\n",
            "LocalEntryNotFoundError",
            id="ipython-cell",
        ),
        pytest.param(
            '{"object":"error","message":"The model `llama3` does not exist.",'
            '"type":"NotFoundError","param":null,"code":404}',
            "NotFoundError: The model `llama3` does not exist.",
            id="openai-json-error-body",
        ),
        pytest.param(
            "2025-03-01 10:00:00,123 - distilabel - ERROR - the step failed to connect to the server",
            "the step failed to connect to the server",
            id="python-logging-error-line",
        ),
        pytest.param(
            "NCCL error：unhandled system error",
            "NCCL error：unhandled system error",
            id="subsystem-error-with-full-width-colon",
        ),
    ],
)
def test_an_error_in_any_format_is_not_memory_and_named(packs: RulePacks, log: str, named: str) -> None:
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == "not_memory"
    assert named in diagnosis.title


def test_a_traceback_cut_before_its_exception_line_is_still_an_error(packs: RulePacks) -> None:
    log = "".join(
        f"(VllmWorkerProcess pid=9) ERROR 11-25 08:17:34 multiproc_worker_utils.py:229] {line}\n"
        for line in ("Traceback (most recent call last):", *FRAMES.splitlines())
    )
    assert _diagnose(packs, log).phase == "not_memory"


def test_ipython_frames_are_read_like_python_frames(packs: RulePacks) -> None:
    log = (
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "File ~/envs/x/lib/python3.11/site-packages/vllm/worker/model_runner.py:1022, "
        "in GPUModelRunnerBase.load_model(self)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. "
        "GPU 0 has a total capacity of 23.68 GiB of which 98.12 MiB is free.\n"
    )
    assert _diagnose(packs, log).phase == "weights_oom"


@pytest.mark.parametrize(
    ("line", "phase", "facts"),
    [
        pytest.param(
            "maximum context length is 8192 tokens. However, your prompt contains 9000 input tokens",
            "request_too_long",
            {"context_limit": 8192, "requested_tokens": 9000},
            id="opening-words-missing",
        ),
        pytest.param(
            "we keep getting the error no available memory for the cache blocks when it starts",
            "kv_cache_capacity",
            {},
            id="lower-cased-inside-a-sentence",
        ),
        pytest.param(
            "Quantization scheme is not supported",
            "quantization_config",
            {},
            id="cut-after-the-first-segment",
        ),
        pytest.param(
            "报错：No available memory for the cache blocks。Try increasing `gpu_memory_utilization`",
            "kv_cache_capacity",
            {},
            id="full-width-punctuation",
        ),
    ],
)
def test_a_message_cut_or_retold_is_known_from_its_template(
    packs: RulePacks, line: str, phase: str, facts: dict[str, object]
) -> None:
    diagnosis = _diagnose(packs, line)
    assert diagnosis.phase == phase
    for name, value in facts.items():
        assert getattr(diagnosis.facts, name) == value


@pytest.mark.parametrize(
    ("log", "phase", "facts"),
    [
        pytest.param(
            "It refuses to start:\n\n  ValueError: Free memory on device cuda:1 (3.5/39.39 GiB) is less\n"
            "  than desired GPU memory utilization (0.9, 35.45 GiB)\n",
            "startup_budget",
            {"free_gib": 3.5, "total_gib": 39.39},
            id="retold-without-on-startup-wrapped-indented",
        ),
        pytest.param(
            "RuntimeError: free memory on device xpu:1 (1.25/15.11 GiB) is less than\n"
            "desired GPU memory utilization, decrease it\n",
            "startup_budget",
            {"free_gib": 1.25, "total_gib": 15.11},
            id="lower-cased-wrapped-between-two-words-of-a-seed",
        ),
        pytest.param(
            "the engine says the model's max seq len (32768) is larger than the maximum number\n"
            "of tokens that can be stored in KV cache (12000), what can I do",
            "kv_cache_capacity",
            {"max_model_len": 32768, "kv_cache_tokens": 12000},
            id="kv-check-retold-and-wrapped",
        ),
    ],
)
def test_a_message_wrapped_across_lines_is_known_from_its_template(
    packs: RulePacks, log: str, phase: str, facts: dict[str, object]
) -> None:
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == phase
    for name, value in facts.items():
        assert getattr(diagnosis.facts, name) == value


def test_more_of_the_template_seen_gives_more_confidence(packs: RulePacks) -> None:
    short = _diagnose(packs, "no available memory for the cache blocks")
    longer = _diagnose(
        packs, "no available memory for the cache blocks. try increasing gpu_memory_utilization when"
    )
    assert short.phase == longer.phase == "kv_cache_capacity"
    assert short.confidence < longer.confidence


def test_a_hypothetical_retelling_is_no_failure(packs: RulePacks) -> None:
    log = "If you get an error about no available memory for the cache blocks, raise gpu_memory_utilization."
    assert _diagnose(packs, log).phase == "no_failure"


def test_the_fragment_table_is_what_the_inventories_build() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    from template_fragments import main

    assert main(["--check"]) == 0


def test_an_oom_above_request_handling_frames_is_a_serving_oom(packs: RulePacks) -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        '  File "/usr/lib/python3/dist-packages/vllm/engine/async_llm_engine.py", line 772, in generate\n'
        "    async for output in self._process_request(\n"
        '  File "/py/uvicorn/protocols/http/httptools_impl.py", line 399, in run_asgi\n'
        "    result = await app(\n"
    )
    assert _diagnose(packs, log).phase == "runtime_oom"


def test_frames_a_paste_ends_with_place_it_without_a_traceback_header(packs: RulePacks) -> None:
    log = (
        "the worker does not start:\n"
        '  File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 71, in init_model\n'
        "    _check_if_gpu_supports_dtype(self.model_config.dtype)\n"
        '  File "/py/vllm/worker/worker.py", line 231, in _check_if_gpu_supports_dtype\n'
        "    raise Val"
    )
    assert _diagnose(packs, log).phase == "dtype_unsupported"


def test_a_tpu_allocation_failure_is_an_out_of_memory(packs: RulePacks) -> None:
    log = (
        "RESOURCE_EXHAUSTED: Error loading program 'jit_step': Attempting to reserve 6.14G at the bottom "
        "of memory. That was not possible. There are 5.10G free, 0B reserved, and 5.10G reservable."
    )
    assert _diagnose(packs, log).phase in ("weights_oom", "warmup_oom", "runtime_oom")


LOADING = (
    "INFO 08-20 14:01:20 [default_loader.py:262] Loading weights took 1.73 seconds\n"
    "INFO 08-20 14:01:21 [gpu_model_runner.py:2007] Model loading took 15.6269 GiB and 1.822261 seconds\n"
)


@pytest.mark.parametrize(
    ("native", "named"),
    [
        pytest.param(
            "CUDA error (/src/flash_fwd_launch_template.h:188): invalid argument",
            "invalid argument",
            id="kernel-check",
        ),
        pytest.param(
            "terminate called after throwing an instance of 'c10::Error'", "c10::Error", id="cpp-abort"
        ),
        pytest.param("Fatal Python error: Segmentation fault", "Segmentation fault", id="cpython-fatal"),
        pytest.param("double free or corruption (!prev)", "double free", id="glibc-heap"),
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "Xid", id="gpu-lost"
        ),
        pytest.param(
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "ncclUnhandledCudaError",
            id="nccl-result",
        ),
        pytest.param(
            "RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
            "DEVICE_LOST",
            id="level-zero",
        ),
    ],
)
def test_a_native_error_line_after_log_lines_is_not_memory_and_named(
    packs: RulePacks, native: str, named: str
) -> None:
    diagnosis = _diagnose(packs, LOADING + native + "\n")
    assert diagnosis.phase == "not_memory"
    assert named in diagnosis.title


@pytest.mark.parametrize(
    "native",
    [
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "terminate called after throwing an instance of 'c10::OutOfMemoryError'\n"
        "  what():  CUDA error: out of memory",
    ],
)
def test_a_native_allocation_failure_stays_an_out_of_memory(packs: RulePacks, native: str) -> None:
    assert _diagnose(packs, LOADING + native + "\n").phase.endswith("_oom")


def test_an_issue_title_naming_an_error_is_not_memory_but_less_sure_than_a_log_line(packs: RulePacks) -> None:
    titled = _diagnose(packs, "[Bug]: vLLM 0.9.1 CUDA error: an illegal memory access\n\n" + LOADING)
    logged = _diagnose(
        packs, LOADING + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    assert titled.phase == logged.phase == "not_memory"
    assert "[Bug]" not in titled.title
    assert titled.confidence < logged.confidence


def test_a_log_line_error_is_named_before_the_title_error_above_it(packs: RulePacks) -> None:
    log = (
        "[Bug]: the server crashes with a CUDA error: unknown error\n\n"
        + LOADING
        + ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    )
    assert "no kernel image" in _diagnose(packs, log).title


def test_a_sentence_saying_the_error_is_gone_names_none(packs: RulePacks) -> None:
    log = LOADING + 'After the upgrade it no longer fails with "illegal memory access" error, thanks\n'
    assert _diagnose(packs, log).phase == "no_failure"


def test_an_openai_error_body_with_a_negative_default_max_tokens_is_a_request_too_long(
    packs: RulePacks,
) -> None:
    log = (
        "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': "
        "'max_tokens must be at least 1, got -344.', 'type': 'BadRequestError', 'param': None, 'code': 400}"
    )
    assert _diagnose(packs, log).phase == "request_too_long"


def test_an_openai_error_body_stating_the_context_limit_gives_its_numbers(packs: RulePacks) -> None:
    log = (
        '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you '
        "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length "
        'of the messages or completion.","type":"BadRequestError","param":null,"code":400}'
    )
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == "request_too_long"
    assert (diagnosis.facts.context_limit, diagnosis.facts.requested_tokens) == (4096, 5000)


def test_a_traceback_cut_inside_one_phases_function_outweighs_a_few_words_of_another_message(
    packs: RulePacks,
) -> None:
    log = (
        "[Usage]: Workaround to run model on GPUs with Compute Capability < 8.0?\n\n"
        "Traceback (most recent call last):\n"
        '  File "/py/vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py", '
        "line 117, in get_quant_method\n"
        "    quant_scheme = self.get_scheme(layer=layer, layer_name=prefix)\n"
        '  File "/py/vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py", '
        "line 480, in _check_scheme_supported\n"
        "    raise RuntimeError(\n"
    )
    assert _diagnose(packs, log).phase == "quantization_config"


def test_a_sentence_sharing_some_words_with_a_message_does_not_outweigh_an_error(packs: RulePacks) -> None:
    # the person's account of what they tried uses words of the no-cache-blocks advice; the error
    # the title names is what failed
    log = (
        "[Bug]: CUDA error: an illegal memory access was encountered in my example\n\n"
        "I tried increasing gpu_memory_utilization when initializing the engine as the docs say\n"
    )
    assert _diagnose(packs, log).phase == "not_memory"


def test_torchs_nccl_watchdog_timeout_is_not_memory_whatever_the_sentence_around_it(packs: RulePacks) -> None:
    # c10d's glog-style lines under a Ray worker's prefix; the sentence only says where it does not happen
    prefix = "(WorkerDict pid=231421) [rank1]:[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] "
    log = "\n".join(
        [
            "It doesn't happen if I run it on my local server.",
            prefix + "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600009 milliseconds "
            "before timing out.",
            prefix + "[Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous "
            "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ]
    )
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == "not_memory"
    assert any(e.rule == "native-nccl-watchdog-timeout" for e in diagnosis.evidence)
