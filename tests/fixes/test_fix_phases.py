"""One test per 'what good answers look like' bullet of issue 4, with realistic facts."""

from __future__ import annotations

import math

import msgspec

from service.fixes import FixRequest, rank_fixes
from service.fixes.limits import passes_startup
from service.packs.fixes import FixPack
from service.schemas import Budget, Facts, Finding, GpuInfo, GpuProcess, OtherProcess, Snapshot


def _gpu(index: int, free: float, processes: list[GpuProcess] | None = None, total: float = 79.19) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index:08d}-aaaa-bbbb-cccc-0123456789ab",
        name="NVIDIA H100 80GB HBM3",
        total_gib=total,
        used_gib=round(total - free, 2),
        free_gib=free,
        reserved_gib=0.5,
        utilization_pct=0,
        compute_capability="9.0",
        mig_mode=False,
        processes=processes or [],
    )


def _snapshot(*gpus: GpuInfo) -> Snapshot:
    return Snapshot(
        host="gpu-node-7",
        captured_at="2026-11-29T16:00:00Z",
        driver_version="550.54.15",
        cuda_version="12.4",
        gpus=list(gpus),
    )


def _texts(fixes: list) -> str:  # type: ignore[type-arg]
    return " ".join(f"{f.change} {f.why} {f.tradeoff}" for f in fixes)


# --- startup_budget ------------------------------------------------------------------------------

STARTUP = Facts(
    vllm_version="0.11.0",
    gpu_memory_utilization=0.9,
    free_gib=20.5,
    total_gib=79.19,
    requested_gib=71.27,
)
STARTUP_SOURCES = {"free_gib": "line 41", "total_gib": "line 41", "requested_gib": "line 41"}


def test_startup_budget_first_frees_memory_naming_pids_and_gib_from_the_snapshot(pack: FixPack) -> None:
    snapshot = _snapshot(
        _gpu(0, 20.5, [GpuProcess(pid=4242, name="VLLM::EngineCore", cmdline=None, used_gib=58.19)]),
        _gpu(1, 78.6),
    )
    fixes = rank_fixes(
        FixRequest(
            phase="startup_budget",
            facts=STARTUP,
            snapshot=snapshot,
            engine_version="0.11.0",
            fact_sources=STARTUP_SOURCES,
        ),
        pack,
    )
    assert fixes[0].id == "free-gpu-memory"
    assert "PID 4242" in fixes[0].change and "58.19 GiB" in fixes[0].change
    assert "covers" in fixes[0].why
    another = next(f for f in fixes if f.id == "use-another-gpu")
    assert another.change == "CUDA_VISIBLE_DEVICES=1"
    assert "nvidia-smi -r" not in _texts(fixes)


def test_startup_budget_names_pids_from_the_oom_text_without_a_snapshot(pack: FixPack) -> None:
    facts = Facts(
        gpu_memory_utilization=0.9,
        free_gib=20.5,
        total_gib=79.19,
        requested_gib=71.27,
        other_processes=[OtherProcess(pid=311, used_gib=40.0), OtherProcess(pid=977, used_gib=18.0)],
    )
    fixes = rank_fixes(FixRequest(phase="startup_budget", facts=facts, engine_version="0.11.0"), pack)
    assert fixes[0].id == "free-gpu-memory"
    assert fixes[0].change == "stop PID 311 (40.00 GiB), PID 977 (18.00 GiB) on this GPU"


def test_startup_budget_recommends_the_largest_utilization_that_passes(pack: FixPack) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase="startup_budget", facts=STARTUP, engine_version="0.11.0", fact_sources=STARTUP_SOURCES
        ),
        pack,
    )
    lower = next(f for f in fixes if f.id == "lower-gpu-memory-utilization")
    # floor((20.5 - 0.5 margin) / 79.19, 2 decimals) = floor(0.2525...) = 0.25
    assert lower.change == "--gpu-memory-utilization 0.25"
    assert passes_startup(20.5, 79.19, 0.25)
    assert not passes_startup(20.5 - 0.5, 79.19, 0.26)
    assert lower.source == ["line 41"]
    # without a list of processes, freeing memory is still first, but without names
    first = fixes[0]
    assert first.id == "free-gpu-memory" and not first.exact and first.needs == ["other_processes"]


