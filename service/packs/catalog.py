"""The catalogs the budget reads: models, GPUs, dtypes/quantization methods, KV dtypes, engine facts.

Each YAML file under `rules/catalog/` decodes into one Struct below. Cross-field checks live in
`__post_init__`, so a bad entry fails at load with the file, the entry id, the `$.path` and the line
(`service.packs.loader` adds those). Tables are sorted by id so a reviewer sees one obvious place for
each entry and duplicates cannot hide.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

from service.errors import PackError
from service.first_use import first_use_re
from service.packs.loader import load_yaml_file
from service.versions import VersionRange
from service.versions import release as version_tuple  # re-exported: the one parser lives there

__all__ = [
    "ENGINE_FILE",
    "Catalog",
    "CatalogIndex",
    "CheckpointSpec",
    "DtypeCatalog",
    "DtypeSpec",
    "EngineFacts",
    "GgufFileType",
    "GgufTypeSpec",
    "GpuCatalog",
    "GpuSpec",
    "GpuSpellings",
    "KvDtypeSpec",
    "MlaSpec",
    "ModelCatalog",
    "ModelSpec",
    "MoeSpec",
    "OverheadEra",
    "OverheadFit",
    "QuantMethodSpec",
    "QuantSpec",
    "RopeSpec",
    "SlidingSpec",
    "StateSpec",
    "Stepped",
    "TierDefaults",
    "VisionSpec",
    "build_index",
    "fold_name",
    "spaced_name",
    "gfx_capability",
    "gpu_short_name",
    "load_catalog",
    "version_tuple",
]

ENGINE_FILE = "engines.yaml"
_CAPABILITY = first_use_re(r"^\d{1,2}\.\d$")


class Entry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of catalog records: strict, immutable, keyword-only."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _sorted_unique(ids: list[str], what: str) -> None:
    folded = [i.lower() for i in ids]
    for before, after, shown in zip(folded, folded[1:], ids[1:], strict=False):
        _require(before != after, f"{what} has a duplicate id {shown!r}")
        _require(before < after, f"{what} must be sorted by id (case-insensitive): {shown!r} comes too late")


# --- models ------------------------------------------------------------------------------------


class RopeSpec(Entry, frozen=True):
    """Rotary embedding as vLLM builds it; its cos/sin cache is a buffer counted in the weights."""

    theta: float = 10000.0
    type: Literal["default", "linear", "dynamic", "llama3", "yarn", "longrope", "deepseek_yarn"] = "default"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    partial_rotary_factor: float = 1.0
    local_theta: float | None = None

    def __post_init__(self) -> None:
        _require(self.theta > 0, "theta must be positive")
        _require(self.factor >= 1.0, "factor must be at least 1")
        _require(0 < self.partial_rotary_factor <= 1, "partial_rotary_factor must be in (0, 1]")


class SlidingSpec(Entry, frozen=True):
    """Sliding-window layout: layer i is global iff global_every > 0 and (i + 1) % global_every == 0."""

    window: int
    global_every: int = 0

    def __post_init__(self) -> None:
        _require(self.window > 0, "window must be positive")
        _require(self.global_every >= 0, "global_every must be 0 (all sliding) or positive")


class MoeSpec(Entry, frozen=True):
    """Mixture-of-experts layout as in config.json (routed and shared experts, dense first layers)."""

    num_experts: int
    experts_per_token: int
    intermediate_size: int
    shared_experts: int = 0
    shared_intermediate_size: int | None = None
    shared_expert_gate: bool = False
    first_dense_layers: int = 0
    layer_step: int = 1
    router_bias: bool = False
    expert_bias: bool = False
    score_correction_bias: bool = False

    def __post_init__(self) -> None:
        _require(self.num_experts > 1, "num_experts must be at least 2")
        _require(
            0 < self.experts_per_token <= self.num_experts, "experts_per_token must be in 1..num_experts"
        )
        _require(self.intermediate_size > 0, "intermediate_size must be positive")
        _require(self.shared_experts >= 0 and self.first_dense_layers >= 0, "counts cannot be negative")
        _require(self.layer_step >= 1, "layer_step must be at least 1")


class MlaSpec(Entry, frozen=True):
    """Multi-head latent attention (DeepSeek V2/V3): the KV cache holds one latent per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        _require(min(self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim) > 0, "ranks > 0")
        _require(self.v_head_dim > 0, "v_head_dim must be positive")


