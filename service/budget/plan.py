"""The per-GPU memory budget: what vLLM requests, where it goes, and what fits (DESIGN §3.4).

requested = ceil(total × utilization) (fact sheet §1); the KV pool gets what remains after weights,
non-torch memory, the activation peak and (from 0.20) the CUDA-graph estimate, unless
kv_cache_memory_bytes replaces the whole calculation. Each figure records whether it is exact
arithmetic, from the catalog, given, or an estimate with its uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from service.budget.kv import KvLayout, group_layout, largest_fitting_length
from service.budget.parallel import (
    pipeline_parallel_problem,
    tensor_parallel_problem,
    valid_tensor_parallel_sizes,
)
from service.budget.resolve import (
    ResolvedGpu,
    find_gpu,
    find_kv_dtype,
    find_model,
    find_quantization,
    model_from_config,
    other_sizes,
)
from service.budget.weights import Sharding, WeightBytes, pp_layer_counts, stage_weight_bytes
from service.errors import InputError, InvalidConfigError, UnknownGpuError
from service.packs.catalog import (
    Catalog,
    DefaultsEra,
    DtypeSpec,
    KvDtypeSpec,
    ModelSpec,
    QuantMethodSpec,
    Stepped,
    version_tuple,
)
from service.schemas import Budget, EstimateRequest, Facts, FigureSource, StartupCheck

__all__ = ["GIB", "budget_from_facts", "estimate", "resolve"]

GIB = 2**30
# Quantized kernels repack weights (Marlin, MoE layouts); logged figures stay within about 3 %.
_QUANT_SPREAD = 0.03


@dataclass(frozen=True, slots=True)
class Run:
    """Every input resolved to a number, with the notes the resolution produced."""

    model: ModelSpec
    model_name: str
    from_config: bool
    quant: QuantMethodSpec | None
    quant_scope: str
    unquantized_layers: tuple[int, int]
    gpu: ResolvedGpu
    gpus: int
    tp: int
    pp: int
    dtype_spec: DtypeSpec
    kv: KvDtypeSpec
    util: float
    block_size: int
    max_model_len: int
    derived_max_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    version: str
    version_t: tuple[int, int, int]
    enforce_eager: bool
    kv_cache_memory_bytes: int | None
    free_gib: float | None
    notes: list[str] = field(default_factory=list)

    def at_least(self, since: str) -> bool:
        return self.version_t >= version_tuple(since)

    @property
    def dtype(self) -> str:
        return self.dtype_spec.id

    @property
    def dtype_bytes(self) -> float:
        return self.dtype_spec.bytes

    @property
    def total_bytes(self) -> int:
        return round(self.gpu.total_gib * GIB)


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage's GPU: its weights, KV layout and overheads."""

    weights: WeightBytes
    layout: KvLayout
    non_torch: int
    activation: int
    cuda_graph: int
    graph_in_budget: bool

    @property
    def fixed(self) -> int:
        """Everything vLLM subtracts from `requested` before the KV cache."""
        graphs = self.cuda_graph if self.graph_in_budget else 0
        return self.weights.total + self.non_torch + self.activation + graphs


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise InvalidConfigError(f"{name} must be positive, not {value}.")


