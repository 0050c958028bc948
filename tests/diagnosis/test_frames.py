"""Traceback frames placed by vLLM's call graph (rules/frames/, tools/vllm_callgraph.py)."""

from __future__ import annotations

import pytest

from service.diagnosis import classify_text
from service.diagnosis.frames import cut_traceback, deepest_frame, frame_place, neutral_library, vllm_file
from service.diagnosis.normalize import UNSHOWN_FILE, Document, clean_text
from service.packs import RulePacks
from service.packs.frames import CompiledFrames, FrameGroup, FrameRow, FrameTable

SITE = "/usr/local/lib/python3.12/dist-packages/vllm"
PREFIX = "(EngineCore_DP0 pid=812) "


def _traceback(*frames: tuple[str, str, str], tail: str | None = None) -> str:
    lines = [f"{PREFIX}Traceback (most recent call last):"]
    for number, (file, function, code) in enumerate(frames, start=1):
        lines.append(f'{PREFIX}  File "{SITE}/{file}", line {100 + number}, in {function}')
        lines.append(f"{PREFIX}    {code}")
    if tail is not None:
        lines.append(f"{PREFIX}{tail}")
    return "\n".join(lines) + "\n"


def test_the_table_is_loaded_with_the_packs(packs: RulePacks) -> None:
    assert packs.signatures.frames.rows > 1000