# --- weights_oom ---------------------------------------------------------------------------------

WEIGHTS = Facts(
    vllm_version="0.11.0",
    model="meta-llama/Llama-3.1-70B-Instruct",
    gpu_memory_utilization=0.9,
    max_model_len=8192,
    tried_to_allocate_gib=0.88,
    free_gib=0.31,
    total_gib=79.15,
    num_attention_heads=64,
    compute_capability="8.0",
)


def test_weights_oom_never_shortens_the_context(pack: FixPack, llama70b_on_a100: Budget) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0", top=10
        ),
        pack,
    )
    assert fixes
    assert all("--max-model-len" not in f.change for f in fixes)
    assert {"raise-tensor-parallel-size", "quantize-weights-fp8", "use-quantized-checkpoint"} <= {
        f.id for f in fixes
    }


def test_weights_oom_gives_the_smallest_tensor_parallel_size_that_holds_the_weights(
    pack: FixPack, llama70b_on_a100: Budget
) -> None:
    fixes = rank_fixes(
        FixRequest(phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0"), pack
    )
    assert fixes[0].change == "--tensor-parallel-size 2"
    assert "64 attention heads" in fixes[0].why


def test_weights_oom_lowers_utilization_only_when_other_processes_hold_memory(
    pack: FixPack, llama70b_on_a100: Budget
) -> None:
    alone = rank_fixes(
        FixRequest(
            phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0", top=10
        ),
        pack,
    )
    assert all(f.id not in ("lower-gpu-memory-utilization", "free-gpu-memory") for f in alone)
    shared = Facts(
        gpu_memory_utilization=0.9,
        free_gib=40.0,
        total_gib=79.15,
        other_processes=[OtherProcess(pid=5150, used_gib=38.6)],
        num_attention_heads=64,
    )
    fixes = rank_fixes(
        FixRequest(
            phase="weights_oom", facts=shared, budget=llama70b_on_a100, engine_version="0.11.0", top=10
        ),
        pack,
    )
    ids = [f.id for f in fixes]
    assert "free-gpu-memory" in ids and "lower-gpu-memory-utilization" in ids


def test_weights_oom_names_a_larger_gpu_size(pack: FixPack, llama70b_on_a100: Budget) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0", top=10
        ),
        pack,
    )
    larger = next(f for f in fixes if f.id == "use-larger-gpu")
    # the estimate's weights and per-GPU reserve, plus a quarter for KV cache, at utilization 0.90
    b = llama70b_on_a100
    needed = (b.weights_gib + b.activation_peak_gib + b.non_torch_gib + b.cuda_graph_gib) * 1.25 / 0.9
    assert larger.change == f"run on GPUs with at least {math.ceil(needed)} GiB each"
    assert 170 < needed < 200  # 131 GiB of bf16 weights for 70B parameters


# --- kv_cache_capacity ---------------------------------------------------------------------------

KV_TINY = Facts(
    vllm_version="0.29.0",
    model="Qwen/Qwen2.5-0.5B-Instruct",
    max_model_len=2048,
    needed_kv_cache_gib=0.02,
    available_kv_cache_gib=0.02,
    estimated_max_model_len=1344,
)


def test_kv_capacity_sets_max_model_len_to_the_logged_estimate(pack: FixPack) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase="kv_cache_capacity",
            facts=KV_TINY,
            engine_version="0.29.0",
            fact_sources={"estimated_max_model_len": "line 812"},
        ),
        pack,
    )
    assert fixes[0].id == "lower-max-model-len"
    assert fixes[0].change == "--max-model-len 1344"
    assert fixes[0].source == ["line 812"]


KV_A10 = Facts(
    vllm_version="0.10.2",
    model="meta-llama/Llama-3.1-8B-Instruct",
    gpu_memory_utilization=0.9,
    max_model_len=131_072,
    needed_kv_cache_gib=16.0,
    available_kv_cache_gib=3.37,
    estimated_max_model_len=27_584,
    total_gib=22.06,
    num_attention_heads=32,
    compute_capability="8.6",
)


