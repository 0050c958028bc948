"""Allocation failures in the words of the code that raised them, not in PyTorch's usual OOM sentence:
vLLM 0.11.0's own `RuntimeError` from `UnquantizedLinearMethod.create_weights` (a release the
inventory's one-patch-per-minor cache does not hold: 0.11.1 dropped the try/except), PyTorch's
caching allocator failing an NVML assert inside `reportProcessMemoryInfo` (called only while it
builds its OOM message, after `cudaMalloc` failed), a quoted message introduced by a label
("Error message: `…`"), and the allocator's and vLLM's figure lines cut or retyped short.
Each is placed by its frames and neighbours like any OOM; its twins (another exception, a message
said to be gone, a sentence that only improves a message) must not flip."""

from __future__ import annotations

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest

V1 = "(EngineCore_DP0 pid=4121) "
V1_SITE = "/usr/local/lib/python3.12/dist-packages/vllm"
V0_SITE = "/opt/conda/lib/python3.10/site-packages/vllm"


def _at(site: str, path: str, line: int, function: str) -> str:
    return f'File "{site}/{path}", line {line}, in {function}'


LINEAR_RAISE = (
    "RuntimeError: Failed to create unquantized linear weights. "
    "This may be caused by insufficient memory to allocate the weight."
)
LOAD_FRAMES = [
    _at(V1_SITE, "v1/worker/gpu_model_runner.py", 2602, "load_model"),
    "    self.model = model_loader.load_model(",
    _at(V1_SITE, "model_executor/model_loader/base_loader.py", 45, "load_model"),
    "    model = initialize_model(",
    _at(V1_SITE, "model_executor/layers/linear.py", 1302, "__init__"),
    "    self.quant_method.create_weights(",
    _at(V1_SITE, "model_executor/layers/linear.py", 203, "create_weights"),
    "    torch.empty(",
]
PROFILE_FRAMES_V0 = [
    _at(V0_SITE, "worker/worker.py", 229, "determine_num_available_blocks"),
    "    self.model_runner.profile_run()",
    _at(V0_SITE, "worker/model_runner.py", 1318, "profile_run"),
    "    self.execute_model(model_input, kv_caches, intermediate_tensors)",
    _at(V0_SITE, "model_executor/layers/activation.py", 84, "forward_cuda"),
    "    out = torch.empty(output_shape, dtype=x.dtype, device=x.device)",
]
NVML_R = (
    "RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "
    '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1131, please report a bug to '
    "PyTorch. "
)
NVML_HANDLE = (
    "RuntimeError: NVML_SUCCESS == "
    "DriverAPI::get()->nvmlDeviceGetHandleByPciBusId_v2_( pci_id, &nvml_device) "
    'INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":838, '
    "please report a bug to PyTorch. "
)
NVML_INIT = (
    "RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at "
    '"/opt/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp":1204, please report a bug to PyTorch. '
)
STARTUP_CHECK = (
    "Free memory on device (5.21/23.55 GiB) on startup is less than desired GPU memory utilization "
    "(0.9, 21.19 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)


def _traceback(frames: list[str], error: str, prefix: str = "") -> str:
    lines = ["Traceback (most recent call last):", *(f"  {f}" for f in frames), error]
    return "\n".join(prefix + line for line in lines)


PHASES = {
    # vLLM 0.11.0's own words for a layer that could not allocate its weights
    "linear-raise-v1-log": "\n".join(
        [
            V1
            + (
                "INFO 10-14 09:12:01 [gpu_model_runner.py:2598] Starting to load model "
                "Qwen/Qwen2.5-32B-Instruct..."
            ),
            V1 + "ERROR 10-14 09:12:09 [core.py:708] EngineCore failed to start.",
            _traceback(LOAD_FRAMES, LINEAR_RAISE, V1 + "ERROR 10-14 09:12:09 [core.py:708] "),
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
    ),
    "linear-raise-chinese-issue": "部署微调后的 Qwen2.5-14B 到一张 4090 上，vllm 0.11.0 启动时报错：\n"
    + LINEAR_RAISE
    + "\n请问是显卡不够吗？",
    "linear-raise-wrapped-in-a-fence": "Tried `vllm serve ./merged --dtype bfloat16` "
    "on our L4 box and got\n\n```\n"
    "RuntimeError: Failed to create unquantized linear weights.\n"
    "This may be caused by insufficient memory to allocate the weight.\n```\n",
    # PyTorch's allocator failing an NVML assert while it builds its OOM message
    "nvml-assert-under-create-weights": _traceback(
        LOAD_FRAMES, NVML_R, V1 + "ERROR 03-02 11:40:55 [core.py:700] "
    ),
    "nvml-assert-in-the-profile-run": "\n".join(
        [
            "INFO 06-11 08:01:44 model_runner.py:1099] Loading model weights took 14.2466 GB",
            _traceback(PROFILE_FRAMES_V0, NVML_HANDLE),
        ]
    ),
    "nvml-assert-while-serving": "\n".join(
        [
            "INFO:     Application startup complete.",
            'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            _traceback(
                [
                    _at(V1_SITE, "v1/engine/core.py", 254, "step"),
                    "    model_output = self.execute_model(scheduler_output)",
                    _at(V1_SITE, "v1/worker/gpu_model_runner.py", 1421, "execute_model"),
                    "    hidden_states = self.model(",
                ],
                NVML_INIT,
                "ERROR 07-09 13:22:10 [core.py:343] ",
            ),
        ]
    ),
    # a message introduced by a label is the message shown, not only named
    "label-quotes-the-startup-check": "## Known errors\n\n### OOM while "
    "serving\n\nLower `--max-model-len`.\n\n"
    f"### Startup\n\nError message: `ValueError: {STARTUP_CHECK}`\n\nFix: `--gpu-memory-utilization 0.2`.\n",
    "label-quotes-the-kv-check": "We run Llama-3.1-8B on a 24 GB card.\n"
    "The full error message: \"ValueError: The model's max seq len (131072) is "
    "larger than the maximum number "
    "of tokens that can be stored in KV cache (43040). Try increasing `gpu_memory_utilization` or decreasing "
    '`max_model_len` when initializing the engine."\n',
    "label-in-bold-quotes-the-startup-check": f"**Error message:** `{STARTUP_CHECK}`\n\n"
    "The server never started.",
}

TWINS = {  # (paste, the phase it must not be read as)
    # another assert of PyTorch's, not the allocator's OOM path
    "other-internal-assert": (
        _traceback(
            LOAD_FRAMES,
            (
                "RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
                '"../aten/src/ATen/cuda/CUDAContext.cpp":50, please report a bug to PyTorch.'
            ),
        ),
        "weights_oom",
    ),
    # a failure to create something else
    "weights-cache-not-created": (
        "ERROR 02-01 10:00:00 [loader.py:88] Failed to create model weights cache: Permission denied\n"
        "PermissionError: [Errno 13] Permission denied: '/models/.cache'",
        "weights_oom",
    ),
    # the message said to be gone
    "linear-raise-no-longer-appears": (
        f"Since upgrading to 0.11.1 the `{LINEAR_RAISE}` error no longer appears and the server starts fine.",
        "weights_oom",
    ),
    "label-quote-no-longer-shows": (
        f"Error message: `{STARTUP_CHECK}` no longer shows up after I stopped the other container.",
        "startup_budget",
    ),
    # a sentence improving a message only names it
    "pr-improves-the-message": (
        f"This PR improves the error message: `{STARTUP_CHECK}` now also names the other processes.",
        "startup_budget",
    ),
}

FACTS = {
    # PyTorch's own-process sentence without its lead-in words (retyped, or a line cut before it)
    "process-has-without-pid": (
        "ERROR: Failed to load model - not enough GPU memory.\n"
        "GPU 0 has a total capacity of 22.03 GiB of which 17.06 MiB is free.\n"
        "Process has 22.01 GiB memory in use.\n",
        "process_in_use_gib",
        22.01,
    ),
    "this-process-wrapped-to-its-own-line": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 "
        "has a total capacity of\n"
        "79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this\n"
        "process has 78.16 GiB memory in use.\n",
        "process_in_use_gib",
        78.16,
    ),
    "process-has-lower-case-cut": (
        "RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 3 has a "
        "total capacity of 39.39 GiB of which 8.38 MiB is free. Including non-PyTorch "
        "memory, this\n"
        "process has 39.37 GiB memory in use.",
        "process_in_use_gib",
        39.37,
    ),
    # vLLM's weights line cut after its size
    "model-loading-took-cut-in-a-fence": (
        "**Error:**\n```\nModel loading took 13.5958 GiB\nAvailable KV cache memory: -3.44 GiB\n"
        "ValueError: No available memory for the cache blocks\n```\n",
        "model_weights_gib",
        13.5958,
    ),
    "model-loading-took-cut-log-line": (
        "INFO 05-02 10:11:12 [gpu_model_runner.py:1595] Model loading took 7.1 GiB\n"
        "ERROR 05-02 10:11:30 [core.py:396] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 1.00 GiB.",
        "model_weights_gib",
        7.1,
    ),
    "model-loading-took-whole": (
        "INFO 05-02 10:11:12 [gpu_model_runner.py:1595] Model loading took 7.1 GiB and 3.2 seconds\n",
        "model_weights_gib",
        7.1,
    ),
}