class VisionSpec(Entry, frozen=True):
    """A ViT encoder and the projector into the language model, by the shape of its layers.

    The defaults are the SigLIP shape (biases, LayerNorm, a plain MLP, learned position embeddings
    per patch, a final norm, a linear projector with an input norm); RoPE towers such as Qwen2-VL's
    and Pixtral's have no position embeddings and so no fixed `image_size`.
    """

    layers: int
    hidden_size: int
    intermediate_size: int
    patch_size: int
    # fixed input resolution; None = dynamic (the processor sizes images, so no profiling reserve)
    image_size: int | None = None
    channels: int = 3
    temporal_patch_size: int = 1
    mlp: Literal["plain", "gated"] = "plain"
    norm: Literal["layer", "rms"] = "layer"
    bias: bool = True  # biases of the attention and MLP linears
    patch_bias: bool = True
    position_embeddings: bool = True
    # learned positions when the tower states their number (Qwen3-VL's num_position_embeddings,
    # interpolated to each image); None = one per patch of image_size
    position_count: int | None = None
    pre_norm: bool = False
    post_norm: bool = True
    # patches merged into one token (a spatial_merge_size × spatial_merge_size square)
    spatial_merge_size: int = 1
    # linear: norm + one matrix (Gemma 3); merger: norm + MLP over merged patches (Qwen2-VL);
    # patch-merger: norm + merging linear + two-layer MLP (Mistral 3)
    projector: Literal["linear", "merger", "patch-merger"] = "linear"
    projector_bias: bool = False
    # further mergers feeding intermediate layers' features to the decoder (Qwen3-VL's deepstack),
    # each normed over the merged width
    deepstack_mergers: int = 0
    # tokens one image becomes in the language model (`mm_tokens_per_image`; Gemma 3 pools its 4096
    # patches to 256); None = one per merged patch
    tokens_per_image: int | None = None

    def __post_init__(self) -> None:
        _require(
            self.image_size is None or self.image_size % self.patch_size == 0,
            "image_size must be a multiple of patch_size",
        )
        _require(
            self.image_size is not None or self.position_count is not None or not self.position_embeddings,
            "a tower with learned position embeddings needs its image_size",
        )
        _require(
            self.tokens_per_image is None or self.tokens_per_image > 0, "tokens_per_image must be positive"
        )
        _require(0 <= self.deepstack_mergers <= self.layers, "deepstack_mergers must be at most layers")

    @property
    def patches(self) -> int:
        """Patches of one image at the fixed resolution (0 for a dynamic-resolution tower)."""
        return (self.image_size // self.patch_size) ** 2 if self.image_size else 0

    @property
    def image_tokens(self) -> int:
        return self.tokens_per_image or self.patches // self.spatial_merge_size**2


class StateSpec(Entry, frozen=True):
    """Per-request recurrent state of linear-attention / Mamba layers (vLLM's MambaSpec).

    `attention_layers` are the layer indices that keep a KV cache; `state_layers` keep one state
    per request instead: a conv state of (conv_dim / TP) × conv_width elements in the model dtype,
    and a recurrent state of (heads / TP) × head_elements, float32 or in the model dtype.
    """

    kind: Literal["gdn", "kda", "mamba2"]
    attention_layers: list[int]
    state_layers: list[int]
    conv_dim: int
    conv_width: int
    heads: int
    head_elements: int
    float32_state: bool = False
    groups: int = 0
    group_channels: int = 0

    def __post_init__(self) -> None:
        _require(bool(self.state_layers), "a state spec needs at least one state layer")
        _require(min(self.conv_dim, self.heads, self.head_elements) > 0, "state sizes must be positive")
        _require(self.conv_width >= 0 and self.groups >= 0, "conv_width and groups cannot be negative")
        _require(not set(self.attention_layers) & set(self.state_layers), "a layer is attention or state")


class QuantSpec(Entry, frozen=True):
    """How a checkpoint is quantized: the method (dtypes.yaml) and which layers it covers."""

    method: str
    scope: Literal["linear", "experts", "mlp"] = "linear"
    unquantized_first_layers: int = 0
    unquantized_last_layers: int = 0
    # the KV-cache dtype the checkpoint declares (modelopt / compressed-tensors kv scheme)
    kv_cache_dtype: str | None = None


class ModelSpec(Entry, frozen=True):
    """One model architecture with the fields of its Hugging Face config.json."""

    id: str
    hf_id: str
    family: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    torch_dtype: Literal["bfloat16", "float16", "float32"]
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    aliases: list[str] = msgspec.field(default_factory=list)
    attention_bias: Literal["none", "qkv", "qkvo"] = "none"
    mlp: Literal["gated", "plain"] = "gated"
    mlp_bias: bool = False
    norm: Literal["rms", "layer"] = "rms"
    norms_per_layer: int = 2
    qk_norm: bool = False
    learned_positions: int = 0
    attention_sinks: bool = False
    rope: RopeSpec | None = msgspec.field(default_factory=RopeSpec)
    sliding: SlidingSpec | None = None
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    vision: VisionSpec | None = None
    quantization: QuantSpec | None = None
    # Multi-token-prediction draft layers the checkpoint ships (DeepSeek-V3 `num_nextn_predict_layers`)
    mtp_layers: int = 0
    state: StateSpec | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            _require(getattr(self, name) > 0, f"{name} must be positive")
        _require(self.max_position_embeddings > 0, "max_position_embeddings must be positive")
        _require(self.num_key_value_heads > 0, "num_key_value_heads must be positive")
        _require(
            self.num_attention_heads % self.num_key_value_heads == 0,
            "num_attention_heads must be a multiple of num_key_value_heads",
        )
        if self.head_dim is None:
            _require(
                self.hidden_size % self.num_attention_heads == 0,
                "hidden_size must divide by num_attention_heads when head_dim is not given",
            )
        _require(self.moe is not None or self.intermediate_size > 0, "intermediate_size must be positive")
        _require(self.norms_per_layer >= 0, "norms_per_layer cannot be negative")
        _require("/" in self.hf_id, "hf_id must read owner/name")

    @property
    def kv_head_dim(self) -> int:
        """head_dim as vLLM derives it: the config value, else hidden_size / heads."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads


class CheckpointSpec(Entry, frozen=True):
    """A published checkpoint of a catalog architecture in another format (AWQ, GPTQ, FP8 …)."""

    id: str
    base: str
    quantization: QuantSpec
    aliases: list[str] = msgspec.field(default_factory=list)
    intermediate_size: int | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        _require("/" in self.id, "a checkpoint id is its Hugging Face id (owner/name)")


class ModelCatalog(Entry, frozen=True):
    models: list[ModelSpec]
    checkpoints: list[CheckpointSpec] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _sorted_unique([m.id for m in self.models], "models")
        _sorted_unique([c.id for c in self.checkpoints], "checkpoints")
        known = {m.id for m in self.models}
        for c in self.checkpoints:
            _require(c.base in known, f"checkpoint {c.id} names an unknown base model {c.base!r}")


# --- GPUs --------------------------------------------------------------------------------------


_GFX = first_use_re(r"^gfx(\d+)[0-9a-f]?$")


def gfx_capability(arch: str) -> tuple[int, int]:
    """(major, minor) of an AMD GCN arch as HIP derives it (vLLM's rocm.py): gfx942 → (9, 4).

    One-digit families read major, minor, stepping (gfx90a → 9.0); gfx10xx-gfx12xx read two digits of
    major and one of minor (gfx1100 → 11.0, gfx1151 → 11.5).
    """
    match = _GFX.match(arch)
    _require(match is not None, f"an AMD arch reads like gfx942, not {arch!r}")
    assert match is not None
    digits = match.group(1)
    if digits[0] == "1" and len(digits) >= 3:
        return int(digits[:2]), int(digits[2])
    return int(digits[0]), int(digits[1])


class GpuSpec(Entry, frozen=True):
    """One accelerator: total memory as its runtime reports it (what vLLM logs), and dtype support.

    NVIDIA cards carry their compute capability; AMD cards their GCN arch (`gfx942`), from which
    vLLM's ROCm platform derives the capability it compares; Intel devices (XPU, Gaudi/HPU) their
    architecture name, since vLLM reports no capability for them.
    """

    id: str
    total_gib: float
    nominal_gb: float
    bf16: bool
    fp8: bool
    fp4: bool
    vendor: Literal["nvidia", "amd", "intel"] = "nvidia"
    compute_capability: str | None = None
    arch: str | None = None
    aliases: list[str] = msgspec.field(default_factory=list)
    unified_memory: bool = False
    note: str | None = None

    def __post_init__(self) -> None:
        _require(
            0.85 * self.nominal_gb <= self.total_gib <= self.nominal_gb,
            "total_gib must be 85-100% of nominal_gb (the runtime reports a little less than the label)",
        )
        if self.vendor != "nvidia":
            _require(self.compute_capability is None, "only NVIDIA GPUs name a compute_capability; give arch")
            _require(bool(self.arch), f"a {self.vendor} device names its arch (gfx942, xe-hpg, gaudi2)")
            if self.vendor == "amd":
                assert self.arch is not None
                gfx_capability(self.arch)
            return
        _require(
            self.compute_capability is not None and bool(_CAPABILITY.match(self.compute_capability)),
            "compute_capability reads like 8.0",
        )
        cc = self.capability
        assert cc is not None
        _require(not self.bf16 or cc >= (8, 0), "bf16 needs compute capability 8.0 or newer")
        _require(not self.fp8 or cc >= (8, 9), "fp8 needs compute capability 8.9 or newer")
        _require(not self.fp4 or cc >= (10, 0), "fp4 needs compute capability 10.0 or newer")

    @property
    def capability(self) -> tuple[int, int] | None:
        """The (major, minor) vLLM's platform reports: CUDA's, HIP's from the gfx arch, None on Intel."""
        if self.compute_capability is not None:
            major, minor = self.compute_capability.split(".")
            return int(major), int(minor)
        if self.vendor == "amd" and self.arch is not None:
            return gfx_capability(self.arch)
        return None

    @property
    def capability_text(self) -> str | None:
        """The capability as `major.minor`, or None where the platform reports none."""
        cc = self.capability
        return f"{cc[0]}.{cc[1]}" if cc is not None else None


class GpuCatalog(Entry, frozen=True):
    gpus: list[GpuSpec]

    def __post_init__(self) -> None:
        _sorted_unique([g.id for g in self.gpus], "gpus")


# --- dtypes and quantization -------------------------------------------------------------------


class DtypeSpec(Entry, frozen=True):
    """A model dtype (`--dtype`): bytes per parameter and the capability it needs."""

    id: str
    bytes: float
    aliases: list[str] = msgspec.field(default_factory=list)
    needs_bf16: bool = False

    def __post_init__(self) -> None:
        _require(self.bytes in (2.0, 4.0), "a model dtype has 2 or 4 bytes per parameter")


class QuantMethodSpec(Entry, frozen=True):
    """A quantization method: packed weight bits plus per-group scales and zero points."""

    id: str
    weight_bits: int
    group_size: int | None = None
    scale_bytes: float = 0.0
    zero_bits: int = 0
    per_row_bytes: float = 0.0
    expert_hidden_multiple: int | None = None
    marlin_below_compute_capability: str | None = None
    marlin_expert_intermediate_multiple: int | None = None
    # vLLM runs this method's linear layers through the Marlin kernel (awq_marlin, gptq_marlin,
    # compressed-tensors wNa16), whose tile sizes bound the tensor-parallel split
    marlin_linear: bool = False
    aliases: list[str] = msgspec.field(default_factory=list)
    min_compute_capability: str | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        _require(self.weight_bits in (2, 3, 4, 8), "weight_bits must be 2, 3, 4 or 8")
        _require(self.group_size is None or self.group_size > 0, "group_size must be positive")
        _require(
            self.expert_hidden_multiple is None or self.expert_hidden_multiple > 0,
            "expert_hidden_multiple must be positive",
        )
        _require(
            (self.marlin_below_compute_capability is None)
            == (self.marlin_expert_intermediate_multiple is None),
            "marlin_below_compute_capability and marlin_expert_intermediate_multiple go together",
        )
        _require(
            self.marlin_below_compute_capability is None
            or bool(_CAPABILITY.match(self.marlin_below_compute_capability)),
            "marlin_below_compute_capability reads like 9.0",
        )
        _require(
            self.group_size is not None or (self.scale_bytes == 0 and self.zero_bits == 0),
            "scales and zero points need a group_size",
        )
        _require(
            self.min_compute_capability is None or bool(_CAPABILITY.match(self.min_compute_capability)),
            "min_compute_capability reads like 8.0",
        )

    @property
    def bytes_per_weight(self) -> float:
        """Packed weight plus its share of the group's scale and zero point."""
        per_group = 0.0
        if self.group_size is not None:
            per_group = (self.scale_bytes + self.zero_bits / 8) / self.group_size
        return self.weight_bits / 8 + per_group


class KvDtypeSpec(Entry, frozen=True):
    """A `--kv-cache-dtype` value: bytes per element (None = the model dtype) and extra scale bytes."""

    id: str
    bytes: float | None
    since: str
    scale_bytes_per_head: float = 0.0
    mla_bytes_per_token: int | None = None
    aliases: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _require(self.bytes is None or 0 < self.bytes <= 4, "bytes must be in (0, 4]")
        version_tuple(self.since)


class GgufTypeSpec(Entry, frozen=True):
    """A GGUF tensor type: its id in a file, weights per block and the bytes one block takes.

    `cast` types hold plain floats, which vLLM casts to the served dtype.
    """

    id: str
    ggml_type: int
    block_weights: int
    block_bytes: int
    cast: bool = False

    def __post_init__(self) -> None:
        _require(self.block_weights > 0 and self.block_bytes > 0, "blocks have weights and bytes")

    @property
    def bytes_per_weight(self) -> float:
        return self.block_bytes / self.block_weights


class GgufFileType(Entry, frozen=True):
    """A GGUF file type (Q4_K_M …): the tensor types llama.cpp's quantizer gives each kind of tensor."""

    id: str
    base: str
    output: str
    more_bits: str | None = None


class DtypeCatalog(Entry, frozen=True):
    dtypes: list[DtypeSpec]
    quantization: list[QuantMethodSpec]
    kv_cache_dtypes: list[KvDtypeSpec]
    gguf_types: list[GgufTypeSpec] = msgspec.field(default_factory=list)
    gguf_file_types: list[GgufFileType] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _sorted_unique([d.id for d in self.dtypes], "dtypes")
        _sorted_unique([q.id for q in self.quantization], "quantization")
        _sorted_unique([k.id for k in self.kv_cache_dtypes], "kv_cache_dtypes")
        _sorted_unique([t.id for t in self.gguf_types], "gguf_types")
        _sorted_unique([f.id for f in self.gguf_file_types], "gguf_file_types")
        _require(
            len({t.ggml_type for t in self.gguf_types}) == len(self.gguf_types), "ggml_type ids are unique"
        )
        known = {t.id for t in self.gguf_types}
        for f in self.gguf_file_types:
            for kind in (f.base, f.output, f.more_bits):
                _require(
                    kind is None or kind in known, f"gguf file type {f.id} names an unknown type {kind!r}"
                )


# --- engine facts ------------------------------------------------------------------------------


class Stepped(Entry, frozen=True):
    """A value that holds from release `since` until the next step."""

    since: str
    value: float

    def __post_init__(self) -> None:
        version_tuple(self.since)


class TierDefaults(Entry, frozen=True):
    """Scheduler defaults for the API server on devices of at least `min_total_gib`.

    `offline_max_num_batched_tokens` is what the `LLM(...)` class takes instead (vLLM's
    `UsageContext.LLM_CLASS`); absent where both entry points get the same value.
    """

    min_total_gib: float
    max_num_seqs: int
    max_num_batched_tokens: int
    offline_max_num_batched_tokens: int | None = None
    exclude: list[str] = msgspec.field(default_factory=list)


class DefaultsEra(Entry, frozen=True):
    since: str
    tiers: list[TierDefaults]

    def __post_init__(self) -> None:
        version_tuple(self.since)
        mins = [t.min_total_gib for t in self.tiers]
        _require(mins == sorted(mins, reverse=True) and mins[-1] == 0, "tiers go from largest to 0 GiB")


class OverheadFit(Entry, frozen=True):
    """One measured overhead as tools/fit_overheads.py fitted it: coefficients for its terms
    (service/budget/overheads.py says what each multiplies), the residual spread of the fit, and how
    many logged runs it stands on (0: too few in this era, so the fit pooled every era's runs)."""

    coefficients: list[float]
    spread_gib: float
    runs: int

    def __post_init__(self) -> None:
        _require(all(c >= 0 for c in self.coefficients), "overhead coefficients cannot be negative")
        _require(self.spread_gib >= 0 and self.runs >= 0, "spread and runs cannot be negative")


class OverheadEra(Entry, frozen=True):
    """What vLLM measures rather than computes, fitted to the logged runs of the releases in
    `versions`; `kv_spread_gib` is the spread of the KV memory predicted from them."""

    versions: VersionRange
    activation: OverheadFit
    non_torch: OverheadFit
    cuda_graph: OverheadFit
    kv_spread_gib: float
    kv_runs: int
    # V0: without chunked prefill the profile batch holds whole prompts, max(max_model_len,
    # max_num_batched_tokens) tokens; V1 always chunks, so it profiles max_num_batched_tokens
    whole_prompt_profile: bool = False
    # bytes per logits element (rows x vocabulary) the sampler warm-up holds at its peak, counted in
    # the era's source; tools/fit_overheads.py uses it where the era has no run bound by the sampler
    sampler_source_bytes: float | None = None

    def __post_init__(self) -> None:
        _require(
            self.sampler_source_bytes is None or self.sampler_source_bytes > 0,
            "sampler_source_bytes must be positive",
        )
        _require(len(self.activation.coefficients) == 3, "activation has 3 terms")
        _require(len(self.non_torch.coefficients) == 2, "non_torch has 2 terms")
        _require(len(self.cuda_graph.coefficients) == 2, "cuda_graph has 2 terms")


class EngineFacts(Entry, frozen=True):
    """Per-version engine behaviour (fact sheet §1–§4) the arithmetic depends on."""

    latest: str
    gpu_memory_utilization: list[Stepped]
    startup_check_since: str
    ceil_requested_since: str
    null_block_since: str
    null_block_check_since: str
    cudagraph_profiled_since: str
    long_context_chunked_prefill_since: str
    long_context_chunked_prefill_above_len: int
    older_default_release: str
    hybrid_kv_cache_since: str
    kv_cache_memory_bytes_since: str
    pool_tokens_per_group_since: str
    pool_tokens_from_concurrency_since: str
    mamba_cache_mode_since: str
    vocab_padding: int
    default_block_size: int
    marlin_min_thread_n: int
    marlin_min_thread_k: int
    defaults: list[DefaultsEra]
    overheads: list[OverheadEra]

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            if name.endswith(("_since", "_release")) or name == "latest":
                version_tuple(getattr(self, name))
        _require(
            version_tuple(self.older_default_release) < version_tuple(self.latest),
            "older_default_release must come before latest",
        )
        for steps in (self.gpu_memory_utilization, self.defaults):
            order = [version_tuple(s.since) for s in steps]
            _require(order == sorted(order), "version steps must be in release order")
        ranges = [era.versions for era in self.overheads]
        _require(bool(ranges) and ranges[0].introduced is None, "the first overhead era starts open")
        _require(ranges[-1].removed is None, "the last overhead era is open-ended")
        for before, after in zip(ranges, ranges[1:], strict=False):
            _require(before.removed == after.introduced, "overhead eras must follow one another")


# --- the whole catalog -------------------------------------------------------------------------


class GpuSpellings(msgspec.Struct, frozen=True, array_like=True):
    """One GPU's id, total memory, and its id and aliases under `fold_name` and `spaced_name`."""

    id: str
    total_gib: float
    folded: tuple[str, ...]
    spaced: tuple[str, ...]


class CatalogIndex(msgspec.Struct, frozen=True, kw_only=True):
    """Lookup tables by folded name (see `fold_name`), built once when the catalog is loaded."""

    models: dict[str, tuple[ModelSpec, QuantSpec | None]]
    model_names: list[str]
    gpus: dict[str, GpuSpec]
    gpu_names: list[str]
    # every GPU id and alias as one regular expression (source text: the index is cached as msgpack),
    # longest first so "A100-40G" is read before "A100", a separator typed or not, a plural allowed
    gpu_name_pattern: str
    # each GPU's id, memory and every spelling folded both ways a typed name is compared by
    # (`fold_name`, `spaced_name`), so a lookup never folds the whole catalog again
    gpu_spellings: list[GpuSpellings]


class Catalog(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the budget reads, with lookup tables built once at load."""

    models: ModelCatalog
    gpus: GpuCatalog
    dtypes: DtypeCatalog
    engine: EngineFacts
    index: CatalogIndex


_FOLD = first_use_re(r"[^a-z0-9.]+")
_NAME_PARTS = first_use_re(r"[-_ ]+")


def fold_name(name: str) -> str:
    """A name as the lookups compare it: lower case, punctuation and spaces dropped."""
    return _FOLD.sub("", name.lower())


def spaced_name(name: str) -> str:
    """A name lower-cased with each run of punctuation and spaces one space ("RTX 4060 Ti")."""
    return _FOLD.sub(" ", name.lower()).strip()


def gpu_short_name(name: str) -> str:
    """An NVML name without the vendor words vLLM and nvidia-smi may or may not print."""
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


def build_index(models: ModelCatalog, gpus: GpuCatalog) -> CatalogIndex:
    """Every id, Hugging Face id and alias (with and without its org prefix) → its record."""
    by_name: dict[str, tuple[ModelSpec, QuantSpec | None]] = {}
    names: list[str] = []
    by_id = {m.id: m for m in models.models}
    for m in models.models:
        for name in (m.id, m.hf_id, *m.aliases):
            by_name.setdefault(fold_name(name), (m, m.quantization))
            by_name.setdefault(fold_name(name.rsplit("/", 1)[-1]), (m, m.quantization))
        names.append(m.hf_id)
    for c in models.checkpoints:
        base = by_id[c.base]
        if c.intermediate_size is not None:
            base = msgspec.structs.replace(base, intermediate_size=c.intermediate_size)
        for name in (c.id, *c.aliases):
            by_name[fold_name(name)] = (base, c.quantization)
            by_name.setdefault(fold_name(name.rsplit("/", 1)[-1]), (base, c.quantization))
        names.append(c.id)
    by_gpu: dict[str, GpuSpec] = {}
    gpu_names: list[str] = []
    for g in gpus.gpus:
        for name in (g.id, *g.aliases):
            by_gpu.setdefault(fold_name(name), g)
            by_gpu.setdefault(fold_name(gpu_short_name(name)), g)
        gpu_names.append(g.id)
    spelled = sorted({name for g in gpus.gpus for name in (g.id, *g.aliases)}, key=len, reverse=True)
    parts = [r"[-_ ]?".join(map(re.escape, _NAME_PARTS.split(name))) for name in spelled]
    pattern = rf"(?<![A-Za-z0-9])(?:{'|'.join(parts)})(?=s?(?![A-Za-z0-9]))"
    return CatalogIndex(
        models=by_name,
        model_names=names,
        gpus=by_gpu,
        gpu_names=gpu_names,
        gpu_name_pattern=pattern,
        gpu_spellings=[
            GpuSpellings(
                g.id,
                g.total_gib,
                tuple(fold_name(n) for n in (g.id, *g.aliases)),
                tuple(spaced_name(n) for n in (g.id, *g.aliases)),
            )
            for g in gpus.gpus
        ],
    )


def _check_references(models: ModelCatalog, dtypes: DtypeCatalog, file: str) -> None:
    methods = {q.id for q in dtypes.quantization}
    for i, model in enumerate(models.models):
        if model.quantization is not None and model.quantization.method not in methods:
            raise PackError(
                file,
                f"names an unknown quantization method {model.quantization.method!r}",
                path=f"$.models[{i}].quantization.method",
                rule_id=model.id,
            )
    for i, ckpt in enumerate(models.checkpoints):
        if ckpt.quantization.method not in methods:
            raise PackError(
                file,
                f"names an unknown quantization method {ckpt.quantization.method!r}",
                path=f"$.checkpoints[{i}].quantization.method",
                rule_id=ckpt.id,
            )


def load_catalog(rules_dir: Path) -> Catalog:
    """Load and validate `rules_dir/catalog/*.yaml`; raises PackError naming the file, field and line."""
    folder = rules_dir / "catalog"
    models = load_yaml_file(folder / "models.yaml", ModelCatalog, root=rules_dir)
    gpus = load_yaml_file(folder / "gpus.yaml", GpuCatalog, root=rules_dir)
    dtypes = load_yaml_file(folder / "dtypes.yaml", DtypeCatalog, root=rules_dir)
    engine = load_yaml_file(folder / ENGINE_FILE, EngineFacts, root=rules_dir)
    _check_references(models, dtypes, "catalog/models.yaml")
    return Catalog(models=models, gpus=gpus, dtypes=dtypes, engine=engine, index=build_index(models, gpus))
