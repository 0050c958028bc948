"""A traceback is placed by vLLM's call graph in whatever dialect it was printed.

Probes written from the general forms, not from collected pastes: CPython's own traceback (3.10, and
3.11+ with `^^^^`/`~~~~` markers; chained by "The above exception…" / "During handling…"; exception
groups' `| ` margins), Ray's actor prefixes and `RayTaskError` bodies, V1's `(EngineCore_DP0 pid=…)`,
rich's boxed traceback, loguru's `> File` with `└` annotations, faulthandler's and py-spy's dumps
(innermost call first), pytest's `path.py:123: in func`, IPython 7 and 8, C++ frames after the
exception, and container, Kubernetes, journald and timestamp prefixes before every line. Every stack
uses real vLLM functions of the release it names (rules/frames/vllm.json); the tail is a bare
out-of-memory error, or none (a paste cut inside the stage), so only the frames decide the phase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from service.diagnosis import classify_text
from service.diagnosis.normalize import Document, clean_text
from service.packs import RulePacks

SITE = "/usr/local/lib/python3.10/dist-packages"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has "
    "78.13 GiB memory in use. Of the allocated memory 76.90 GiB is allocated by PyTorch, and 520.11 "
    "MiB is reserved by PyTorch but unallocated."
)
OLD_OOM = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB (GPU 0; 14.75 GiB "
    "total capacity; 12.86 GiB already allocated; 1.04 GiB free; 13.54 GiB reserved in total by PyTorch)"
)


@dataclass(frozen=True)
class Frame:
    path: str  # inside site-packages: vllm/… or torch/…
    owner: str | None  # the class, for the dialects that print qualified names
    function: str
    code: str
    line: int


def _f(path: str, owner: str | None, function: str, code: str, line: int = 0) -> Frame:
    return Frame(path, owner, function, code, line or 100 + 7 * len(code) % 900)


@dataclass(frozen=True)
class Stack:
    frames: tuple[Frame, ...]
    tail: str | None  # the exception line; None: the paste stops inside the last frame
    phase: str
    # a stage line printed before it that, without the frames, would place the OOM elsewhere
    before: str | None = None


# an OOM under no frame after this line reads as loading's; only the frames say it was later
LOADING = "INFO 03-14 12:00:00 [gpu_model_runner.py:1770] Starting to load model Qwen/Qwen2-7B..."


TORCH_CTX = _f("torch/utils/_contextlib.py", None, "decorate_context", "return func(*args, **kwargs)", 116)
TORCH_CALL = _f(
    "torch/nn/modules/module.py", "Module", "_call_impl", "return forward_call(*args, **kwargs)", 1562
)
QUANT = "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"

STACKS: dict[str, Stack] = {
    # V0 (0.4-0.8): a worker's constructor loads the weights; the model's __init__ allocates them
    "v0-weights": Stack(
        (
            _f("vllm/engine/llm_engine.py", "LLMEngine", "__init__", "self.model_executor = executor_class("),
            _f("vllm/executor/executor_base.py", "ExecutorBase", "__init__", "self._init_executor()"),
            _f(
                "vllm/executor/gpu_executor.py",
                "GPUExecutor",
                "_init_executor",
                "self.driver_worker.load_model()",
            ),
            _f("vllm/worker/worker.py", "Worker", "load_model", "self.model_runner.load_model()"),
            _f("vllm/worker/model_runner.py", "GPUModelRunnerBase", "load_model", "self.model = get_model("),
            _f(
                "vllm/model_executor/model_loader/loader.py",
                "DefaultModelLoader",
                "load_model",
                "model = _initialize_model(model_config, self.load_config,",
            ),
            _f(
                "vllm/model_executor/models/llama.py",
                "LlamaForCausalLM",
                "__init__",
                "self.model = LlamaModel(config,",
            ),
            _f("torch/utils/_device.py", None, "__torch_function__", "return func(*args, **kwargs)", 79),
        ),
        OOM,
        "weights_oom",
    ),
    # V0 (0.5-0.10): the profile run executes the model once; execute_model is also the serving entry
    "v0-profile": Stack(
        (
            _f(
                "vllm/engine/llm_engine.py",
                "LLMEngine",
                "_initialize_kv_caches",
                "num_gpu_blocks, num_cpu_blocks = (self.model_executor.determine_num_available_blocks())",
            ),
            _f(
                "vllm/executor/gpu_executor.py",
                "GPUExecutor",
                "determine_num_available_blocks",
                "return self.driver_worker.determine_num_available_blocks()",
            ),
            TORCH_CTX,
            _f(
                "vllm/worker/worker.py",
                "Worker",
                "determine_num_available_blocks",
                "self.model_runner.profile_run()",
            ),
            TORCH_CTX,
            _f(
                "vllm/worker/model_runner.py",
                "GPUModelRunnerBase",
                "profile_run",
                "self.execute_model(model_input, kv_caches, intermediate_tensors)",
            ),
            TORCH_CTX,
            _f(
                "vllm/worker/model_runner.py",
                "ModelRunner",
                "execute_model",
                "hidden_or_intermediate_states = model_executable(",
            ),
            TORCH_CALL,
            _f(
                "vllm/model_executor/models/llama.py",
                "LlamaForCausalLM",
                "forward",
                "model_output = self.model(input_ids, positions, kv_caches,",
            ),
        ),
        OOM,
        "warmup_oom",
        LOADING,
    ),
    # 0.2.7: the engine sizes its cache by profiling through the workers
    "v02-profile": Stack(
        (
            _f("vllm/engine/llm_engine.py", "LLMEngine", "__init__", "self._init_cache()"),
            _f("vllm/engine/llm_engine.py", "LLMEngine", "_init_cache", "num_blocks = self._run_workers("),
            _f(
                "vllm/engine/llm_engine.py",
                "LLMEngine",
                "_run_workers",
                "driver_worker_output = getattr(self.driver_worker, method)(*driver_args, **driver_kwargs)",
            ),
            TORCH_CTX,
            _f(
                "vllm/worker/worker.py",
                "Worker",
                "profile_num_available_blocks",
                "self.model_runner.profile_run()",
            ),
            TORCH_CTX,
            _f(
                "vllm/worker/model_runner.py",
                "ModelRunner",
                "profile_run",
                "self.execute_model(seqs, kv_caches)",
            ),
        ),
        OLD_OOM,
        "warmup_oom",
        LOADING,
    ),
    # V0 (0.4-0.10): the cache-size check a worker runs before allocating, cut before its message
    "v0-kv-cut": Stack(
        (
            _f(
                "vllm/engine/llm_engine.py",
                "LLMEngine",
                "_initialize_kv_caches",
                "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)",
            ),
            _f(
                "vllm/executor/gpu_executor.py",
                "GPUExecutor",
                "initialize_cache",
                "self.driver_worker.initialize_cache(num_gpu_blocks, num_cpu_blocks)",
            ),
            _f(
                "vllm/worker/worker.py",
                "Worker",
                "initialize_cache",
                "raise_if_cache_size_invalid(num_gpu_blocks,",
            ),
            _f("vllm/worker/worker.py", None, "raise_if_cache_size_invalid", "raise ValueError("),
        ),
        None,
        "kv_cache_capacity",
    ),
    # V1 (0.8-0.10): the engine core profiles through the executor's RPC
    "v1-profile": Stack(
        (
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "__init__",
                "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(",
            ),
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "_initialize_kv_caches",
                "available_gpu_memory = self.model_executor.determine_available_memory()",
            ),
            _f(
                "vllm/v1/executor/abstract.py",
                "Executor",
                "determine_available_memory",
                'output = self.collective_rpc("determine_available_memory")',
            ),
            _f(
                "vllm/v1/executor/uniproc_executor.py",
                "UniProcExecutor",
                "collective_rpc",
                "answer = run_method(self.driver_worker, method, args, kwargs)",
            ),
            TORCH_CTX,
            _f(
                "vllm/v1/worker/gpu_worker.py",
                "Worker",
                "determine_available_memory",
                "self.model_runner.profile_run()",
            ),
            _f(
                "vllm/v1/worker/gpu_model_runner.py",
                "GPUModelRunner",
                "profile_run",
                "hidden_states, last_hidden_states = self._dummy_run(",
            ),
            TORCH_CTX,
            _f("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner", "_dummy_run", "outputs = self.model("),
            TORCH_CALL,
            _f(
                "vllm/model_executor/models/qwen2.py",
                "Qwen2ForCausalLM",
                "forward",
                "hidden_states = self.model(input_ids, positions, intermediate_tensors,",
            ),
        ),
        OOM,
        "warmup_oom",
        LOADING,
    ),
    # V1 (0.10-0.33): CUDA-graph capture after the cache is allocated
    "v1-capture": Stack(
        (
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "_initialize_kv_caches",
                "self.model_executor.initialize_from_config(kv_cache_configs)",
            ),
            _f(
                "vllm/v1/executor/abstract.py",
                "Executor",
                "initialize_from_config",
                'self.collective_rpc("compile_or_warm_up_model")',
            ),
            _f(
                "vllm/v1/worker/gpu_worker.py",
                "Worker",
                "compile_or_warm_up_model",
                "cuda_graph_memory_bytes = self.model_runner.capture_model()",
            ),
            _f(
                "vllm/v1/worker/gpu_model_runner.py",
                "GPUModelRunner",
                "capture_model",
                "self._capture_cudagraphs(",
            ),
            _f(
                "vllm/v1/worker/gpu_model_runner.py",
                "GPUModelRunner",
                "_capture_cudagraphs",
                "self._dummy_run(",
            ),
            _f("torch/cuda/graphs.py", "graph", "__exit__", "self.cuda_graph.capture_end()", 186),
        ),
        OOM,
        "warmup_oom",
        LOADING,
    ),
    # V1 (0.8-0.32): the check that one request of max_model_len fits, cut before its message
    "v1-kv-cut": Stack(
        (
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "__init__",
                "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(",
            ),
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "_initialize_kv_caches",
                "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,",
            ),
            _f(
                "vllm/v1/core/kv_cache_utils.py",
                None,
                "get_kv_cache_configs",
                "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,",
            ),
            _f("vllm/v1/core/kv_cache_utils.py", None, "check_enough_kv_cache_memory", "raise ValueError("),
        ),
        None,
        "kv_cache_capacity",
    ),
    # V1 (0.11-0.33): serving, the busy loop executing a batch
    "v1-serving": Stack(
        (
            _f("vllm/v1/engine/core.py", "EngineCoreProc", "run_engine_core", "engine_core.run_busy_loop()"),
            _f("vllm/v1/engine/core.py", "EngineCoreProc", "run_busy_loop", "self._process_engine_step()"),
            _f(
                "vllm/v1/engine/core.py",
                "EngineCoreProc",
                "_process_engine_step",
                "outputs, model_executed = self.step_fn()",
            ),
            _f(
                "vllm/v1/engine/core.py",
                "EngineCore",
                "step",
                "model_output = self.model_executor.execute_model(scheduler_output)",
            ),
            _f(
                "vllm/v1/worker/gpu_worker.py",
                "Worker",
                "execute_model",
                "output = self.model_runner.execute_model(scheduler_output,",
            ),
            TORCH_CTX,
            _f(
                "vllm/v1/worker/gpu_model_runner.py",
                "GPUModelRunner",
                "execute_model",
                "model_output = self.model(",
            ),
        ),
        OOM,
        "runtime_oom",
    ),
    # V1 (0.9-0.33): loading through the model loader down to a layer's weight loader
    "v1-weights": Stack(
        (
            _f(
                "vllm/v1/executor/multiproc_executor.py", "WorkerProc", "__init__", "self.worker.load_model()"
            ),
            _f("vllm/v1/worker/gpu_worker.py", "Worker", "load_model", "self.model_runner.load_model()"),
            _f(
                "vllm/v1/worker/gpu_model_runner.py",
                "GPUModelRunner",
                "load_model",
                "self.model = model_loader.load_model(",
            ),
            _f(
                "vllm/model_executor/model_loader/base_loader.py",
                "BaseModelLoader",
                "load_model",
                "self.load_weights(model, model_config)",
            ),
            _f(
                "vllm/model_executor/model_loader/default_loader.py",
                "DefaultModelLoader",
                "load_weights",
                "loaded_weights = model.load_weights(",
            ),
            _f(
                "vllm/model_executor/models/llama.py",
                "LlamaForCausalLM",
                "load_weights",
                "return loader.load_weights(",
            ),
            _f(
                "vllm/model_executor/layers/linear.py",
                "MergedColumnParallelLinear",
                "weight_loader",
                "param_data.copy_(loaded_weight)",
            ),
        ),
        OOM,
        "weights_oom",
    ),
    # 0.6-0.33: the compressed-tensors scheme check, cut before its message
    "quant-cut": Stack(
        (
            _f(
                "vllm/model_executor/model_loader/utils.py",
                None,
                "initialize_model",
                "return model_class(vllm_config=vllm_config, prefix=prefix)",
            ),
            _f(
                "vllm/model_executor/models/llama.py",
                "LlamaForCausalLM",
                "__init__",
                "self.model = self._init_model(vllm_config=vllm_config,",
            ),
            _f(
                QUANT,
                "CompressedTensorsConfig",
                "get_quant_method",
                "scheme = self.get_scheme(layer=layer, layer_name=prefix)",
            ),
            _f(QUANT, "CompressedTensorsConfig", "get_scheme", "if self._check_scheme_supported("),
            _f(QUANT, "CompressedTensorsConfig", "_check_scheme_supported", "raise RuntimeError("),
        ),
        None,
        "quantization_config",
    ),
}


def _path(frame: Frame) -> str:
    return f"{SITE}/{frame.path}"


def _qualified(frame: Frame) -> str:
    return f"{frame.owner}.{frame.function}" if frame.owner else frame.function


Render = Callable[[Stack], str]


def _cpython(stack: Stack, *, markers: bool = False, margin: str = "", header: bool = True) -> list[str]:
    lines = [f"{margin}Traceback (most recent call last):"] if header else []
    for frame in stack.frames:
        lines.append(f'{margin}  File "{_path(frame)}", line {frame.line}, in {frame.function}')
        lines.append(f"{margin}    {frame.code}")
        if markers:
            call = frame.code.find("(")
            lines.append(f"{margin}    " + "~" * max(call, 1) + "^" * (len(frame.code) - max(call, 1)))
    if stack.tail is not None:
        lines.append(f"{margin}{stack.tail}")
    return lines


def cpython(stack: Stack) -> str:
    return "\n".join(_cpython(stack))


def cpython_311(stack: Stack) -> str:
    return "\n".join(_cpython(stack, markers=True))


def prefixed(prefix: str) -> Render:
    def render(stack: Stack) -> str:
        return "\n".join(prefix + line for line in _cpython(stack))

    return render


def wrapped(width: int, prefix: str = "") -> Render:
    def render(stack: Stack) -> str:
        out: list[str] = []
        for line in _cpython(stack):
            line = prefix + line
            out.extend(line[i : i + width] for i in range(0, len(line), width))
        return "\n".join(out)

    return render


def wrapped_headless(width: int, prefix: str) -> Render:
    """A paste cut at both ends (no header, a logger prefix begun after the last frame), hard-wrapped
    by the terminal, under the person's own title typed longer than the terminal is wide."""

    def render(stack: Stack) -> str:
        out = [
            "[Bug]: the engine dies at start-up on a single 16 GB card, the log is below, what did I miss?",
            "",
        ]
        for line in _cpython(stack, header=False):
            line = prefix + line
            out.extend(line[i : i + width] for i in range(0, len(line), width))
        return "\n".join([*out, prefix[:7]])

    return render