FACT_TWINS = {
    "process-with-pid-is-another": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 "
        "has a total capacity of 23.55 GiB of which 5.81 MiB is free. Process 5121 has "
        "9.40 GiB memory in use. Including non-PyTorch memory, this process has 14.12 GiB "
        "memory in use.",
        "process_in_use_gib",
        14.12,
    ),
    "the-process-in-a-sentence": (
        "The process has 20 GiB memory in use according to nvidia-smi, and then it fails with "
        "torch.OutOfMemoryError: CUDA out of memory.",
        "process_in_use_gib",
        None,
    ),
    "model-loading-took-seconds": (
        "INFO 05-02 10:11:12 [gpu_model_runner.py:1595] Model loading took 30 seconds\n",
        "model_weights_gib",
        None,
    ),
}


EXPECTED = {
    "linear": "weights_oom",
    "nvml-assert-under": "weights_oom",
    "nvml-assert-in-the": "warmup_oom",
    "nvml-assert-while": "runtime_oom",
    "label-quotes-the-startup": "startup_budget",
    "label-quotes-the-kv": "kv_cache_capacity",
    "label-in-bold": "startup_budget",
}


@pytest.mark.parametrize(("name", "log"), PHASES.items(), ids=PHASES.keys())
def test_an_allocation_failure_in_its_own_words_is_memory(packs: RulePacks, name: str, log: str) -> None:
    phase = next(p for prefix, p in EXPECTED.items() if name.startswith(prefix))
    assert classify(DiagnoseRequest(log=log), packs).phase == phase


@pytest.mark.parametrize(("log", "phase"), TWINS.values(), ids=TWINS.keys())
def test_a_twin_is_not_read_as_the_memory_failure(packs: RulePacks, log: str, phase: str) -> None:
    assert classify(DiagnoseRequest(log=log), packs).phase != phase


@pytest.mark.parametrize(
    ("log", "fact", "value"), [*FACTS.values(), *FACT_TWINS.values()], ids=[*FACTS, *FACT_TWINS]
)
def test_a_figure_line_cut_or_retyped_short_still_states_its_figure(
    packs: RulePacks, log: str, fact: str, value: float | None
) -> None:
    assert getattr(classify(DiagnoseRequest(log=log), packs).facts, fact) == value