def test_kv_capacity_offers_no_utilization_or_kv_bytes_that_cannot_fit(
    pack: FixPack, llama8b_on_a10: Budget
) -> None:
    snapshot = _snapshot(_gpu(0, 21.8, total=22.06))
    fixes = rank_fixes(
        FixRequest(
            phase="kv_cache_capacity",
            facts=KV_A10,
            budget=llama8b_on_a10,
            snapshot=snapshot,
            engine_version="0.10.2",
            top=10,
        ),
        pack,
    )
    ids = [f.id for f in fixes]
    assert ids[0] == "lower-max-model-len" and fixes[0].change == "--max-model-len 27584"
    # 16 GiB of KV on top of 15 GiB of weights cannot come from a 22 GiB GPU, however it is asked for
    assert "raise-gpu-memory-utilization" not in ids
    assert "set-kv-cache-memory-bytes" not in ids
    # an A10 (compute capability 8.6) has no native fp8
    assert "use-fp8-kv-cache" not in ids


def test_kv_capacity_raises_utilization_only_within_free_memory(pack: FixPack) -> None:
    facts = Facts(
        gpu_memory_utilization=0.9,
        max_model_len=32_768,
        needed_kv_cache_gib=4.0,
        available_kv_cache_gib=2.5,
        estimated_max_model_len=20_480,
        total_gib=79.19,
        free_gib=78.5,
        compute_capability="9.0",
    )
    fixes = rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=facts, engine_version="0.12.0", top=10), pack
    )
    raise_ = next(f for f in fixes if f.id == "raise-gpu-memory-utilization")
    # ceil(0.9 + (4.0 - 2.5 + 0.1) / 79.19, 2 decimals) = 0.93, and 0.93 × 79.19 = 73.65 < 78.5 free
    assert raise_.change == "--gpu-memory-utilization 0.93"
    assert passes_startup(78.5, 79.19, 0.93)
    fp8 = next(f for f in fixes if f.id == "use-fp8-kv-cache")
    assert fp8.change == "--kv-cache-dtype fp8"


def test_kv_capacity_uses_kv_cache_memory_bytes_only_from_0_10_2(
    pack: FixPack, llama8b_on_a10: Budget
) -> None:
    roomy = Facts(max_model_len=16_384, free_gib=21.8, total_gib=22.06, estimated_max_model_len=12_000)
    budget = llama8b_on_a10.__class__(
        **{
            **{f: getattr(llama8b_on_a10, f) for f in llama8b_on_a10.__struct_fields__},
            "max_model_len": 16_384,
            "max_model_len_fit": 12_000,
        }
    )
    new = rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=roomy, budget=budget, engine_version="0.10.2", top=10),
        pack,
    )
    sized = next(f for f in new if f.id == "set-kv-cache-memory-bytes")
    # 131,072 B/token × 16,384 tokens + one 2 MiB block = 2.0020 GiB, rounded up to whole MiB
    assert sized.change == "--kv-cache-memory-bytes 2149580800"
    old = rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=roomy, budget=budget, engine_version="0.10.1", top=10),
        pack,
    )
    assert all("--kv-cache-memory-bytes" not in f.change for f in old)


def test_kv_capacity_adds_tensor_parallel_gpus_that_divide_the_heads(pack: FixPack) -> None:
    snapshot = _snapshot(_gpu(0, 21.8, total=22.06), _gpu(1, 21.8, total=22.06))
    fixes = rank_fixes(
        FixRequest(
            phase="kv_cache_capacity", facts=KV_A10, snapshot=snapshot, engine_version="0.10.2", top=10
        ),
        pack,
    )
    tp = next(f for f in fixes if f.id == "add-tensor-parallel-gpus")
    assert tp.change == "--tensor-parallel-size 2"


# --- warmup_oom ----------------------------------------------------------------------------------

WARMUP = Facts(
    gpu_memory_utilization=0.9,
    total_gib=79.19,
    free_gib=0.04,
    tried_to_allocate_gib=1.5,
    max_num_seqs=256,
)