@pytest.mark.parametrize(
    ("file", "function", "stage"),
    [
        ("v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "kv_cache"),
        ("v1/worker/gpu_model_runner.py", "profile_run", "profiling"),
        ("v1/worker/gpu_model_runner.py", "capture_model", "warmup"),
        ("v1/worker/gpu_model_runner.py", "load_model", "loading"),
    ],
)
def test_entry_points_have_their_stage(packs: RulePacks, file: str, function: str, stage: str) -> None:
    place = frame_place(packs.signatures.frames, f'File "{SITE}/{file}", line 10, in {function}')
    assert place is not None and place.stage == stage


def test_a_frame_outside_vllm_or_unknown_is_not_placed(packs: RulePacks) -> None:
    table = packs.signatures.frames
    assert frame_place(table, 'File "/usr/lib/python3.12/threading.py", line 1, in run') is None
    assert frame_place(table, f'File "{SITE}/v1/worker/gpu_model_runner.py", line 1, in no_such_fn') is None
    assert frame_place(table, "not a frame at all") is None


def test_a_paste_cut_inside_the_kv_cache_check_is_kv_cache_capacity(packs: RulePacks) -> None:
    log = _traceback(
        ("v1/engine/core.py", "__init__", "num_gpu_blocks, num_cpu_blocks = self._initialize_kv_caches("),
        ("v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError("),
    )
    diagnosis = classify_text(log, packs)
    assert diagnosis.phase == "kv_cache_capacity"


def test_a_paste_cut_inside_the_quantization_scheme_check_is_quantization_config(packs: RulePacks) -> None:
    quant = "model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"
    log = _traceback(
        ("model_executor/model_loader/utils.py", "initialize_model", "return model_class(config)"),
        (quant, "get_scheme", "if self._check_scheme_supported("),
        (quant, "_check_scheme_supported", "raise RuntimeError("),
    )
    assert classify_text(log, packs).phase == "quantization_config"


def test_a_traceback_that_reaches_its_exception_is_not_cut() -> None:
    log = _traceback(("v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError("))
    assert cut_traceback(Document(log)) is not None
    ended = _traceback(
        ("v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError("),
        tail="ValueError: something else entirely",
    )
    assert cut_traceback(Document(ended)) is None


def test_the_deepest_known_frame_decides(packs: RulePacks) -> None:
    log = _traceback(
        ("v1/worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
        ("v1/worker/gpu_model_runner.py", "profile_run", "self._dummy_run(self.max_num_tokens)"),
        ("v1/worker/gpu_model_runner.py", "no_such_fn", "x()"),
    )
    doc = Document(log)
    place = deepest_frame(doc, packs.signatures.frames, 1, len(doc.lines))
    assert place is not None and place.function == "profile_run" and place.stage == "profiling"


def test_a_bare_oom_under_a_frame_only_the_table_knows_is_placed_by_it(packs: RulePacks) -> None:
    # `_load_w13` is a weight loader of the fused-MoE layer: no frame regex names it, the call graph does
    log = _traceback(
        ("model_executor/layers/fused_moe/layer.py", "_load_w13", "expert_data.copy_(loaded_weight)"),
        tail="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    )
    frame = f'File "{SITE}/model_executor/layers/fused_moe/layer.py", line 1, in _load_w13'
    place = frame_place(packs.signatures.frames, frame)
    assert place is not None and place.stage == "loading"
    assert classify_text(log, packs).phase == "weights_oom"


@pytest.mark.parametrize(
    ("frames", "phase", "cut_at"),
    [
        # V0: the KV-size check is a module function of worker.py, called from initialize_cache
        (
            (("worker/worker.py", "initialize_cache", "raise_if_cache_size_invalid(num_gpu_blocks,"),),
            "kv_cache_capacity",
            "raise",
        ),
        # a method of the frame's own class, called under an `if`
        (
            (
                (
                    "model_executor/layers/quantization/compressed_tensors/compressed_tensors.py",
                    "get_scheme",
                    "if not self._check_scheme_supported(weight_quant.num_bits,",
                ),
            ),
            "quantization_config",
            "_check_sch",
        ),
    ],
)
def test_the_call_printed_under_the_deepest_frame_is_one_frame_deeper(
    packs: RulePacks, frames: tuple[tuple[str, str, str], ...], phase: str, cut_at: str
) -> None:
    outer = ("engine/llm_engine.py", "_initialize_kv_caches", "self.model_executor.initialize_cache(")
    log = _traceback(outer, *frames)
    assert classify_text(log, packs).phase == phase
    # the paste cut inside the next frame's header, as a terminal or a chunk limit leaves it
    cut = log + f'{PREFIX}  File "{SITE}/{frames[-1][0]}", line 335, in {cut_at}\n'
    assert classify_text(cut, packs).phase == phase


def test_a_call_into_another_object_or_an_unknown_function_adds_no_frame(packs: RulePacks) -> None:
    for code in ("self.cache_engine.allocate(num_gpu_blocks)", "no_such_function_in_vllm(num_gpu_blocks)"):
        log = _traceback(("worker/worker.py", "initialize_cache", code))
        known = deepest_frame(Document(log), packs.signatures.frames, 1, 10, with_phase=True)
        assert known is None


@pytest.mark.parametrize(
    "title",
    [
        "Not enough memory when I serve a 34B model on two GPUs",
        "CUDA out of memory at startup with tensor parallel 2",
        "显存不足，启动失败",
    ],
)
def test_a_cut_kv_size_check_outweighs_a_title_that_calls_it_out_of_memory(
    packs: RulePacks, title: str
) -> None:
    log = f"{title}\n\n" + _traceback(
        ("worker/worker_base.py", "execute_method", "return executor(*args, **kwargs)"),
        ("worker/worker.py", "initialize_cache", "raise_if_cache_size_invalid(num_gpu_blocks,"),
    )
    assert classify_text(log, packs).phase == "kv_cache_capacity"


@pytest.mark.parametrize(
    ("path", "file"),
    [
        ("/opt/vllm-gaudi/vllm_gaudi/v1/worker/gpu_model_runner.py", "v1/worker/gpu_model_runner.py"),
        ("vllm_spyre/worker/worker.py", "worker/worker.py"),
        ("/usr/lib/python3/site-packages/vllm/vllm/engine/llm_engine.py", "engine/llm_engine.py"),
        ("vllm/v1/engine/core.py", "v1/engine/core.py"),
    ],
)
def test_a_platform_plugins_module_is_read_as_the_vllm_module_it_mirrors(path: str, file: str) -> None:
    assert vllm_file(path) == file


def test_a_plugin_frame_is_placed_like_vllms_own(packs: RulePacks) -> None:
    line = 'File "/opt/plugins/vllm_npu/v1/worker/gpu_model_runner.py", line 9, in profile_run'
    place = frame_place(packs.signatures.frames, line)
    assert place is not None and place.stage == "profiling"
    other = 'File "/opt/vllmx/worker/worker.py", line 9, in load_model'
    assert frame_place(packs.signatures.frames, other) is None


def test_a_paste_cut_inside_the_next_lines_logger_prefix_is_still_cut(packs: RulePacks) -> None:
    # a plugin worker's copy of the V0 KV-size check, the paste stopping in the next line's prefix
    prefix = "(RayWorkerWrapper pid=4410) ERROR 07-02 09:14:03 worker_base.py:581] "
    log = "\n".join(
        [
            f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "/workspace/vllm_npu/worker/worker.py", line 301, in initialize_cache',
            f"{prefix}    raise_if_cache_size_invalid(",
            "(RayWorkerWrapper pid=4410) ERROR 07-02 09:14:03 worker_ba",
        ]
    )
    doc = Document(log)
    assert cut_traceback(doc) == (1, 3, "RayWorkerWrapper pid=4410")
    assert classify_text(log, packs).phase == "kv_cache_capacity"


def test_a_frame_calling_another_objects_method_claims_none_of_its_own_errors(packs: RulePacks) -> None:
    # determine_available_memory raises only its own profiling errors; cut inside the model runner's
    # profile_run it calls, the frame says where (profiling), not which of its errors
    log = _traceback(
        ("v1/executor/multiproc_executor.py", "worker_busy_loop", "output = func(*args, **kwargs)"),
        ("v1/worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
    )
    doc = Document(log)
    cut = cut_traceback(doc)
    assert cut is not None
    table = packs.signatures.frames
    assert deepest_frame(doc, table, cut[0], cut[1], source=cut[2], with_phase=True) is None
    place = deepest_frame(doc, table, cut[0], cut[1], source=cut[2])
    assert place is not None and place.stage == "profiling" and place.phase is None


def test_the_code_line_of_a_frame_is_found_past_the_gaps_a_joined_wrap_leaves(packs: RulePacks) -> None:
    log = (
        _traceback(
            ("v1/executor/multiproc_executor.py", "worker_busy_loop", "output = func(*args, **kwargs)"),
            ("v1/worker/gpu_worker.py", "determine_available_memory", ""),
        )
        + f"\n{PREFIX}    self.model_runner.profile_run()\n"
    )
    doc = Document(log)
    cut = cut_traceback(doc)
    assert cut is not None
    assert deepest_frame(doc, packs.signatures.frames, cut[0], cut[1], source=cut[2], with_phase=True) is None


def test_a_frame_that_turns_its_calls_oom_into_its_own_error_keeps_its_phase(packs: RulePacks) -> None:
    # _dummy_sampler_run catches an OOM in the sampler call and raises its warm-up message
    log = _traceback(
        ("v1/worker/gpu_model_runner.py", "_dummy_sampler_run", "sampler_output = self.sampler("),
    )
    doc = Document(log)
    cut = cut_traceback(doc)
    assert cut is not None
    place = deepest_frame(doc, packs.signatures.frames, cut[0], cut[1], source=cut[2], with_phase=True)
    assert place is not None and place.phase == "warmup_oom"


def test_a_traceback_cut_inside_the_v0_cache_set_up_is_kv_cache_capacity(packs: RulePacks) -> None:
    # vLLM 0.7.3 engine/llm_engine.py:434 (`_initialize_kv_caches`) and executor/executor_base.py:122
    # (`initialize_cache`): no exception line, only a generic words line above; the stage decides
    log = "loading the model failed\n\n" + _traceback(
        (
            "engine/llm_engine.py",
            "_initialize_kv_caches",
            "self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)",
        ),
        ("executor/executor_base.py", "initialize_cache", 'self.collective_rpc("initialize_cache",'),
        ("executor/mp_distributed_executor.py", "_run_workers", "driver_worker_output = run_method("),
    )
    assert classify_text(log, packs).phase == "kv_cache_capacity"


def test_a_forks_own_module_is_looked_up_as_vllms_of_its_folder(packs: RulePacks) -> None:
    # a fork's V0 model runner next to vLLM 0.7.3's worker/model_runner.py, whose execute_model serves
    table = packs.signatures.frames
    place = frame_place(table, f'File "{SITE}/worker/fork_model_runner.py", line 646, in execute_model')
    assert place is not None and place.stage == "serving"
    # a path a terminal wrapped is vLLM's own module cut, not a fork's
    assert frame_place(table, f'File "{SITE}/engine/llm_e    ngine.py", line 339, in __init__') is None


def test_memory_words_over_a_cut_serving_traceback_are_runtime_oom(packs: RulePacks) -> None:
    # vLLM 0.7.3 worker/worker_base.py:420 `output = self.model_runner.execute_model(` into a fork's
    # runner, the device's own OOM line cut off; the title says the memory ran out
    log = "Llama 70B DRAM OOM\n\n" + _traceback(
        ("worker/worker_base.py", "execute_model", "output = self.model_runner.execute_model("),
        ("worker/fork_model_runner.py", "execute_model", "next_token_ids = self._run_step("),
        ("worker/fork_model_runner.py", "_run_step", "outputs = self.model.prefill_forward(**kwargs)"),
    )
    assert classify_text(log, packs).phase == "runtime_oom"


def test_an_oom_printed_above_the_capture_lines_it_interrupted_is_a_warm_up_oom(packs: RulePacks) -> None:
    # vLLM 0.5.5 worker/model_runner.py:1181 logs "Capturing the model for CUDA graphs…"; a console
    # that printed the worker's OOM first still shows the run got to capture, over the person's words
    log = "\n".join(
        [
            "it crashes while loading the model",
            "",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 70.00 MiB. GPU",
            "INFO 07-11 13:46:49 model_runner.py:1181] Capturing the model for CUDA graphs. This may lead"
            " to unexpected consequences if the model is not static.",
        ]
    )
    assert classify_text(log, packs).phase == "warmup_oom"


TORCH = "/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py"


def test_an_oom_under_torch_moving_a_modules_weights_to_the_device_is_weights_oom(packs: RulePacks) -> None:
    # Module.cuda/.to walk every parameter through Module._apply and its `convert`: the weights are
    # being put on the device, whichever loader or fork called it
    log = "\n".join(
        [
            "RuntimeError: XPU out of memory while starting the server",
            "",
            f'  File "{TORCH}", line 916, in cuda',
            "    return self._apply(lambda t: t.cuda(device))",
            f'  File "{TORCH}", line 780, in _apply',
            "    module._apply(fn)",
            f'  File "{TORCH}", line 1158, in convert',
            "    return t.to(device, dtype if t.is_floating_point() else None, non_blocking)",
        ]
    )
    assert classify_text(log, packs).phase == "weights_oom"


def test_a_tensors_cuda_call_under_a_vllm_frame_is_not_a_modules(packs: RulePacks) -> None:
    # `x.cuda()` in vLLM's code is Tensor.cuda, not Module.cuda: the library's rows are never looked
    # up by a method name another object's call shows
    assert packs.signatures.frames.rows_named("cuda") == ()
    assert packs.signatures.frames.rows_named("_apply") == ()


def test_a_workers_device_set_up_is_its_own_stage_before_loading(packs: RulePacks) -> None:
    place = frame_place(
        packs.signatures.frames, f'File "{SITE}/v1/worker/gpu_worker.py", line 252, in init_device'
    )
    assert place is not None and place.stage == "device"


def test_an_oom_while_a_worker_sets_up_its_device_is_startup_budget(packs: RulePacks) -> None:
    # V1's gpu_worker.init_device takes the memory snapshot and checks free memory against
    # gpu_memory_utilization before any weight loads: an OOM there found the GPU already full
    log = _traceback(
        ("v1/executor/uniproc_executor.py", "_init_executor", "self.driver_worker.init_device()"),
        ("v1/worker/worker_base.py", "init_device", "self.worker.init_device()  # type: ignore"),
        ("v1/worker/gpu_worker.py", "init_device", "torch.cuda.empty_cache()"),
        tail="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
    )
    assert classify_text(log, packs).phase == "startup_budget"


def test_a_method_raising_through_its_own_helpers_names_their_phase(packs: RulePacks) -> None:
    # CompressedTensorsConfig.get_scheme raises the capability check through
    # self._get_scheme_from_parts -> self._check_scheme_supported
    file = "model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"
    frame = f'File "{SITE}/{file}", line 600, in get_scheme'
    place = frame_place(packs.signatures.frames, frame, version=(0, 11, 2))
    assert place is not None and place.phase == "quantization_config"


def test_interleaved_workers_frames_cut_mid_path_are_one_cut_traceback(packs: RulePacks) -> None:
    # two TP workers print their tracebacks line by line into one log; the paste stops inside a path
    tp0, tp1 = (
        "(Worker_TP0 pid=11) ERROR 11-29 20:52:18 [multiproc_executor.py:597] ",
        "(Worker_TP1 pid=12) ERROR 11-29 20:52:18 [multiproc_executor.py:597] ",
    )
    file = "model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"
    log = "\n".join(
        [
            f'{tp0}  File "{SITE}/{file}", line 110, in get_quant_method',
            f'{tp1}  File "{SITE}/model_executor/models/qwen3.py", line 90, in __init__',
            f"{tp0}    quant_scheme = self.get_scheme(layer=layer, layer_name=prefix)",
            f"{tp1}    self.qkv_proj = QKVParallelLinear(",
            f'{tp0}  File "/ho',
        ]
    )
    diagnosis = classify_text(log, packs)
    assert diagnosis.phase == "quantization_config"


# Shapes of a traceback cut in the KV-cache stage: no header, any line prefix, the paste ending in
# the middle of a frame or just after a code line, IPython's frames and arrows (synthetic variants).
_V0_KV_FRAMES = (
    (
        "engine/llm_engine.py",
        "_initialize_kv_caches",
        "self.model_executor.initialize_cache(num_gpu_blocks, 0)",
    ),
    (
        "executor/gpu_executor.py",
        "initialize_cache",
        "self.driver_worker.initialize_cache(num_gpu_blocks, 0)",
    ),
    ("worker/worker.py", "initialize_cache", "self._init_cache_engine()"),
    ("worker/worker.py", "_init_cache_engine", "CacheEngine(self.cache_config, self.model_config,"),
    ("worker/cache_engine.py", "__init__", "super().__init__()"),
)


def _frames(prefix: str, frames: tuple[tuple[str, str, str], ...], *, site: str = SITE) -> list[str]:
    lines = []
    for number, (file, function, code) in enumerate(frames, start=1):
        lines.append(f'{prefix}  File "{site}/{file}", line {200 + number}, in {function}')
        lines.append(f"{prefix}    {code}")
    return lines


@pytest.mark.parametrize(
    "prefix",
    ["", "[rank0]: ", "(EngineCore_DP0 pid=7) (Worker pid=9) ", "ERROR 05-01 10:00:00 engine.py:366] "],
)
@pytest.mark.parametrize(
    "ending",
    [
        'File "/usr/local/lib/python3.10/dist-pa',  # the paste stops inside the next frame's path
        'File "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py", line 64, in',
        "20",  # the first characters of the line after the traceback
        None,  # it stops after a code line
    ],
)
def test_a_headless_kv_setup_traceback_cut_anywhere_is_kv_cache_capacity(
    packs: RulePacks, prefix: str, ending: str | None
) -> None:
    lines = ["Engine fails to start on my GPU", "", *_frames(prefix, _V0_KV_FRAMES)]
    if ending is not None:
        lines.append(f"{prefix}{ending}" if ending.startswith("File") else ending)
    assert classify_text("\n".join(lines) + "\n", packs).phase == "kv_cache_capacity"


def test_a_constructor_called_inside_a_stage_runs_in_that_stage(packs: RulePacks) -> None:
    doc = Document("\n".join(["Traceback (most recent call last):", *_frames("", _V0_KV_FRAMES)]) + "\n")
    cut = cut_traceback(doc)
    assert cut is not None
    known = deepest_frame(doc, packs.signatures.frames, cut[0], cut[1])
    assert known is not None and known.stage == "kv_cache" and known.function == "_init_cache_engine"


def test_a_lone_constructor_frame_still_says_start_up(packs: RulePacks) -> None:
    doc = Document(_traceback(("v1/engine/core.py", "__init__", "super().__init__(vllm_config)")))
    cut = cut_traceback(doc)
    assert cut is not None
    known = deepest_frame(doc, packs.signatures.frames, cut[0], cut[1], source=cut[2])
    assert known is not None and known.stage == "init"


def test_an_exception_the_title_names_outweighs_the_cut_frames_below_it(packs: RulePacks) -> None:
    log = "\n".join(
        [
            "RuntimeError: CUDA error: device-side assert triggered",
            "",
            "Traceback (most recent call last):",
            *_frames("", _V0_KV_FRAMES[:3]),
            f'  File "{SITE}/worker/worker.py", line',
        ]
    )
    assert classify_text(log + "\n", packs).phase == "not_memory"


def test_jupyterlab_link_frames_with_arrows_are_read_as_frames(packs: RulePacks) -> None:
    site = "~/envs/lab/lib/python3.11/site-packages/vllm"
    log = "\n".join(
        [
            "LLM(...) fails in the notebook",
            "",
            f"File [{site}/worker/cache_engine.py:50](http://127.0.0.1:8888/lab/tree/c.py#line=49), "
            "in CacheEngine.__init__(self, cache_config)",
            "     48 # Initialize the cache.",
            '---> 50 self.gpu_cache = self._allocate_kv_cache(self.num_gpu_blocks, "cuda")',
            '     51 self.cpu_cache = self._allocate_kv_cache(self.num_cpu_blocks, "cpu")',
            "",
            "File [~/envs/lab/lib/python3.11/site-packages/torch/utils/_contextlib.py:116](http://h/x), "
            "in context_decorator.<locals>.decorate_context(*args, **kwargs)",
            "    114 with ctx_factory():",
            "--> 116     return func(*args, **kwargs)",
        ]
    )
    doc = Document(log + "\n")
    assert doc.line(3).text.startswith(f'File "{site}/worker/cache_engine.py", line 50, in __init__')
    assert classify_text(log + "\n", packs).phase == "kv_cache_capacity"


def _engine_start_cut(before: str) -> str:
    return before + _traceback(
        ("v1/engine/core.py", "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        ("v1/engine/core.py", "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
    )


def test_a_start_up_traceback_cut_right_after_profilings_result_is_in_the_kv_cache_stage(
    packs: RulePacks,
) -> None:
    profiled = (
        "(Worker pid=901) INFO 11-02 10:00:00 [gpu_worker.py:298] Available KV cache memory: 9.12 GiB\n"
    )
    assert classify_text(_engine_start_cut(profiled), packs).phase == "kv_cache_capacity"
    # without it, or with the run gone on to capture graphs, the constructor's frames say no stage
    assert classify_text(_engine_start_cut(""), packs).phase != "kv_cache_capacity"
    captured = (
        profiled + "(Worker pid=901) INFO 11-02 10:00:09 [gpu_model_runner.py:3480] Capturing CUDA graphs\n"
    )
    assert classify_text(_engine_start_cut(captured), packs).phase != "kv_cache_capacity"


def test_a_traceback_cut_inside_the_level_word_after_its_header_is_in_the_stage_the_run_reached(
    packs: RulePacks,
) -> None:
    # --kv-cache-memory-bytes: determine_available_memory logs the reserved size on return, like
    # profiling's `Available KV cache memory`; the engine then sizes the cache
    reserved = (
        "(EngineCore pid=5) INFO 03-01 09:00:00 [gpu_worker.py:400] Initial free memory 70.10 GiB, "
        "reserved 20.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and "
        "skipped memory profiling.\n"
    )
    header = "(EngineCore pid=5) ERROR 03-01 09:00:01 [core.py:900] Traceback (most recent call last):\n"
    assert classify_text(reserved + header + "(EngineCore pid=5) ERRO\n", packs).phase == "kv_cache_capacity"
    # a line after the header that is more than a cut level word is no such cut
    later = "(EngineCore pid=5) ERROR 03-01 09:00:01 [core.py:900] something else\n"
    assert classify_text(reserved + header + later, packs).phase != "kv_cache_capacity"


def test_headless_frames_without_any_logger_level_are_still_an_error(packs: RulePacks) -> None:
    frames = _frames(
        "", (("engine/llm_engine.py", "_initialize_kv_caches", "self.model_executor.profile()"),)
    )
    log = "\n".join(["It stops here", "", *frames, *frames, f'  File "{SITE}/worker/wor'])
    assert classify_text(log + "\n", packs).phase == "not_memory"


# Executors run a worker method by its name (tools/vllm_callgraph.py DISPATCHERS): a traceback cut in
# the dispatcher is placed by the method the frame above names, not by the dispatcher's frames.
@pytest.mark.parametrize(
    ("frames", "stage"),
    [
        # V1 0.10: initialize_from_config -> collective_rpc("compile_or_warm_up_model"), cut in the RPC
        (
            (
                (
                    "v1/engine/core.py",
                    "_initialize_kv_caches",
                    "self.model_executor.initialize_from_config(c)",
                ),
                (
                    "v1/executor/abstract.py",
                    "initialize_from_config",
                    'self.collective_rpc("compile_or_warm_up_model")',
                ),
                (
                    "v1/executor/multiproc_executor.py",
                    "collective_rpc",
                    "result = get_response(w, dequeue_timeout)",
                ),
            ),
            "warmup",
        ),
        # V1: determine_available_memory dispatched to the workers, cut in the uniproc executor
        (
            (
                (
                    "v1/engine/core.py",
                    "_initialize_kv_caches",
                    "available_gpu_memory = self.model_executor.determine_available_memory()",
                ),
                (
                    "v1/executor/abstract.py",
                    "determine_available_memory",
                    'output = self.collective_rpc("determine_available_memory")',
                ),
                (
                    "v1/executor/uniproc_executor.py",
                    "collective_rpc",
                    "answer = run_method(self.driver_worker, method, args, kwargs)",
                ),
            ),
            "profiling",
        ),
        # V0 (0.5): the GPU executor's profiling through _run_workers, cut inside it
        (
            (
                (
                    "engine/llm_engine.py",
                    "_initialize_kv_caches",
                    "num_gpu_blocks, num_cpu_blocks = self.model_executor.determine_num_available_blocks()",
                ),
                (
                    "executor/distributed_gpu_executor.py",
                    "determine_num_available_blocks",
                    'num_blocks = self._run_workers("determine_num_available_blocks", )',
                ),
                (
                    "executor/ray_gpu_executor.py",
                    "_run_workers",
                    "driver_worker_output = self.driver_worker.execute_method(",
                ),
            ),
            "profiling",
        ),
        # V0 Ray: the workers load the model through execute_method.remote
        (
            (
                (
                    "executor/ray_gpu_executor.py",
                    "_init_workers_ray",
                    'self._run_workers("load_model", max_concurrent_workers=workers)',
                ),
                (
                    "executor/ray_gpu_executor.py",
                    "_run_workers",
                    "ray_worker_outputs = [worker.execute_method.remote(method, *args, **kwargs)",
                ),
            ),
            "loading",
        ),
    ],
)
def test_a_traceback_cut_in_an_executors_dispatch_is_placed_by_the_method_it_names(
    packs: RulePacks, frames: tuple[tuple[str, str, str], ...], stage: str
) -> None:
    doc = Document(_traceback(*frames))
    cut = cut_traceback(doc)
    assert cut is not None
    place = deepest_frame(doc, packs.signatures.frames, cut[0], cut[1], source=cut[2])
    assert place is not None and place.stage == stage


@pytest.mark.parametrize(
    ("file", "function"),
    [
        ("v1/executor/multiproc_executor.py", "collective_rpc"),
        ("v1/executor/uniproc_executor.py", "collective_rpc"),
        ("v1/serial_utils.py", "run_method"),
        ("executor/ray_gpu_executor.py", "_run_workers"),
    ],
)
def test_dispatchers_frames_place_nothing(packs: RulePacks, file: str, function: str) -> None:
    assert frame_place(packs.signatures.frames, f'File "{SITE}/{file}", line 10, in {function}') is None


def test_the_first_releases_warm_up_model_is_a_warm_up_frame(packs: RulePacks) -> None:
    # 0.2.7-0.3.3 `Worker.warm_up_model` captures the CUDA graphs (the later `_warm_up_model`)
    place = frame_place(
        packs.signatures.frames,
        f'File "{SITE}/worker/worker.py", line 10, in warm_up_model',
        version=(0, 3, 3),
    )
    assert place is not None and place.stage == "warmup"


def test_an_oom_titled_traceback_cut_in_the_warm_up_rpc_is_warmup_oom(packs: RulePacks) -> None:
    log = "[Bug]: 8xH100 oom with a big MoE\n\n" + _traceback(
        ("v1/engine/core.py", "__init__", "self._initialize_kv_caches(vllm_config)"),
        (
            "v1/engine/core.py",
            "_initialize_kv_caches",
            "self.model_executor.initialize_from_config(kv_cache_configs)",
        ),
        (
            "v1/executor/abstract.py",
            "initialize_from_config",
            'self.collective_rpc("compile_or_warm_up_model")',
        ),
        ("v1/executor/multiproc_executor.py", "collective_rpc", "result = get_r"),
    )
    assert classify_text(log, packs).phase == "warmup_oom"


@pytest.mark.parametrize(
    ("line", "folder"),
    [
        (
            'File "/usr/lib/python3/dist-packages/torch/_dynamo/eval_frame.py", line 655, in _fn',
            "torch/_dynamo/",
        ),
        (
            'File "/opt/venv/lib/site-packages/triton/runtime/autotuner.py", line 170, in _bench',
            "triton/runtime/",
        ),
        ('File "/x/vllm/model_executor/layers/fla/ops/chunk.py", line 20, in chunk_fwd', "fla/"),
        ('File "/usr/lib/python3/dist-packages/torch/cuda/graphs.py", line 186, in __exit__', None),
        ('File "/x/vllm/v1/worker/gpu_model_runner.py", line 9, in profile_run', None),
    ],
)
def test_a_frame_of_a_library_that_runs_in_every_stage_is_told_apart(
    packs: RulePacks, line: str, folder: str | None
) -> None:
    assert neutral_library(line, packs.evidence.neutral_libraries) == folder


def test_a_pytest_listing_cut_before_its_location_is_looked_up_by_its_functions_name(
    packs: RulePacks,
) -> None:
    report = "\n".join(
        [
            "_____ test_start _____",
            "    def request_memory(init_snapshot, cache_config):",
            "        if init_snapshot.free_memory < requested_memory:",
            ">           raise ValueError(",
        ]
    )
    doc = Document(clean_text(report))
    assert doc.line(3).text.endswith("in request_memory")
    assert UNSHOWN_FILE in doc.line(3).text
    cut = cut_traceback(doc)
    assert cut is not None
    place = deepest_frame(doc, packs.signatures.frames, cut[0], cut[1], with_phase=True)
    assert place is not None and place.phase == "startup_budget"


def test_a_pytest_listing_with_its_location_becomes_that_files_frame() -> None:
    report = "\n".join(
        [
            "    def check(x):",
            ">       raise ValueError(x)",
            "E       ValueError: no",
            "",
            "vllm/config.py:1084: ValueError",
        ]
    )
    lines = clean_text(report).split("\n")
    assert lines[0] == '  File "vllm/config.py", line 1084, in check'
    assert lines[1] == "        raise ValueError(x)"
    assert len(lines) == 5


def test_a_quoted_line_without_a_listing_above_is_left_as_it_is() -> None:
    text = "someone wrote:\n>    it fails on start\n"
    assert clean_text(text) == text


def test_a_plugins_own_rows_place_its_frame_before_vllms_module_of_that_path() -> None:
    table = FrameTable(
        lambda: CompiledFrames(
            groups=[
                FrameGroup(
                    "vllm_spyre/v1/worker/spyre_model_runner.py",
                    "_warmup_spyre_fixed_size",
                    (
                        FrameRow(
                            "vllm_spyre/v1/worker/spyre_model_runner.py",
                            "_warmup_spyre_fixed_size",
                            "warmup",
                            None,
                            [["0.2.0", "0.33.0"]],
                        ),
                    ),
                ),
            ],
            rows=1,
            plugins=["vllm_spyre"],
        )
    )
    path = "/opt/venv/site-packages/vllm_spyre/v1/worker/spyre_model_runner.py"
    line = f'File "{path}", line 9, in _warmup_spyre_fixed_size'
    place = frame_place(table, line)
    assert place is not None and place.stage == "warmup" and place.plugin
    assert table.rows_named("_warmup_spyre_fixed_size") == ()  # a plugin's rows answer for its frames only
