"""An out-of-memory error while vLLM allocates the KV cache it has just sized is kv_cache_capacity
(DESIGN §3.1: "no memory for cache blocks"), not a warm-up OOM, and its fixes never give the cache
more of the GPU. Tracebacks are written from vLLM's own sources, each frame with the file, line and
function of the release named, not copied from a collected case."""

from __future__ import annotations

from collections.abc import Callable

from service.core import diagnose
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis

Classify = Callable[..., Diagnosis]

SITE = "/usr/local/lib/python3.12/dist-packages"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 418.00 MiB. GPU 0 has a total capacity "
    "of 23.69 GiB of which 193.25 MiB is free. Process 2167142 has 14.90 GiB memory in use. Process 1348 "
    "has 3.70 GiB memory in use. Of the allocated memory 14.2 GiB is allocated by PyTorch, and 20.00 MiB "
    "is reserved by PyTorch but unallocated."
)


def _frame(path: str, line: int, function: str, code: str) -> list[str]:
    return [f'  File "{SITE}/{path}", line {line}, in {function}', f"    {code}"]


# vLLM 0.6.6.post1: LLMEngine._initialize_kv_caches (engine/llm_engine.py:429) -> Worker.initialize_cache
# (worker/worker.py:274) -> _init_cache_engine (:280) -> CacheEngine.__init__ (cache_engine.py:62) ->
# _allocate_kv_cache (:81, torch.zeros of one layer's blocks)
V0_ALLOCATION = [
    "Traceback (most recent call last):",
    *_frame(
        "vllm/engine/llm_engine.py",
        429,
        "_initialize_kv_caches",
        "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)",
    ),
    *_frame("vllm/worker/worker.py", 274, "initialize_cache", "self._init_cache_engine()"),
    *_frame(
        "vllm/worker/worker.py",
        280,
        "_init_cache_engine",
        "CacheEngine(self.cache_config, self.model_config,",
    ),
    *_frame("vllm/worker/cache_engine.py", 62, "__init__", "self.gpu_cache = self._allocate_kv_cache("),
    *_frame("vllm/worker/cache_engine.py", 81, "_allocate_kv_cache", "torch.zeros(kv_cache_shape,"),
    OOM,
]

# vLLM 0.10.2, a V1 tensor-parallel worker: worker_busy_loop (v1/executor/multiproc_executor.py:649)
# -> Worker.initialize_from_config (v1/worker/gpu_worker.py:318) -> GPUModelRunner.initialize_kv_cache
# (gpu_model_runner.py:3578) -> initialize_kv_cache_tensors (:3519) -> _allocate_kv_cache_tensors (:3367)
V1_WORKER = "(Worker_TP1 pid=967) ERROR 12-16 02:10:29 [multiproc_executor.py:654] "
V1_ALLOCATION = [
    f"{V1_WORKER}{line}"
    for line in [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        *_frame(
            "vllm/v1/executor/multiproc_executor.py",
            649,
            "worker_busy_loop",
            "output = func(*args, **kwargs)",
        ),
        *_frame(
            "vllm/v1/worker/gpu_worker.py",
            318,
            "initialize_from_config",
            "self.model_runner.initialize_kv_cache(kv_cache_config)",
        ),
        *_frame(
            "vllm/v1/worker/gpu_model_runner.py",
            3578,
            "initialize_kv_cache",
            "kv_caches = self.initialize_kv_cache_tensors(kv_cache_config)",
        ),
        *_frame(
            "vllm/v1/worker/gpu_model_runner.py",
            3519,
            "initialize_kv_cache_tensors",
            "kv_cache_raw_tensors = self._allocate_kv_cache_tensors(kv_cache_config)",
        ),
        *_frame(
            "vllm/v1/worker/gpu_model_runner.py",
            3367,
            "_allocate_kv_cache_tensors",
            "tensor = torch.zeros(kv_cache_tensor.size,",
        ),
        OOM,
    ]
]


def test_an_oom_in_v0s_cache_engine_allocation_is_kv_cache_capacity(run_classify: Classify) -> None:
    diagnosis = run_classify("\n".join(V0_ALLOCATION))
    assert diagnosis.phase == "kv_cache_capacity"
    assert "_allocate_kv_cache" in diagnosis.summary


def test_an_oom_in_a_v1_workers_kv_tensor_allocation_is_kv_cache_capacity(run_classify: Classify) -> None:
    assert run_classify("\n".join(V1_ALLOCATION)).phase == "kv_cache_capacity"