def viewer_gutter(stack: Stack) -> str:
    """A chunk copied from a log viewer that numbers its lines (the numbers land between the lines),
    cut at both ends."""
    out: list[str] = []
    for number, line in enumerate(_cpython(stack, header=False), start=56):
        out += [ENGINE_CORE + line, str(number)]
    return "\n".join(out)


def chained_cause(stack: Stack) -> str:
    wrapper = [
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
        "    raise e",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 688, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    return "\n".join([*_cpython(stack), *wrapper])


def during_handling(stack: Stack) -> str:
    wrapper = [
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/serve.py", line 41, in <module>',
        "    main()",
        '  File "/app/serve.py", line 37, in main',
        "    raise SystemExit(1)",
        "SystemExit: 1",
    ]
    return "\n".join([*_cpython(stack), *wrapper])


def exception_group(stack: Stack) -> str:
    lines = [
        "  + Exception Group Traceback (most recent call last):",
        '  |   File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run',
        "  |     return self._loop.run_until_complete(task)",
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        "  +-+---------------- 1 ----------------",
        *_cpython(stack, margin="    | "),
        "    +------------------------------------",
    ]
    return "\n".join(lines)


def ray_actor(stack: Stack) -> str:
    prefix = RAY_ACTOR + "ERROR 08-01 12:00:00 worker_base.py:464] "
    return "\n".join(
        [
            f"{prefix}Error executing method {stack.frames[-1].function}. This might cause deadlock.",
            *(prefix + line for line in _cpython(stack)),
        ]
    )


def ray_task_error(stack: Stack) -> str:
    # Ray's RayTaskError prints the remote traceback without its header, after the actor's call
    name = (stack.tail or "RuntimeError").split(":")[0].rsplit(".", 1)[-1]
    head = (
        f"ray.exceptions.RayTaskError({name}): ray::RayWorkerWrapper.execute_method() (pid=4242, "
        "ip=10.0.0.2, actor_id=5c2b8d1e, repr=<vllm.executor.ray_utils.RayWorkerWrapper object at 0x7f3c>)"
    )
    return "\n".join([head, *_cpython(stack, header=False)])


def rich_boxed(stack: Stack) -> str:
    width = 118
    lines = ["╭" + " Traceback (most recent call last) ".center(width - 2, "─") + "╮"]
    for frame in stack.frames:
        for text in (
            f"{_path(frame)}:{frame.line} in {frame.function}",
            "",
            f"  {frame.line - 1:>4} │   │   # the call below",
            f"❱ {frame.line:>4} │   │   {frame.code}",
            f"  {frame.line + 1:>4} │   ",
            "",
        ):
            lines.append("│ " + text[: width - 4].ljust(width - 4) + " │")
    lines.append("╰" + "─" * (width - 2) + "╯")
    if stack.tail is not None:
        lines.append(stack.tail.split(".", 1)[-1] if stack.tail.startswith("torch.") else stack.tail)
    return "\n".join(lines)


def loguru(stack: Stack) -> str:
    lines = [
        "2025-03-14 12:00:00.123 | ERROR    | __main__:main:12 - An error has been caught",
        "Traceback (most recent call last):",
        "",
    ]
    for number, frame in enumerate(stack.frames):
        mark = "> " if number == len(stack.frames) - 1 else "  "
        lines.append(f'{mark}File "{_path(frame)}", line {frame.line}, in {frame.function}')
        lines.append(f"    {frame.code}")
        lines.append(f"    └ <{frame.owner or 'function'} object at 0x7f3c2a1b>")
        lines.append("")
    if stack.tail is not None:
        lines.append(stack.tail)
    return "\n".join(lines)


def faulthandler(stack: Stack) -> str:
    # most recent call first, no comma before `in`
    lines = [
        stack.tail or "",
        "Fatal Python error: Aborted",
        "",
        "Current thread 0x00007f3c2a1b4740 (most recent call first):",
    ]
    lines += [f'  File "{_path(f)}", line {f.line} in {f.function}' for f in reversed(stack.frames)]
    return "\n".join(lines)


def py_spy(stack: Stack) -> str:
    lines = [
        stack.tail or "",
        "Process 4242: /usr/bin/python3 -m vllm.entrypoints.openai.api_server",
        "Python v3.10.12 (/usr/bin/python3.10)",
        "",
        'Thread 4242 (active): "MainThread"',
    ]
    lines += [f"    {f.function} ({f.path}:{f.line})" for f in reversed(stack.frames)]
    return "\n".join(lines)


def pytest_long(stack: Stack) -> str:
    lines = ["_" * 20 + " test_generate " + "_" * 20, ""]
    for frame in stack.frames:  # `--tb=short`: the frame's place, then its line
        lines.append(f"{_path(frame)}:{frame.line}: in {frame.function}")
        lines.append(f"    {frame.code}")
    if stack.tail is not None:
        lines.append("E   " + stack.tail)
    return "\n".join(lines)


def ipython8(stack: Stack) -> str:
    name = (stack.tail or "ValueError").split(":")[0].rsplit(".", 1)[-1]
    lines = [
        "-" * 75,
        f"{name:<40}Traceback (most recent call last)",
        "Cell In[3], line 1",
        '----> 1 llm = LLM(model="meta-llama/Llama-3.1-8B-Instruct")',
        "",
    ]
    for frame in stack.frames:
        lines.append(
            f"File ~/venv/lib/python3.10/site-packages/{frame.path}:{frame.line}, "
            f"in {_qualified(frame)}(self)"
        )
        lines.append(f"    {frame.line - 1} # the call below")
        lines.append(f"--> {frame.line} {frame.code}")
        lines.append("")
    if stack.tail is not None:
        lines.append(stack.tail)
    return "\n".join(lines)


def ipython7(stack: Stack) -> str:
    name = (stack.tail or "ValueError").split(":")[0].rsplit(".", 1)[-1]
    lines = [
        "-" * 75,
        f"{name:<40}Traceback (most recent call last)",
        "<ipython-input-3-5f2c> in <module>",
        '----> 1 llm = LLM(model="meta-llama/Llama-3.1-8B-Instruct")',
        "",
    ]
    for frame in stack.frames:
        lines.append(f"~/venv/lib/python3.10/site-packages/{frame.path} in {frame.function}(self)")
        lines.append(f"    {frame.line - 1:>4}         # the call below")
        lines.append(f"--> {frame.line:>4}         {frame.code}")
        lines.append("")
    if stack.tail is not None:
        lines.append(stack.tail)
    return "\n".join(lines)


def cpp_after(stack: Stack) -> str:
    cpp = [
        "Exception raised from malloc at ../c10/cuda/CUDACachingAllocator.cpp:1175 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f3c in "
        f"{SITE}/torch/lib/libc10.so)",
        f"frame #1: <unknown function> + 0x3ed2e (0x7f3d in {SITE}/torch/lib/libc10_cuda.so)",
        "frame #2: c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, "
        "unsigned long, CUstream_st*) + 0x1e3 (0x7f3e in "
        f"{SITE}/torch/lib/libc10_cuda.so)",
        "#3 0x00007f3c2a1b4740 in at::native::empty_cuda () from /usr/lib/libtorch_cuda.so",
    ]
    return "\n".join([*_cpython(stack), *cpp])


def every_line(prefix: str) -> Render:
    return prefixed(prefix)


ENGINE_CORE = "(EngineCore_DP0 pid=812) ERROR 10-14 12:00:00 [core.py:708] "
RAY_ACTOR = "(RayWorkerWrapper pid=4242, ip=10.0.0.2) "
# the prefix each dialect prints before every line, which the stage line before it has too
LINE_PREFIX = {
    "enginecore-prefix": "(EngineCore_DP0 pid=812) ",
    "ray-actor-prefix": RAY_ACTOR,
    "docker-compose": "vllm-1  | ",
    "k8s-prefix": "[pod/vllm-7d9f6c5b8-x2x7q/vllm] ",
    "k8s-timestamps": "2025-03-14T12:34:56.789012345Z ",
    "journald": "Mar 14 12:34:56 gpu-node-3 python3[23817]: ",
    "wrapped-100-enginecore": "(EngineCore_DP0 pid=812) ",
}

DIALECTS: dict[str, Render] = {
    "cpython": cpython,
    "cpython-3.11-markers": cpython_311,
    "chained-cause": chained_cause,
    "during-handling": during_handling,
    "exception-group": exception_group,
    "enginecore-prefix": prefixed(ENGINE_CORE),
    "ray-actor-prefix": ray_actor,
    "ray-task-error": ray_task_error,
    "rich-boxed": rich_boxed,
    "loguru": loguru,
    "faulthandler": faulthandler,
    "py-spy": py_spy,
    "pytest": pytest_long,
    "ipython-8": ipython8,
    "ipython-7": ipython7,
    "cpp-frames-after": cpp_after,
    "docker-compose": every_line("vllm-1  | "),
    "k8s-prefix": every_line("[pod/vllm-7d9f6c5b8-x2x7q/vllm] "),
    "k8s-timestamps": every_line("2025-03-14T12:34:56.789012345Z "),
    "journald": every_line("Mar 14 12:34:56 gpu-node-3 python3[23817]: "),
    "wrapped-80": wrapped(80),
    "wrapped-100-enginecore": wrapped(100, ENGINE_CORE),
    "viewer-gutter": viewer_gutter,
    "wrapped-80-compose-headless": wrapped_headless(
        80, "vllm-server-1  | 2024-02-20 21:46:23 | ERROR | stderr | "
    ),
    "wrapped-80-headless": wrapped_headless(80, "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] "),
}

# Dialect x stack: each dialect with stacks of different eras and phases, cut ones included where
# the dialect can end inside a frame (a dump has no exception line of its own).
PROBES: list[tuple[str, str]] = [
    ("cpython", "v0-profile"),
    ("cpython", "v02-profile"),
    ("cpython", "v1-capture"),
    ("cpython-3.11-markers", "v1-profile"),
    ("cpython-3.11-markers", "v1-kv-cut"),
    ("cpython-3.11-markers", "v1-serving"),
    ("chained-cause", "v1-profile"),
    ("chained-cause", "v1-weights"),
    ("during-handling", "v0-weights"),
    ("during-handling", "v1-capture"),
    ("exception-group", "v1-serving"),
    ("exception-group", "v1-weights"),
    ("enginecore-prefix", "v1-kv-cut"),
    ("enginecore-prefix", "quant-cut"),
    ("ray-actor-prefix", "v0-profile"),
    ("ray-actor-prefix", "v0-kv-cut"),
    ("ray-task-error", "v0-weights"),
    ("ray-task-error", "v0-profile"),
    ("rich-boxed", "v1-weights"),
    ("rich-boxed", "v1-capture"),
    ("rich-boxed", "v1-serving"),
    ("loguru", "v0-weights"),
    ("loguru", "v1-profile"),
    ("faulthandler", "v1-capture"),
    ("faulthandler", "v1-weights"),
    ("faulthandler", "v1-serving"),
    ("py-spy", "v1-profile"),
    ("py-spy", "v0-weights"),
    ("pytest", "v1-weights"),
    ("pytest", "v1-profile"),
    ("ipython-8", "v0-weights"),
    ("ipython-8", "v1-kv-cut"),
    ("ipython-7", "v0-weights"),
    ("ipython-7", "v02-profile"),
    ("cpp-frames-after", "v1-capture"),
    ("cpp-frames-after", "v1-serving"),
    ("docker-compose", "v1-profile"),
    ("docker-compose", "quant-cut"),
    ("k8s-prefix", "v1-weights"),
    ("k8s-prefix", "v1-kv-cut"),
    ("k8s-timestamps", "v1-capture"),
    ("k8s-timestamps", "v0-kv-cut"),
    ("journald", "v0-profile"),
    ("journald", "v1-serving"),
    ("wrapped-80", "v1-kv-cut"),
    ("wrapped-80", "v0-kv-cut"),
    ("wrapped-80", "v0-weights"),
    ("wrapped-100-enginecore", "v1-kv-cut"),
    ("wrapped-100-enginecore", "quant-cut"),
    ("wrapped-100-enginecore", "v1-profile"),
    ("wrapped-80-headless", "v1-kv-cut"),
    ("wrapped-80-headless", "v0-kv-cut"),
    ("wrapped-80-headless", "quant-cut"),
    ("viewer-gutter", "v1-kv-cut"),
    ("viewer-gutter", "quant-cut"),
    ("wrapped-80-compose-headless", "v0-kv-cut"),
    ("wrapped-80-compose-headless", "v1-kv-cut"),
]


# the terminal width of the wrapped dialects, which wraps the stage line before the stack too
WIDTH = {"wrapped-80": 80, "wrapped-100-enginecore": 100}


def render(dialect: str, stack: str) -> str:
    before = STACKS[stack].before
    head = "" if before is None else LINE_PREFIX.get(dialect, "") + before
    if dialect in WIDTH:
        head = "\n".join(head[i : i + WIDTH[dialect]] for i in range(0, len(head), WIDTH[dialect]))
    return (head + "\n" if head else "") + DIALECTS[dialect](STACKS[stack]) + "\n"


@pytest.mark.parametrize(("dialect", "stack"), PROBES, ids=[f"{d}-{s}" for d, s in PROBES])
def test_a_traceback_in_any_dialect_is_placed_by_its_frames(
    packs: RulePacks, dialect: str, stack: str
) -> None:
    assert classify_text(render(dialect, stack), packs).phase == STACKS[stack].phase


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_rewriting_a_dialects_frames_keeps_every_line_number_and_is_idempotent(dialect: str) -> None:
    text = render(dialect, "v1-profile")
    cleaned = clean_text(text)
    assert cleaned.count("\n") == text.count("\n")
    assert clean_text(cleaned) == cleaned


@pytest.mark.parametrize(
    ("line", "frame"),
    [
        (
            "│ /x/vllm/worker/worker.py:123 in load_model    │",
            'File "/x/vllm/worker/worker.py", line 123, in load_model',
        ),
        (
            '  File "/x/vllm/worker/worker.py", line 123 in load_model',
            'File "/x/vllm/worker/worker.py", line 123, in load_model',
        ),
        (
            "    load_model (vllm/worker/worker.py:123)",
            'File "vllm/worker/worker.py", line 123, in load_model',
        ),
        (
            "/x/vllm/worker/worker.py:123: in load_model",
            'File "/x/vllm/worker/worker.py", line 123, in load_model',
        ),
        (
            "vllm-1  |     load_model (vllm/worker/worker.py:123)",
            'File "vllm/worker/worker.py", line 123, in load_model',
        ),
    ],
)
def test_each_printers_frame_reads_as_pythons(line: str, frame: str) -> None:
    assert Document(line + "\n").line(1).text == frame


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-14 12:00:00 [core.py:708] see utils (vllm/worker/worker.py:123)",
        "we call load_model (vllm/worker/worker.py:123) first",
        "the file worker.py in load_model is fine",
    ],
)
def test_words_mentioning_a_place_in_a_file_are_not_rewritten(line: str) -> None:
    assert "File " not in Document(line + "\n").line(1).text


def test_a_wrapped_piece_opening_with_a_calls_kwargs_is_rejoined() -> None:
    # a terminal cut `return self._run_workers(method, *args, **(kwargs or {}))` right before its
    # `**`, which a markdown bold mark looks like
    prefix = "ERROR 04-28 08:29:46 engine.py:400] "
    frame = prefix + f'  File "{SITE}/vllm/executor/executor_base.py", line 316, in collective_rpc'
    code = prefix + "    return self._run_workers(method, *args, **(kwargs or {}))"
    width = code.index("**")
    pieces = [line[i : i + width] for line in (frame, code) for i in range(0, len(line), width)]
    doc = Document("\n".join(pieces))
    code_line = next(n for n in range(1, len(pieces) + 1) if "_run_workers" in doc.line(n).text)
    assert doc.line(code_line).text.endswith("*args, **(kwargs or {}))")