def test_warmup_oom_enforces_eager_and_never_invents_disable_cuda_graphs(pack: FixPack) -> None:
    fixes = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.11.0"), pack)
    assert fixes[0].change == "--enforce-eager"
    assert "--disable-cuda-graph" not in _texts(fixes)


def test_warmup_oom_names_capture_sizes_with_the_versions_flag(pack: FixPack) -> None:
    old = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.11.0"), pack)
    new = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.12.0"), pack)
    assert next(f for f in old if f.id == "capture-fewer-cuda-graphs").change.startswith(
        "--cuda-graph-sizes 1 2 4"
    )
    assert next(f for f in new if f.id == "capture-fewer-cuda-graphs").change.startswith(
        "--cudagraph-capture-sizes 1 2 4"
    )
    ancient = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.9.1"), pack)
    assert all(f.id != "capture-fewer-cuda-graphs" for f in ancient)


def test_warmup_oom_in_sampler_lowers_max_num_seqs_first(pack: FixPack) -> None:
    finding = Finding(
        rule="vllm-sampler-warmup-oom",
        phase="warmup_oom",
        severity="error",
        line=530,
        message="CUDA out of memory occurred when warming up sampler with 256 dummy requests.",
    )
    fixes = rank_fixes(
        FixRequest(phase="warmup_oom", facts=WARMUP, findings=[finding], engine_version="0.11.0"), pack
    )
    assert fixes[0].change == "--max-num-seqs 128"
    plain = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.11.0"), pack)
    assert all(f.id != "lower-max-num-seqs" for f in plain)


def test_warmup_oom_leaves_room_for_graphs_only_before_0_20(pack: FixPack) -> None:
    old = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.19.1", top=10), pack)
    room = next(f for f in old if f.id == "leave-room-for-cuda-graphs")
    # lacking 1.5 - 0.04 = 1.46 GiB, plus 0.5 margin: floor(0.9 - 1.96 / 79.19, 2) = 0.87
    assert room.change == "--gpu-memory-utilization 0.87"
    new = rank_fixes(FixRequest(phase="warmup_oom", facts=WARMUP, engine_version="0.20.0", top=10), pack)
    assert all(f.id != "leave-room-for-cuda-graphs" for f in new)


# --- runtime_oom and kv_preemption ---------------------------------------------------------------

RUNTIME = Facts(
    gpu_name="NVIDIA H100 80GB HBM3",
    gpu_memory_utilization=0.92,
    total_gib=79.19,
    free_gib=0.12,
    tried_to_allocate_gib=2.0,
    max_num_seqs=512,
    max_num_batched_tokens=16_384,
    kv_cache_tokens=320_000,
)


def test_runtime_oom_lowers_seqs_and_batched_tokens_as_separate_changes(pack: FixPack) -> None:
    fixes = rank_fixes(FixRequest(phase="runtime_oom", facts=RUNTIME, engine_version="0.29.0", top=10), pack)
    changes = [f.change for f in fixes]
    assert "--max-num-seqs 256" in changes
    assert "--max-num-batched-tokens 8192" in changes
    assert all(not ("--max-num-seqs" in c and "--max-num-batched-tokens" in c) for c in changes)
    assert len(fixes) == len({f.id for f in fixes})


def test_runtime_oom_uses_the_version_default_when_the_log_states_no_max_num_seqs(pack: FixPack) -> None:
    facts = Facts(gpu_name="NVIDIA A100-SXM4-80GB", total_gib=79.15, free_gib=0.2, tried_to_allocate_gib=1.0)
    fixes = rank_fixes(FixRequest(phase="runtime_oom", facts=facts, engine_version="0.11.0", top=10), pack)
    seqs = next(f for f in fixes if f.id == "lower-max-num-seqs")
    # vLLM 0.9+ gives an A100 the small tier: 256 sequences
    assert seqs.change == "--max-num-seqs 128" and seqs.source == ["default"]