def test_a_platform_plugins_copy_of_the_allocation_is_read_as_vllms(run_classify: Classify) -> None:
    # vllm-ascend's worker_v1.py / model_runner_v1.py subclass vLLM's gpu_worker / gpu_model_runner
    # and keep their methods: the same RPC into the same allocation, in the plugin's own modules
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/worker_v1.py", line 336, in '
            "initialize_from_config",
            "    self.model_runner.initialize_kv_cache(kv_cache_config)",
            '  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", line 2709, in '
            "initialize_kv_cache",
            "    kv_caches = self.initialize_kv_cache_tensors(kv_cache_config)",
            "RuntimeError: NPU out of memory. Tried to allocate 1.02 GiB (NPU 3; 60.96 GiB total capacity; "
            "58.10 GiB already allocated; 0.50 GiB free; 59.00 GiB reserved in total by PyTorch)",
        ]
    )
    assert run_classify(log).phase == "kv_cache_capacity"


def test_an_oom_after_the_engine_sized_the_cache_is_its_allocation(run_classify: Classify) -> None:
    # V0's executor logs the block counts (gpu_executor.py "# GPU blocks: %d, # CPU blocks: %d"), V1's
    # engine the size in tokens (kv_cache_utils.py "GPU KV cache size: %s tokens"), right before
    # the cache is allocated
    for sized in (
        "INFO 02-03 03:43:48 gpu_executor.py:76] # GPU blocks: 7754, # CPU blocks: 2048",
        "INFO 12-16 02:10:29 [kv_cache_utils.py:1286] GPU KV cache size: 282,240 tokens",
    ):
        assert run_classify(f"{sized}\n{OOM}").phase == "kv_cache_capacity", sized


def test_graph_capture_after_the_cache_was_allocated_is_still_warm_up(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "INFO 02-03 03:43:48 gpu_executor.py:76] # GPU blocks: 7754, # CPU blocks: 2048",
            "INFO 02-03 03:43:49 model_runner.py:1372] Capturing cudagraphs for decoding. This may lead to "
            "unexpected consequences if the model is not static.",
            OOM,
        ]
    )
    assert run_classify(log).phase == "warmup_oom"
    # V0's Worker._warm_up_model (worker.py:291) -> ModelRunner.capture_model, under initialize_cache
    frames = [
        "Traceback (most recent call last):",
        *_frame("vllm/worker/worker.py", 275, "initialize_cache", "self._warm_up_model()"),
        *_frame(
            "vllm/worker/worker.py", 291, "_warm_up_model", "self.model_runner.capture_model(self.gpu_cache)"
        ),
        OOM,
    ]
    assert run_classify("\n".join(frames)).phase == "warmup_oom"


def test_the_engines_start_up_sequence_cut_short_is_placed_by_its_log(run_classify: Classify) -> None:
    # V0 `_initialize_kv_caches` profiles, then allocates: cut inside it after the profile run began,
    # the profile is where it failed
    log = "\n".join(
        [
            "CUDA out of memory while starting the engine",
            "",
            "INFO 03-07 10:42:35 model_runner.py:1115] Loading model weights took 0.4855 GB",
            "INFO 03-07 10:42:36 enc_dec_model_runner.py:280] Starting profile run for multi-modal models.",
            "Traceback (most recent call last):",
            *_frame("vllm/engine/llm_engine.py", 276, "__init__", "self._initialize_kv_caches()"),
            f'  File "{SITE}/vllm/engine/llm_engine.py", line 416, in _initialize_kv_caches',
        ]
    )
    assert run_classify(log).phase == "warmup_oom"


def test_an_allocation_oom_never_raises_utilization_and_lowers_it_by_what_was_lacking(
    packs: RulePacks,
) -> None:
    diagnosis = diagnose(DiagnoseRequest(log="\n".join(V0_ALLOCATION), vllm_version="0.6.6"), packs)
    ids = [f.id for f in diagnosis.fixes]
    assert "raise-gpu-memory-utilization" not in ids
    assert ids[0] == "stop-processes-that-took-kv-memory"
    # the 14.90 GiB process is vLLM itself (14.2 GiB allocated by PyTorch): the other one took the memory
    assert "PID 1348 (3.70 GiB)" in diagnosis.fixes[0].change
    assert "2167142" not in diagnosis.fixes[0].change
    lowered = next(f for f in diagnosis.fixes if f.id == "lower-gpu-memory-utilization-for-kv-allocation")
    # 418 MiB asked, 193.25 MiB free: at least 0.22 GiB short, plus a 0.5 GiB margin, below the
    # default 0.9 of a 23.69 GiB card
    assert lowered.change == "--gpu-memory-utilization 0.86"