def _validate(request: EstimateRequest) -> None:
    for name in ("gpus", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        _positive(name, getattr(request, name))
    _positive("tensor_parallel_size", request.tensor_parallel_size)
    _positive("pipeline_parallel_size", request.pipeline_parallel_size)
    util = request.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise InvalidConfigError(f"gpu_memory_utilization must be in (0, 1], not {util}.")
    if request.kv_cache_memory_bytes is not None and request.kv_cache_memory_bytes < 0:
        raise InvalidConfigError("kv_cache_memory_bytes cannot be negative.")
    if request.free_gib is not None and not request.free_gib >= 0:
        raise InvalidConfigError(f"free_gib must be a number of GiB, zero or more, not {request.free_gib}.")


_E = TypeVar("_E", DefaultsEra, Stepped)


def _era(entries: list[_E], version: tuple[int, int, int]) -> _E:
    """The entry in force at `version`; releases older than the catalog's first use its first entry."""
    current = [e for e in entries if version_tuple(e.since) <= version]
    return current[-1] if current else entries[0]


def _model(
    request: EstimateRequest, catalog: Catalog
) -> tuple[ModelSpec, str, bool, str | None, str, tuple[int, int]]:
    if request.config is not None:
        spec, quant = model_from_config(request.config, request.model)
        name = request.model or spec.id
        from_config = True
    elif request.model:
        spec, quant = find_model(catalog, request.model)
        name = spec.id if quant is None or quant == spec.quantization else request.model
        from_config = False
    else:
        raise InvalidConfigError("Name a model (catalog or Hugging Face id) or paste its config.json.")
    method = quant.method if quant is not None else None
    scope = quant.scope if quant is not None else "linear"
    kept = (quant.unquantized_first_layers, quant.unquantized_last_layers) if quant is not None else (0, 0)
    return spec, name, from_config, method, scope, kept


def _derived_max_len(model: ModelSpec) -> int:
    """max_model_len vLLM derives: max_position_embeddings, × the factor for linear/dynamic RoPE."""
    rope = model.rope
    if (
        rope is not None
        and rope.type in ("linear", "dynamic")
        and model.family not in ("gemma3", "gemma3_text")
    ):
        return int(model.max_position_embeddings * rope.factor)
    return model.max_position_embeddings


def _dtype(
    request: EstimateRequest, model: ModelSpec, gpu: ResolvedGpu, catalog: Catalog, notes: list[str]
) -> DtypeSpec:
    """The dtype vLLM runs: `auto` is the config's, float32 → bf16 (fp16 without bf16 support)."""
    bf16_ok = gpu.spec is None or gpu.spec.bf16
    wanted = (request.dtype or "auto").lower().removeprefix("torch.")
    if wanted == "auto":
        wanted = model.torch_dtype
        if wanted == "float32":
            wanted = "bfloat16" if bf16_ok else "float16"
        elif wanted == "bfloat16" and not bf16_ok:
            wanted = "float16"
            notes.append("This GPU has no bfloat16, so the auto dtype falls back to float16.")
    for spec in catalog.dtypes.dtypes:
        if wanted in (spec.id, *spec.aliases):
            if spec.needs_bf16 and not bf16_ok:
                notes.append(
                    f"vLLM refuses bfloat16 on {gpu.name} (compute capability below 8.0); use --dtype half."
                )
            return spec
    known = ", ".join(d.id for d in catalog.dtypes.dtypes)
    raise InvalidConfigError(f"The dtype {request.dtype!r} is not known (valid: auto, {known}).")


def _quantization(
    request: EstimateRequest, checkpoint: str | None, gpu: ResolvedGpu, catalog: Catalog, notes: list[str]
) -> QuantMethodSpec | None:
    method = find_quantization(catalog, request.quantization) if request.quantization else None
    if checkpoint is not None:
        native = find_quantization(catalog, checkpoint)
        generic = (request.quantization or "").lower() == "compressed-tensors"
        if method is not None and method.id != native.id and not generic:
            notes.append(
                f"The checkpoint is {native.id}-quantized; "
                f"vLLM rejects --quantization {request.quantization}."
            )
        method = native
    if method is not None and gpu.spec is not None and method.min_compute_capability is not None:
        major, minor = method.min_compute_capability.split(".")
        if gpu.spec.capability < (int(major), int(minor)):
            notes.append(
                f"{method.id} needs compute capability {method.min_compute_capability}; {gpu.name} lacks it."
            )
    return method


def _scheduler_defaults(run_gpu: ResolvedGpu, catalog: Catalog, v: tuple[int, int, int]) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens `vllm serve` picks for this device and release."""
    era = _era(catalog.engine.defaults, v)
    gpu_id = run_gpu.spec.id.lower() if run_gpu.spec else ""
    for tier in era.tiers:
        excluded = any(gpu_id.startswith(prefix.lower()) for prefix in tier.exclude)
        if run_gpu.total_gib >= tier.min_total_gib and not excluded:
            return tier.max_num_seqs, tier.max_num_batched_tokens
    raise AssertionError("the last tier has min_total_gib 0")


def resolve(request: EstimateRequest, catalog: Catalog) -> Run:
    """Every input of the estimate as a number; raises InputError subclasses for bad input."""
    _validate(request)
    engine = catalog.engine
    notes: list[str] = []
    version = request.vllm_version or engine.latest
    try:
        version_t = version_tuple(version)
    except ValueError as exc:
        raise InvalidConfigError(f"{version!r} is not a vLLM version such as 0.29.1.") from exc
    if request.vllm_version is None:
        notes.append(f"vLLM version not given; assumed {engine.latest}.")
    model, name, from_config, checkpoint_quant, scope, kept = _model(request, catalog)
    gpu = find_gpu(catalog, request.gpu, request.gpu_total_gib)
    others = other_sizes(catalog, request.gpu, gpu.spec) if request.gpu and gpu.spec else []
    if others and request.gpu_total_gib is None:
        notes.append(
            f"{request.gpu!r} is read as {gpu.name} ({gpu.total_gib} GiB); "
            f"name the card if yours is another size ({', '.join(others[:3])})."
        )
    if request.free_gib is not None and request.free_gib > gpu.total_gib + 0.01:
        raise InvalidConfigError(
            f"free_gib {request.free_gib} exceeds the {gpu.total_gib} GiB that {gpu.name} has in total."
        )
    pp = request.pipeline_parallel_size or 1
    tp = request.tensor_parallel_size or max(1, request.gpus // pp)
    if (problem := pipeline_parallel_problem(model, pp)) is not None:
        raise InvalidConfigError(problem)
    if tp * pp > request.gpus:
        given = f"only {request.gpus} were given" if request.gpus > 1 else "the estimate assumes that many"
        notes.append(f"TP {tp} × PP {pp} needs {tp * pp} GPUs; {given}.")
    dtype = _dtype(request, model, gpu, catalog, notes)
    quant = _quantization(request, checkpoint_quant, gpu, catalog, notes)
    if (problem := tensor_parallel_problem(model, tp, engine, quant, scope)) is not None:
        raise InvalidConfigError(problem)
    kv = find_kv_dtype(catalog, request.kv_cache_dtype or "auto")
    if version_t < version_tuple(kv.since):
        notes.append(f"--kv-cache-dtype {kv.id} does not exist before vLLM {kv.since}.")
    if kv.mla_bytes_per_token is not None and model.mla is None:
        raise InvalidConfigError(f"--kv-cache-dtype {kv.id} only applies to MLA models such as DeepSeek-V3.")
    derived = _derived_max_len(model)
    max_model_len = request.max_model_len or derived
    if max_model_len > derived:
        notes.append(
            f"max_model_len {max_model_len} exceeds the model's {derived}; vLLM refuses it unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    util = request.gpu_memory_utilization
    if util is None:
        util = _era(engine.gpu_memory_utilization, version_t).value
    seqs, batched = _scheduler_defaults(gpu, catalog, version_t)
    max_num_seqs = request.max_num_seqs or seqs
    max_num_batched_tokens = min(request.max_num_batched_tokens or batched, max_num_seqs * max_model_len)
    kv_bytes = request.kv_cache_memory_bytes
    if kv_bytes is not None and version_t < version_tuple(engine.kv_cache_memory_bytes_since):
        notes.append(
            f"--kv-cache-memory-bytes does not exist before vLLM {engine.kv_cache_memory_bytes_since}."
        )
    if gpu.spec is not None and gpu.spec.unified_memory:
        notes.append(
            f"{gpu.name} shares memory with the host: vLLM's free memory is the host's available RAM."
        )
    return Run(
        model=model,
        model_name=name,
        from_config=from_config,
        quant=quant,
        quant_scope=scope,
        unquantized_layers=kept,
        gpu=gpu,
        gpus=max(request.gpus, tp * pp),
        tp=tp,
        pp=pp,
        dtype_spec=dtype,
        kv=kv,
        util=util,
        block_size=request.block_size or engine.default_block_size,
        max_model_len=max_model_len,
        derived_max_len=derived,
        max_num_seqs=min(max_num_seqs, max_num_batched_tokens),
        max_num_batched_tokens=max_num_batched_tokens,
        version=version,
        version_t=version_t,
        enforce_eager=bool(request.enforce_eager),
        kv_cache_memory_bytes=kv_bytes,
        free_gib=request.free_gib,
        notes=notes,
    )


# --- per-stage arithmetic ----------------------------------------------------------------------


def _layer_kinds(run: Run, start: int, stop: int, hybrid: bool) -> tuple[int, int]:
    """(full, sliding) attention layers in [start, stop) as vLLM's KV manager treats them.

    Before the hybrid KV-cache manager, a model mixing sliding and global layers was planned as if
    every layer were global.
    """
    sliding = run.model.sliding
    if sliding is None:
        return stop - start, 0
    if sliding.global_every == 0:
        return 0, stop - start
    if not hybrid:
        return stop - start, 0
    n_global = sum(1 for i in range(start, stop) if (i + 1) % sliding.global_every == 0)
    return n_global, stop - start - n_global


def _kv_bytes_per_token_layer(run: Run, tp: int) -> int:
    model, kv = run.model, run.kv
    element = kv.bytes if kv.bytes is not None else run.dtype_bytes
    if model.mla is not None:
        if kv.mla_bytes_per_token is not None:
            return kv.mla_bytes_per_token
        return int((model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * element)
    heads = max(1, model.num_key_value_heads // tp)
    return int(2 * heads * model.kv_head_dim * element + 2 * heads * kv.scale_bytes_per_head)


def _layout(run: Run, tp: int, start: int, stop: int, hybrid: bool) -> KvLayout:
    full, sliding = _layer_kinds(run, start, stop, hybrid)
    size, full_groups, sliding_groups = group_layout(full, sliding)
    return KvLayout(
        bytes_per_token_layer=_kv_bytes_per_token_layer(run, tp),
        block_size=run.block_size,
        full_layers=full,
        sliding_layers=sliding,
        window=run.model.sliding.window if run.model.sliding is not None else None,
        group_size=size,
        full_groups=full_groups,
        sliding_groups=sliding_groups,
        in_flight_tokens=run.max_num_batched_tokens,
    )


def _activation(run: Run, tp: int, catalog: Catalog) -> int:
    model, o = run.model, catalog.engine.overheads
    inter = model.intermediate_size
    if model.moe is not None:
        routed = model.moe.experts_per_token * model.moe.intermediate_size
        inter = max(routed, inter if model.moe.first_dense_layers else 0)
    per_token = (
        o.activation_bytes_per_token_intermediate * inter / tp
        + o.activation_bytes_per_token_hidden * model.hidden_size
    )
    logits = run.max_num_seqs * model.vocab_size / tp * o.activation_logits_bytes
    return int(run.max_num_batched_tokens * per_token + logits)


def _marlin_moe(run: Run) -> bool:
    """Whether vLLM runs this method's MoE experts through Marlin (GPUs below its capability)."""
    quant, spec = run.quant, run.gpu.spec
    if quant is None or quant.marlin_below_compute_capability is None or spec is None:
        return False
    major, minor = quant.marlin_below_compute_capability.split(".")
    return spec.capability < (int(major), int(minor))


def _quant_bytes(run: Run, tp: int) -> float | None:
    """Bytes per quantized weight, with the padding some MoE kernels give the experts' matrices.

    The expert tensors are allocated at padded sizes (hidden size, and on the Marlin path also the
    per-GPU intermediate size), so the bytes per logical weight grow by the padding ratio.
    """
    if run.quant is None:
        return None
    quant, moe = run.quant, run.model.moe
    if run.quant_scope != "experts" or moe is None:
        return quant.bytes_per_weight
    ratio = 1.0
    if quant.expert_hidden_multiple is not None:
        hidden, multiple = run.model.hidden_size, quant.expert_hidden_multiple
        ratio *= math.ceil(hidden / multiple) * multiple / hidden
    if _marlin_moe(run) and quant.marlin_expert_intermediate_multiple is not None:
        inter, multiple = moe.intermediate_size // tp, quant.marlin_expert_intermediate_multiple
        ratio *= math.ceil(inter / multiple) * multiple / inter
    return quant.bytes_per_weight * ratio


def _stages(run: Run, tp: int, catalog: Catalog) -> list[Stage]:
    o = catalog.engine.overheads
    quant_bytes = _quant_bytes(run, tp)
    sharding = Sharding(
        tp=tp,
        vocab_padding=catalog.engine.vocab_padding,
        quant_scope=run.quant_scope,
        unquantized_layers=run.unquantized_layers,
    )
    weights = stage_weight_bytes(run.model, sharding, run.pp, run.dtype_bytes, quant_bytes)
    non_torch = int((o.non_torch_gib + (o.non_torch_tp_gib if tp * run.pp > 1 else 0)) * GIB)
    activation = _activation(run, tp, catalog)
    in_budget = run.at_least(catalog.engine.cudagraph_profiled_since) and not run.enforce_eager
    hybrid = run.at_least(catalog.engine.hybrid_kv_cache_since)
    stages: list[Stage] = []
    start = 0
    for n, w in zip(pp_layer_counts(run.model.num_hidden_layers, run.pp), weights, strict=True):
        graphs = (
            0 if run.enforce_eager else int((o.cuda_graph_base_gib + o.cuda_graph_per_layer_gib * n) * GIB)
        )
        stages.append(
            Stage(w, _layout(run, tp, start, start + n, hybrid), non_torch, activation, graphs, in_budget)
        )
        start += n
    return stages


def _requested(run: Run, util: float, catalog: Catalog) -> int:
    product = run.total_bytes * util
    return math.ceil(product) if run.at_least(catalog.engine.ceil_requested_since) else int(product)


def _null_bytes(run: Run, layout: KvLayout, catalog: Catalog) -> int:
    return layout.bytes_per_block if run.at_least(catalog.engine.null_block_check_since) else 0


def _available(run: Run, stage: Stage, requested: int) -> int:
    if run.kv_cache_memory_bytes is not None:
        return run.kv_cache_memory_bytes
    return requested - stage.fixed


def _fits(run: Run, stage: Stage, requested: int, catalog: Catalog) -> bool:
    available = _available(run, stage, requested)
    need = stage.layout.need_bytes(run.max_model_len) + _null_bytes(run, stage.layout, catalog)
    return available > 0 and need <= available


# --- inversions --------------------------------------------------------------------------------


def _min_utilization(run: Run, stage: Stage, catalog: Catalog) -> float | None:
    """The smallest utilization (2 decimals) whose KV budget holds one max_model_len request.

    None when kv_cache_memory_bytes is set (vLLM then ignores the utilization) or nothing fits.
    """
    if run.kv_cache_memory_bytes is not None:
        return None
    need = stage.layout.need_bytes(run.max_model_len) + _null_bytes(run, stage.layout, catalog)
    util = math.ceil((stage.fixed + need) / run.total_bytes * 100) / 100
    while util <= 1.0 and _requested(run, util, catalog) - stage.fixed < max(need, 1):
        util = round(util + 0.01, 2)
    return util if util <= 1.0 else None


def _min_tensor_parallel(run: Run, requested: int, catalog: Catalog) -> int | None:
    """The smallest TP vLLM accepts for this model whose GPUs hold weights and one request."""
    for tp in valid_tensor_parallel_sizes(run.model, catalog.engine, run.quant, run.quant_scope):
        if all(_fits_without_override(run, s, requested, catalog) for s in _stages(run, tp, catalog)):
            return tp
    return None


def _fits_without_override(run: Run, stage: Stage, requested: int, catalog: Catalog) -> bool:
    need = stage.layout.need_bytes(run.max_model_len) + _null_bytes(run, stage.layout, catalog)
    return requested - stage.fixed >= max(need, 1)


def _max_passing_utilization(run: Run, free_bytes: int, catalog: Catalog) -> float | None:
    util = math.floor(free_bytes / run.total_bytes * 100) / 100
    while util > 0 and _requested(run, util, catalog) > free_bytes:
        util = round(util - 0.01, 2)
    return util if util > 0 else None


# --- the budget --------------------------------------------------------------------------------


def _gib(value: float) -> float:
    return round(value / GIB, 4)


def _pool(run: Run, layout: KvLayout, num_blocks: int, catalog: Catalog) -> tuple[int, float]:
    """(logged KV-cache tokens, max concurrency) in the form the version logs them."""
    engine = catalog.engine
    if not run.at_least(engine.pool_tokens_per_group_since):
        return num_blocks * run.block_size, num_blocks * run.block_size / run.max_model_len
    concurrency = num_blocks / layout.blocks_per_request(run.max_model_len)
    if run.at_least(engine.pool_tokens_from_concurrency_since):
        return int(concurrency * run.max_model_len), concurrency
    return num_blocks // layout.groups * run.block_size, concurrency


def _startup(run: Run, requested: int, catalog: Catalog) -> StartupCheck:
    if run.free_gib is None:
        return StartupCheck(free_gib=None, requested_gib=_gib(requested), passes=None)
    free = round(run.free_gib * GIB)
    exists = run.at_least(catalog.engine.startup_check_since)
    if not exists:
        run.notes.append(
            f"vLLM before {catalog.engine.startup_check_since} has no startup free-memory check."
        )
    return StartupCheck(
        free_gib=run.free_gib,
        requested_gib=_gib(requested),
        passes=free >= requested if exists else None,
        max_passing_utilization=_max_passing_utilization(run, free, catalog),
    )


def _sources(run: Run, stage: Stage, catalog: Catalog) -> dict[str, FigureSource]:
    o = catalog.engine.overheads
    given = run.kv_cache_memory_bytes is not None
    spread = (
        o.non_torch_uncertainty * GIB
        + stage.activation * o.activation_uncertainty
        + (stage.cuda_graph * o.cuda_graph_uncertainty if stage.graph_in_budget else 0)
    )
    derived = (
        FigureSource(kind="exact", note="from the given kv_cache_memory_bytes")
        if given
        else FigureSource(kind="estimated", uncertainty_gib=_gib(spread))
    )
    repack = _QUANT_SPREAD * stage.weights.quantized
    weights_note = (
        "computed from the pasted config.json"
        if run.from_config
        else "computed from the catalog architecture"
    )
    return {
        "total_gib": FigureSource(kind="catalog" if run.gpu.spec else "given"),
        "weights_gib": FigureSource(
            kind="given" if run.from_config else "catalog",
            uncertainty_gib=_gib(repack) if repack else None,
            note=weights_note,
        ),
        "kv_bytes_per_token": FigureSource(kind="exact"),
        "kv_bytes_per_block": FigureSource(kind="exact"),
        "requested_gib": FigureSource(kind="exact", note="ceil(total × gpu_memory_utilization)"),
        "non_torch_gib": FigureSource(kind="estimated", uncertainty_gib=o.non_torch_uncertainty),
        "activation_peak_gib": FigureSource(
            kind="estimated", uncertainty_gib=_gib(stage.activation * o.activation_uncertainty)
        ),
        "cuda_graph_gib": FigureSource(
            kind="estimated",
            uncertainty_gib=_gib(stage.cuda_graph * o.cuda_graph_uncertainty),
            note=None if stage.graph_in_budget else "not subtracted from the KV budget in this version",
        ),
        "available_kv_gib": FigureSource(kind="given") if given else derived,
        "num_blocks": derived,
        "kv_cache_tokens": derived,
        "max_model_len_fit": derived,
        "max_concurrency": derived,
    }


def _verdict(
    run: Run,
    check: StartupCheck,
    available: int,
    fits_request: bool,
    tokens: int,
    fit_len: int,
    concurrency: float,
    overcommit: bool,
) -> str:
    if check.passes is False:
        better = check.max_passing_utilization
        hint = f"; --gpu-memory-utilization {better} would pass" if better else ""
        return (
            f"vLLM refuses to start: {check.free_gib} GiB free is less than the {check.requested_gib} GiB "
            f"that --gpu-memory-utilization {run.util} requests{hint}."
        )
    if run.kv_cache_memory_bytes is not None and overcommit:
        return (
            f"--kv-cache-memory-bytes {run.kv_cache_memory_bytes} plus the weights exceed the "
            f"{run.gpu.total_gib} GiB of {run.gpu.name}: vLLM runs out of memory allocating the KV cache."
        )
    if available <= 0:
        return "The weights and overheads leave no memory for the KV cache at this utilization."
    if not fits_request:
        return (
            f"The KV cache holds {tokens:,} tokens, too few for one {run.max_model_len:,}-token request; "
            f"the largest max_model_len that fits is {fit_len:,}."
        )
    return (
        f"Fits: {tokens:,} KV-cache tokens, {concurrency:.2f}x concurrency at {run.max_model_len:,} tokens."
    )


def estimate(request: EstimateRequest, catalog: Catalog) -> Budget:
    """The per-GPU memory budget of a model, GPU and vLLM configuration, with what would fit."""
    run = resolve(request, catalog)
    requested = _requested(run, run.util, catalog)
    stages = _stages(run, run.tp, catalog)
    blocks = [max(0, _available(run, s, requested)) // s.layout.bytes_per_block for s in stages]
    worst = min(range(len(stages)), key=lambda i: (blocks[i], -stages[i].weights.total))
    stage, num_blocks = stages[worst], blocks[worst]
    available = _available(run, stage, requested)
    null = _null_bytes(run, stage.layout, catalog)
    fits_request = all(_fits(run, s, requested, catalog) for s in stages)
    # A fixed KV size skips profiling, so nothing stops it from exceeding the GPU itself.
    # Only the weights count here, not the estimated overheads: a KV size read from a log plus
    # overheads that vLLM measured lower must not turn a run that fitted into one that did not.
    overcommit = run.kv_cache_memory_bytes is not None and any(
        s.weights.total + run.kv_cache_memory_bytes > run.total_bytes for s in stages
    )
    fit_len = 0
    if available > 0 and not overcommit:
        # vLLM searches up to the configured max_model_len, which may exceed the derived one
        # (VLLM_ALLOW_LONG_MAX_MODEL_LEN); below it, the derived length bounds the inversion.
        upper = max(run.max_model_len, run.derived_max_len)
        fit_len = min(
            largest_fitting_length(s.layout, _available(run, s, requested) - null, upper) for s in stages
        )
    tokens, concurrency = _pool(run, stage.layout, num_blocks, catalog) if available > 0 else (0, 0.0)
    check = _startup(run, requested, catalog)
    return Budget(
        model=run.model_name,
        gpu=run.gpu.name,
        gpus=run.gpus,
        total_gib=run.gpu.total_gib,
        dtype=run.dtype,
        quantization=run.quant.id if run.quant is not None else None,
        kv_cache_dtype=run.kv.id,
        tensor_parallel_size=run.tp,
        pipeline_parallel_size=run.pp,
        gpu_memory_utilization=run.util,
        block_size=run.block_size,
        max_model_len=run.max_model_len,
        vllm_version=run.version,
        weights_gib=_gib(stage.weights.total),
        kv_bytes_per_token=stage.layout.bytes_per_token,
        kv_bytes_per_block=stage.layout.bytes_per_block,
        activation_peak_gib=_gib(stage.activation),
        non_torch_gib=_gib(stage.non_torch),
        cuda_graph_gib=_gib(stage.cuda_graph),
        requested_gib=_gib(requested),
        available_kv_gib=_gib(available),
        num_blocks=num_blocks,
        kv_cache_tokens=tokens,
        max_model_len_fit=fit_len,
        max_concurrency=round(concurrency, 4),
        startup_check=check,
        fits=check.passes is not False and fits_request and not overcommit,
        verdict=_verdict(run, check, available, fits_request, tokens, fit_len, concurrency, overcommit),
        min_gpu_memory_utilization=_min_utilization(run, stage, catalog),
        min_tensor_parallel_size=_min_tensor_parallel(run, requested, catalog),
        sources=_sources(run, stage, catalog),
        notes=run.notes,
    )


def budget_from_facts(
    facts: Facts,
    catalog: Catalog,
    *,
    model: str | None = None,
    gpu: str | None = None,
    vllm_version: str | None = None,
) -> Budget | None:
    """The budget for what a log (or request hints) states, or None when the model or GPU is unknown.

    When the log states the KV memory vLLM found, it replaces the estimated overheads, so the pool
    matches the log's own arithmetic.
    """
    name = model or facts.model
    if not name or (gpu is None and facts.gpu_name is None and facts.total_gib is None):
        return None
    kv_bytes = None
    if facts.available_kv_cache_gib is not None and facts.available_kv_cache_gib > 0:
        kv_bytes = round(facts.available_kv_cache_gib * GIB)
    request = EstimateRequest(
        model=name,
        gpu=gpu or facts.gpu_name,
        gpu_total_gib=facts.total_gib,
        gpus=max(1, (facts.tensor_parallel_size or 1) * (facts.pipeline_parallel_size or 1)),
        dtype=facts.dtype,
        quantization=facts.quantization,
        kv_cache_dtype=facts.kv_cache_dtype,
        max_model_len=facts.max_model_len,
        gpu_memory_utilization=facts.gpu_memory_utilization,
        max_num_seqs=facts.max_num_seqs,
        max_num_batched_tokens=facts.max_num_batched_tokens,
        block_size=facts.block_size,
        tensor_parallel_size=facts.tensor_parallel_size,
        pipeline_parallel_size=facts.pipeline_parallel_size,
        kv_cache_memory_bytes=kv_bytes,
        free_gib=facts.free_gib,
        vllm_version=vllm_version or facts.vllm_version,
        enforce_eager=facts.enforce_eager,
    )
    try:
        return estimate(request, catalog)
    except InvalidConfigError:
        if request.free_gib is None:
            return None
        # free memory read from the log that the resolved GPU cannot have (another card than the
        # hint, or free memory at an OOM): the budget stands without the startup check
        return budget_from_facts(
            msgspec.structs.replace(facts, free_gib=None),
            catalog,
            model=model,
            gpu=gpu,
            vllm_version=vllm_version,
        )
    except UnknownGpuError:
        if facts.total_gib is None:
            return None
        return budget_from_facts(
            msgspec.structs.replace(facts, gpu_name=None), catalog, model=model, vllm_version=vllm_version
        )
    except InputError:
        return None