def test_kv_preemption_points_at_the_metrics_named_for_the_version(pack: FixPack) -> None:
    facts = Facts(max_num_seqs=256, kv_cache_tokens=65_536, total_gib=79.19)
    new = rank_fixes(FixRequest(phase="kv_preemption", facts=facts, engine_version="0.10.0", top=10), pack)
    old = rank_fixes(FixRequest(phase="kv_preemption", facts=facts, engine_version="0.9.1", top=10), pack)
    assert "vllm:kv_cache_usage_perc" in next(f for f in new if f.id == "watch-kv-metrics").change
    assert "vllm:gpu_cache_usage_perc" in next(f for f in old if f.id == "watch-kv-metrics").change
    assert "vllm:num_preemptions_total" in next(f for f in new if f.id == "watch-kv-metrics").change
    cap = next(f for f in new if f.id == "cap-request-length")
    assert "256" in cap.change  # 65,536 tokens / 256 sequences
    assert new[0].id == "lower-max-num-seqs" and new[0].change == "--max-num-seqs 128"


# --- request_too_long ----------------------------------------------------------------------------


def test_request_too_long_asks_for_exactly_the_excess_fewer_tokens(pack: FixPack) -> None:
    facts = Facts(requested_tokens=9_000, context_limit=8_192)
    fixes = rank_fixes(FixRequest(phase="request_too_long", facts=facts, engine_version="0.20.0"), pack)
    assert fixes[0].change == "lower max_tokens in the request by at least 808"


def test_request_too_long_raises_max_model_len_only_when_the_budget_holds_it(
    pack: FixPack, llama8b_on_a10: Budget
) -> None:
    facts = Facts(requested_tokens=9_000, context_limit=8_192, max_model_len=8_192)
    fixes = rank_fixes(
        FixRequest(phase="request_too_long", facts=facts, budget=llama8b_on_a10, engine_version="0.20.0"),
        pack,
    )
    assert any(f.change == "--max-model-len 9216" for f in fixes)
    huge = Facts(requested_tokens=40_000, context_limit=8_192, max_model_len=8_192)
    fixes = rank_fixes(
        FixRequest(phase="request_too_long", facts=huge, budget=llama8b_on_a10, engine_version="0.20.0"), pack
    )
    assert all("--max-model-len" not in f.change for f in fixes)


# --- configuration phases ------------------------------------------------------------------------


def test_profiling_inconsistent_isolates_vllm(pack: FixPack) -> None:
    snapshot = _snapshot(
        _gpu(0, 50.0, [GpuProcess(pid=812, name="python", cmdline="python train.py", used_gib=29.0)]),
        _gpu(1, 78.9),
    )
    fixes = rank_fixes(
        FixRequest(phase="profiling_inconsistent", facts=Facts(), snapshot=snapshot, engine_version="0.11.0"),
        pack,
    )
    assert fixes[0].id == "free-gpu-memory" and "PID 812" in fixes[0].change
    assert any(f.change == "CUDA_VISIBLE_DEVICES=1" for f in fixes)
    assert any(f.id == "set-kv-cache-memory-bytes-fixed" for f in fixes)
    old = rank_fixes(
        FixRequest(phase="profiling_inconsistent", facts=Facts(), snapshot=snapshot, engine_version="0.10.1"),
        pack,
    )
    assert all(f.id != "set-kv-cache-memory-bytes-fixed" for f in old)


def test_parallelism_config_picks_a_tp_size_from_the_head_count_and_gpus(pack: FixPack) -> None:
    facts = Facts(num_attention_heads=28, tensor_parallel_size=8)
    snapshot = _snapshot(*(_gpu(i, 79.0) for i in range(4)))
    fixes = rank_fixes(
        FixRequest(phase="parallelism_config", facts=facts, snapshot=snapshot, engine_version="0.11.0"), pack
    )
    assert fixes[0].change == "--tensor-parallel-size 4"
    assert "1, 2, 4" in fixes[0].why
    unbounded = rank_fixes(FixRequest(phase="parallelism_config", facts=facts, engine_version="0.11.0"), pack)
    assert unbounded[0].change == "--tensor-parallel-size 7"


