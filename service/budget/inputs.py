"""Every input of an estimate resolved to a number: model, GPU, dtype, quantization, defaults.

`resolve` turns an EstimateRequest into a Run (raising InputError subclasses for bad input) and
records the notes a person should read (assumed version, refused flags, a GPU name read as a size).
"""

from __future__ import annotations

import msgspec

from service.budget.config import model_from_config
from service.budget.defaults import default_utilization, scheduler_defaults
from service.budget.gguf import find_file_type, is_gguf_reference
from service.budget.parallel import expert_parallel_size, pipeline_parallel_problem, tensor_parallel_problem
from service.budget.resolve import (
    ResolvedGpu,
    find_gpu,
    find_kv_dtype,
    find_model,
    find_quantization,
    other_sizes,
)
from service.budget.speculative import Drafter, resolve_drafter
from service.errors import InvalidConfigError
from service.packs.catalog import (
    Catalog,
    DtypeSpec,
    GgufFileType,
    KvDtypeSpec,
    ModelSpec,
    QuantMethodSpec,
    version_tuple,
)
from service.schemas import EstimateRequest

__all__ = ["GIB", "Run", "resolve"]

GIB = 2**30


class Run(msgspec.Struct, frozen=True):
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
    notes: list[str] = msgspec.field(default_factory=list)
    dp: int = 1
    # --enable-expert-parallel: MoE experts split whole over the TP × DP GPUs, not sliced by TP
    expert_parallel: bool = False
    drafter: Drafter | None = None
    prefix_caching: bool = False
    # a GGUF checkpoint's file type (from its name) when the model reference is a GGUF file
    gguf: GgufFileType | None = None
    # what the weights figure stands on when not the architecture (safetensors, a GGUF file)
    weights_from: str | None = None
    # the checkpoint's safetensors totals, and whether its weights are stored as vLLM loads them
    # (not when --quantization quantizes an unquantized checkpoint while loading)
    parameters: dict[str, int] | None = None
    stored_as_loaded: bool = True
    weight_scale: float | None = None

    def ep(self, tp: int) -> int:
        """GPUs the experts are split over at this TP (1 when they are sliced instead)."""
        return expert_parallel_size(self.model, tp, self.dp, self.expert_parallel)

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


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise InvalidConfigError(f"{name} must be positive, not {value}.")


def _validate(request: EstimateRequest) -> None:
    for name in ("gpus", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        _positive(name, getattr(request, name))
    _positive("tensor_parallel_size", request.tensor_parallel_size)
    _positive("pipeline_parallel_size", request.pipeline_parallel_size)
    _positive("data_parallel_size", request.data_parallel_size)
    util = request.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise InvalidConfigError(f"gpu_memory_utilization must be in (0, 1], not {util}.")
    if request.kv_cache_memory_bytes is not None and request.kv_cache_memory_bytes < 0:
        raise InvalidConfigError("kv_cache_memory_bytes cannot be negative.")
    if request.free_gib is not None and not request.free_gib >= 0:
        raise InvalidConfigError(f"free_gib must be a number of GiB, zero or more, not {request.free_gib}.")


def _model(
    request: EstimateRequest, catalog: Catalog
) -> tuple[ModelSpec, str, bool, str | None, str, tuple[int, int], str | None]:
    if request.config is not None:
        spec, quant = model_from_config(request.config, request.model)
        name = request.model or spec.id
        from_config = True
    elif request.model:
        spec, quant = find_model(catalog, request.model)
        keep = (quant is not None and quant != spec.quantization) or is_gguf_reference(request.model)
        name = request.model if keep else spec.id
        from_config = False
    else:
        raise InvalidConfigError("Name a model (catalog or Hugging Face id) or paste its config.json.")
    method = quant.method if quant is not None else None
    scope = quant.scope if quant is not None else "linear"
    kept = (quant.unquantized_first_layers, quant.unquantized_last_layers) if quant is not None else (0, 0)
    return spec, name, from_config, method, scope, kept, quant.kv_cache_dtype if quant is not None else None


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
        capability = gpu.spec.capability
        if capability is not None and capability < (int(major), int(minor)):
            notes.append(
                f"{method.id} needs compute capability {method.min_compute_capability}; {gpu.name} lacks it."
            )
    return method


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
    model, name, from_config, checkpoint_quant, scope, kept, declared_kv = _model(request, catalog)
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
    dp = request.data_parallel_size or 1
    tp = request.tensor_parallel_size or max(1, request.gpus // (pp * dp))
    if (problem := pipeline_parallel_problem(model, pp)) is not None:
        raise InvalidConfigError(problem)
    if tp * pp * dp > request.gpus:
        given = f"only {request.gpus} were given" if request.gpus > 1 else "the estimate assumes that many"
        layout = f"TP {tp} × PP {pp}" + (f" × DP {dp}" if dp > 1 else "")
        notes.append(f"{layout} needs {tp * pp * dp} GPUs; {given}.")
    ep = expert_parallel_size(model, tp, dp, bool(request.enable_expert_parallel))
    if request.enable_expert_parallel and model.moe is None:
        notes.append("--enable-expert-parallel changes nothing here: the model has no experts.")
    elif model.moe is not None and ep > 1 and model.moe.num_experts % ep:
        notes.append(
            f"The {model.moe.num_experts} experts do not divide over {ep} GPUs: the first "
            f"{model.moe.num_experts % ep} hold one more (the budget is theirs); --enable-eplb refuses it."
        )
    dtype = _dtype(request, model, gpu, catalog, notes)
    gguf = find_file_type(catalog, request.model) if request.model and request.config is None else None
    if gguf is not None and (request.quantization or "").lower() == "gguf":
        request = msgspec.structs.replace(request, quantization=None)  # the file's own types stand
    quant = _quantization(request, checkpoint_quant, gpu, catalog, notes)
    if (problem := tensor_parallel_problem(model, tp, engine, quant, scope, dp=dp, ep=ep)) is not None:
        raise InvalidConfigError(problem)
    wanted_kv = request.kv_cache_dtype or "auto"
    if wanted_kv == "auto" and declared_kv is not None:
        wanted_kv = declared_kv
        notes.append(f"The checkpoint declares an {declared_kv} KV cache, which --kv-cache-dtype auto uses.")
    kv = find_kv_dtype(catalog, wanted_kv)
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
        util = default_utilization(engine, version_t)
    offline = request.entrypoint == "llm"
    device = gpu.spec.id if gpu.spec else gpu.name
    defaults = scheduler_defaults(engine, version_t, device, gpu.total_gib, offline=offline)
    served = scheduler_defaults(engine, version_t, device, gpu.total_gib) if offline else defaults
    assert defaults is not None  # only None when no GPU name is known; the budget always has one
    seqs, batched = defaults
    max_num_seqs = request.max_num_seqs or seqs
    max_num_batched_tokens = min(request.max_num_batched_tokens or batched, max_num_seqs * max_model_len)
    if offline and request.max_num_batched_tokens is None and served is not None and served[1] != batched:
        notes.append(
            f"LLM(...) schedules {batched} tokens per step by default where vllm serve schedules "
            f"{served[1]}: its profile run, and so its activation peak, is larger."
        )
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
        gpus=max(request.gpus, tp * pp * dp),
        tp=tp,
        pp=pp,
        dp=dp,
        expert_parallel=bool(request.enable_expert_parallel),
        drafter=resolve_drafter(request.speculative_config, model, catalog),
        prefix_caching=bool(request.enable_prefix_caching),
        gguf=gguf,
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
        parameters=request.parameters,
        stored_as_loaded=checkpoint_quant is not None or quant is None,
    )