def test_quantization_config_uses_the_checkpoints_method(pack: FixPack) -> None:
    finding = Finding(
        rule="vllm-quantization-mismatch",
        phase="quantization_config",
        severity="error",
        line=88,
        message=(
            "Quantization method specified in the model config (awq) does not match the quantization "
            "method specified in the `quantization` argument (gptq)."
        ),
    )
    command = "vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --quantization gptq"
    fixes = rank_fixes(
        FixRequest(
            phase="quantization_config",
            facts=Facts(),
            findings=[finding],
            engine_version="0.11.0",
            command=command,
        ),
        pack,
    )
    assert fixes[0].change == "remove --quantization"
    assert "awq" in fixes[0].why
    without = rank_fixes(
        FixRequest(phase="quantization_config", facts=Facts(), findings=[finding], engine_version="0.11.0"),
        pack,
    )
    assert without[0].change == "--quantization awq"


def test_dtype_unsupported_uses_half_below_compute_capability_8(pack: FixPack) -> None:
    t4 = Facts(gpu_name="Tesla T4", compute_capability="7.5", dtype="bfloat16")
    fixes = rank_fixes(FixRequest(phase="dtype_unsupported", facts=t4, engine_version="0.11.0"), pack)
    assert fixes[0].change == "--dtype half"
    a100 = Facts(gpu_name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    assert all(
        f.id != "use-float16"
        for f in rank_fixes(FixRequest(phase="dtype_unsupported", facts=a100, engine_version="0.11.0"), pack)
    )


# --- the command line ----------------------------------------------------------------------------


def test_command_flags_missing_from_the_version_are_fixes(pack: FixPack) -> None:
    command = "vllm serve Qwen/Qwen2.5-7B-Instruct --swap-space 4 --disable-cuda-graphs"
    fixes = rank_fixes(
        FixRequest(phase="not_memory", facts=Facts(), engine_version="0.18.0", command=command), pack
    )
    changes = [f.change for f in fixes]
    assert "remove --swap-space" in changes
    assert "--enforce-eager instead of --disable-cuda-graphs" in changes
    older = rank_fixes(
        FixRequest(phase="not_memory", facts=Facts(), engine_version="0.17.0", command=command), pack
    )
    assert "remove --swap-space" not in [f.change for f in older]


def test_tensor_parallel_size_above_the_gpus_present_is_a_fix(pack: FixPack) -> None:
    snapshot = _snapshot(_gpu(0, 79.0), _gpu(1, 79.0))
    command = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 4"
    facts = Facts(num_attention_heads=32)
    fixes = rank_fixes(
        FixRequest(
            phase="not_memory", facts=facts, snapshot=snapshot, engine_version="0.11.0", command=command
        ),
        pack,
    )
    assert fixes[0].change == "--tensor-parallel-size 2"


def test_the_list_is_short_ranked_and_one_change_per_fix(pack: FixPack, llama70b_on_a100: Budget) -> None:
    fixes = rank_fixes(
        FixRequest(phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0"), pack
    )
    assert len(fixes) <= 5
    assert [f.rank for f in fixes] == list(range(1, len(fixes) + 1))
    assert (
        rank_fixes(
            FixRequest(
                phase="weights_oom", facts=WEIGHTS, budget=llama70b_on_a100, engine_version="0.11.0", top=2
            ),
            pack,
        )
        == fixes[:2]
    )
    assert rank_fixes(FixRequest(phase="no_failure", facts=Facts(), engine_version="0.11.0"), pack) == []


def test_no_memory_for_cache_blocks_raises_utilization_and_never_shortens_the_context(pack: FixPack) -> None:
    # "No available memory for the cache blocks": the log states no length, so none would fit
    facts = Facts(gpu_memory_utilization=0.5, total_gib=79.19, free_gib=78.9, max_model_len=8192)
    fixes = rank_fixes(FixRequest(phase="kv_cache_capacity", facts=facts, engine_version="0.11.0"), pack)
    assert all("--max-model-len" not in f.change for f in fixes)
    # floor((78.9 - 0.5) / 79.19, 2) = 0.99, capped at 0.98
    assert fixes[0].change == "--gpu-memory-utilization 0.98"


def test_v0_kv_capacity_uses_the_tokens_the_cache_can_store(pack: FixPack) -> None:
    # "The model's max seq len (32768) is larger than the maximum number of tokens that can be stored
    # in KV cache (21104)" (V0, 0.6.x): any length up to 21104 fits
    facts = Facts(max_model_len=32_768, kv_cache_tokens=21_104, block_size=16)
    fixes = rank_fixes(FixRequest(phase="kv_cache_capacity", facts=facts, engine_version="0.6.3"), pack)
    assert fixes[0].change == "--max-model-len 21104"


def test_kv_preemption_raises_utilization_into_the_headroom_the_snapshot_shows(pack: FixPack) -> None:
    # vLLM holds 0.90 × 79.19 = 71.27 GiB while serving; 7.4 GiB is still free on the GPU
    facts = Facts(gpu_memory_utilization=0.9, total_gib=79.19, max_num_seqs=256)
    snapshot = _snapshot(_gpu(0, 7.4))
    fixes = rank_fixes(
        FixRequest(phase="kv_preemption", facts=facts, snapshot=snapshot, engine_version="0.29.0", top=10),
        pack,
    )
    raise_ = next(f for f in fixes if f.id == "raise-gpu-memory-utilization")
    # restart would see 7.4 + 71.27 = 78.67 GiB free: floor((78.67 - 0.5) / 79.19, 2) = 0.98
    assert raise_.change == "--gpu-memory-utilization 0.98"
    assert passes_startup(7.4 + 0.9 * 79.19, 79.19, 0.98)


# The failing worker is the one listed process holding PyTorch's reserve and more (service.processes,
# shared with the diagnosis): never offered as a process to free.
def test_the_fixes_do_not_offer_to_free_the_failing_worker(pack: FixPack) -> None:
    facts = Facts(
        free_gib=0.05,
        total_gib=44.35,
        tried_to_allocate_gib=0.11,
        torch_allocated_gib=37.38,
        torch_reserved_unallocated_gib=0.26921875,
        other_processes=[OtherProcess(pid=3663367, used_gib=44.28)],
    )
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=facts, engine_version="0.6.3", top=10), pack)
    assert all("3663367" not in f.change for f in fixes)
    stated = msgspec.structs.replace(facts, process_in_use_gib=40.0)
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=stated, engine_version="0.6.3", top=10), pack)
    assert any("3663367" in f.change for f in fixes)


def test_vllm_itself_listed_as_a_process_in_a_container_is_not_called_another_process(pack: FixPack) -> None:
    # torch OOM from a container: "Process 29144 has 44.16 GiB memory in use" is the worker itself
    # (43.79 GiB allocated by PyTorch + 0.06 reserved + its CUDA context)
    facts = Facts(
        free_gib=0.18,
        total_gib=44.35,
        tried_to_allocate_gib=0.22,
        torch_allocated_gib=43.79,
        torch_reserved_unallocated_gib=0.06,
        other_processes=[OtherProcess(pid=29144, used_gib=44.16)],
    )
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=facts, engine_version="0.6.3", top=10), pack)
    assert all("29144" not in f.change for f in fixes)
    # with "this process has …" read, the listed PID really is someone else
    shared = msgspec.structs.replace(facts, process_in_use_gib=15.92, torch_allocated_gib=15.61)
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=shared, engine_version="0.6.3", top=10), pack)
    assert fixes[0].id == "free-gpu-memory" and "29144" in fixes[0].change


def test_parallelism_config_without_a_head_count_divides_the_dimension_the_assertion_names(
    pack: FixPack,
) -> None:
    facts = Facts(tensor_parallel_size=3)
    evidence = ["[rank0]: AssertionError: 32768 is not divisible by 3"]
    fixes = rank_fixes(
        FixRequest(phase="parallelism_config", facts=facts, engine_version=None, evidence=evidence), pack
    )
    assert fixes[0].change == "--tensor-parallel-size 2"
    assert "32768" in fixes[0].why
    prime_vocab = ["AssertionError: 250681 is not divisible by 8"]
    ids = [
        f.id
        for f in rank_fixes(
            FixRequest(phase="parallelism_config", facts=facts, engine_version=None, evidence=prime_vocab),
            pack,
        )
    ]
    assert "fix-tensor-parallel-size" not in ids
