"""Wire types shared by the service, the agent, the bot and the CLI (DESIGN §3).

Field names, units and the phase vocabulary are contracts: other tools depend on them. Memory is
GiB (2**30 bytes) as floats, token counts are ints, ratios are floats in (0, 1].
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "BUDGET_LABELS",
    "FACT_LABELS",
    "MAX_TOP",
    "PHASES",
    "AgentRegistration",
    "Budget",
    "CalibrationFigure",
    "CalibrationGroup",
    "CalibrationReport",
    "CalibrationSample",
    "CommandIssue",
    "DiagnoseRequest",
    "Diagnosis",
    "Engine",
    "EstimateRequest",
    "Evidence",
    "Facts",
    "FigureSource",
    "Finding",
    "Fingerprint",
    "Fix",
    "GpuInfo",
    "GpuProcess",
    "GpuSummary",
    "MigInstance",
    "MisleadingFact",
    "OlderRelease",
    "OtherProcess",
    "Phase",
    "Preflight",
    "PreflightOutcome",
    "PreflightRequest",
    "Severity",
    "Snapshot",
    "SnapshotError",
    "SpeculativeConfig",
    "StartupCheck",
    "VllmServer",
    "Wire",
]

Phase = Literal[
    "startup_budget",
    "weights_oom",
    "kv_cache_capacity",
    "warmup_oom",
    "runtime_oom",
    "kv_preemption",
    "request_too_long",
    "profiling_inconsistent",
    "parallelism_config",
    "quantization_config",
    "dtype_unsupported",
    "host_oom",
    "not_memory",
    "no_failure",
]
PHASES: tuple[Phase, ...] = Phase.__args__  # type: ignore[attr-defined]

Severity = Literal["error", "warning", "info"]


class Wire(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every wire type: strict decoding, immutable values."""


# --- facts -------------------------------------------------------------------------------------


class OtherProcess(Wire, frozen=True):
    pid: int
    used_gib: float


class Facts(Wire, frozen=True, omit_defaults=True):
    """Every number a log, a command, a snapshot or the catalog states (DESIGN §3.2).

    Unset facts are omitted from JSON; `Diagnosis.fact_sources` says where each set one came from.
    """

    vllm_version: str | None = None
    gpu_name: str | None = None
    model: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    # `serve` (the API server) or `llm` (the LLM(...) class): their scheduler defaults differ
    entrypoint: Literal["serve", "llm"] | None = None
    free_gib: float | None = None
    total_gib: float | None = None
    requested_gib: float | None = None
    tried_to_allocate_gib: float | None = None
    process_in_use_gib: float | None = None
    torch_allocated_gib: float | None = None
    torch_reserved_unallocated_gib: float | None = None
    other_processes: list[OtherProcess] | None = None
    model_weights_gib: float | None = None
    # V1's memory profile line (0.10+): what start-up used besides weights and KV cache
    peak_activation_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None
    weights_non_torch_gib: float | None = None  # 0.33 prints weights and non-torch memory as one sum
    available_kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    max_concurrency: float | None = None
    estimated_max_model_len: int | None = None
    needed_kv_cache_gib: float | None = None
    requested_tokens: int | None = None
    context_limit: int | None = None
    num_attention_heads: int | None = None
    compute_capability: str | None = None
    # host memory (host_oom): the swap space vLLM sized for all GPUs of the node, and the host's RAM
    swap_space_gib: float | None = None
    host_total_gib: float | None = None


# --- diagnosis ---------------------------------------------------------------------------------


class Evidence(Wire, frozen=True):
    line: int
    text: str
    rule: str | None = None
    # how many matched lines read the same once per-process prefixes are stripped (every rank, every
    # retry): the line is shown once and counted
    repeats: int = 1


class Finding(Wire, frozen=True):
    rule: str
    phase: Phase
    severity: Severity
    line: int | None = None
    message: str | None = None


class Fix(Wire, frozen=True):
    id: str
    rank: int
    title: str
    change: str
    why: str
    tradeoff: str
    source: list[str] = msgspec.field(default_factory=list)
    exact: bool = True
    needs: list[str] = msgspec.field(default_factory=list)
    # for a fix without an exact value: what a person can give to get one, as a sentence
    to_make_exact: str | None = None


class Engine(Wire, frozen=True):
    name: Literal["vllm"] = "vllm"
    version: str | None = None
    assumed: bool = True
    range: str | None = None


class FigureSource(Wire, frozen=True, omit_defaults=True):
    kind: Literal["exact", "catalog", "estimated", "measured", "given"]
    uncertainty_gib: float | None = None
    note: str | None = None


class StartupCheck(Wire, frozen=True):
    free_gib: float | None
    requested_gib: float
    passes: bool | None
    max_passing_utilization: float | None = None


class OlderRelease(Wire, frozen=True):
    """The same estimate on the older release most servers still run, for a request naming no version.

    Its utilization default and whether CUDA graphs count against the KV cache differ from the newest
    release, so the answer may too; the bot asks for the version when `fits` differs.
    """

    vllm_version: str
    gpu_memory_utilization: float
    cuda_graphs_in_budget: bool
    fits: bool
    kv_cache_tokens: int
    max_model_len_fit: int
    verdict: str


class Budget(Wire, frozen=True):
    """Per-GPU memory budget (DESIGN §3.4), after the tensor/pipeline-parallel split."""

    model: str
    gpu: str
    gpus: int
    total_gib: float
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    block_size: int
    max_model_len: int
    vllm_version: str
    weights_gib: float
    kv_bytes_per_token: int
    kv_bytes_per_block: int
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    requested_gib: float
    available_kv_gib: float
    num_blocks: int
    kv_cache_tokens: int
    max_model_len_fit: int
    max_concurrency: float
    startup_check: StartupCheck
    fits: bool
    verdict: str
    min_gpu_memory_utilization: float | None = None
    min_tensor_parallel_size: int | None = None
    sources: dict[str, FigureSource] = msgspec.field(default_factory=dict)
    notes: list[str] = msgspec.field(default_factory=list)
    # no version was given: `vllm_version` is the catalog's newest, and `older_release` the answer
    # on the older default (None when the request named a version)
    version_assumed: bool = False
    older_release: OlderRelease | None = None
    data_parallel_size: int = 1
    # GPUs a MoE model's experts are split over (1 without --enable-expert-parallel)
    expert_parallel_size: int = 1
    # speculative decoding: the drafter's weights (inside weights_gib) and its KV cache per token
    # (inside kv_bytes_per_token)
    draft_weights_gib: float = 0.0
    draft_kv_bytes_per_token: int = 0
    # the vision encoder's profiling run above the decoder's activation peak (multimodal models)
    encoder_profile_gib: float = 0.0


# Words for people for the Budget's figures, so no reader (CLI, Slack) shows a field name.
BUDGET_LABELS: dict[str, str] = {
    "total_gib": "GPU memory",
    "weights_gib": "Weights",
    "kv_bytes_per_token": "KV cache per token",
    "kv_bytes_per_block": "KV cache per block",
    "activation_peak_gib": "Activation peak",
    "non_torch_gib": "Non-torch memory",
    "cuda_graph_gib": "CUDA graphs",
    "encoder_profile_gib": "Vision encoder profiling",
    "requested_gib": "Requested by vLLM",
    "available_kv_gib": "KV cache memory",
    "num_blocks": "KV cache blocks",
    "kv_cache_tokens": "KV cache tokens",
    "max_model_len_fit": "Longest context that fits",
    "max_concurrency": "Requests at full length",
    "min_gpu_memory_utilization": "Smallest GPU memory utilization that fits",
    "min_tensor_parallel_size": "Smallest TP that fits",
}


class Fingerprint(Wire, frozen=True):
    """What identifies a failure across hosts and threads (team memory): ids and rounded numbers only,
    never log text; `key` is a short hash of the rest."""

    key: str
    phase: Phase
    rule: str | None
    model: str | None
    gpu: str | None
    vllm_minor: str | None
    numbers: dict[str, float] = msgspec.field(default_factory=dict)


# The facts a reply shows, in order, under the words a person reads (never the wire names);
# a fact that is also a budget figure takes the budget's label.
FACT_LABELS: dict[str, str] = {
    "model": "Model",
    "gpu_name": "GPU",
    "vllm_version": "vLLM version",
    "tried_to_allocate_gib": "Tried to allocate",
    "free_gib": "Free on the GPU",
    "total_gib": BUDGET_LABELS["total_gib"],
    "requested_gib": BUDGET_LABELS["requested_gib"],
    "gpu_memory_utilization": "GPU memory utilization",
    "max_model_len": "Max model length",
    "estimated_max_model_len": "Length that fits",
    "model_weights_gib": BUDGET_LABELS["weights_gib"],
    "available_kv_cache_gib": "KV cache available",
    "needed_kv_cache_gib": "KV cache needed",
    "kv_cache_tokens": BUDGET_LABELS["kv_cache_tokens"],
    "tensor_parallel_size": "Tensor parallel",
    "data_parallel_size": "Data parallel",
    "enable_expert_parallel": "Expert parallel",
    "enable_prefix_caching": "Prefix caching",
    "dtype": "Dtype",
    "quantization": "Quantization",
    "kv_cache_dtype": "KV cache dtype",
    "entrypoint": "Started with",
    "requested_tokens": "Requested tokens",
    "context_limit": "Context limit",
    "process_in_use_gib": "This process holds",
    "other_processes": "Other processes",
}


class MisleadingFact(Wire, frozen=True):
    """A figure a known vLLM logging bug makes misleading (rules/misleading.yaml): kept in `facts`
    as printed; unless `usable`, the budget and the fixes do not compute with it."""

    fact: str
    bug: str
    note: str
    source: str
    usable: bool = False


class Diagnosis(Wire, frozen=True):
    phase: Phase
    confidence: float
    title: str
    summary: str
    evidence: list[Evidence]
    facts: Facts
    findings: list[Finding]
    budget: Budget | None
    fixes: list[Fix]
    rules_version: str
    engine: Engine
    fact_sources: dict[str, str] = msgspec.field(default_factory=dict)
    corrected_command: str | None = None
    fingerprint: Fingerprint | None = None
    misleading: list[MisleadingFact] = msgspec.field(default_factory=list)


# --- snapshot (agent) --------------------------------------------------------------------------


class GpuProcess(Wire, frozen=True):
    pid: int
    name: str | None
    cmdline: str | None
    used_gib: float | None
    container: str | None = None


class MigInstance(Wire, frozen=True):
    index: int
    uuid: str
    name: str
    total_gib: float
    used_gib: float
    free_gib: float


class GpuInfo(Wire, frozen=True):
    index: int
    uuid: str
    name: str
    total_gib: float
    used_gib: float
    free_gib: float
    reserved_gib: float | None
    utilization_pct: int | None
    compute_capability: str | None
    mig_mode: bool | None
    processes: list[GpuProcess] = msgspec.field(default_factory=list)
    memory_api: Literal["v2", "v1", "dcgm"] | None = None
    mig_instances: list[MigInstance] = msgspec.field(default_factory=list)


class VllmServer(Wire, frozen=True):
    url: str
    model: str | None
    kv_cache_usage: float | None
    requests_running: int | None
    requests_waiting: int | None
    preemptions_total: int | None
    metrics_era: Literal["v0", "v1"] | None = None
    # The served model as read from disk (its command line names the path or HF cache entry), so a
    # budget works for local and private models with no network.
    model_path: str | None = None
    # Any rather than object: the pack cache and OpenAPI need a JSON schema for it, and object has none
    model_config: dict[str, Any] | None = None
    model_parameters: dict[str, int] | None = None
    # what the server's `GET /version` answered: the version pre-flight lints a command for
    version: str | None = None


class SnapshotError(Wire, frozen=True):
    source: str
    reason: str


class Snapshot(Wire, frozen=True):
    host: str
    captured_at: str
    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuInfo]
    vllm: list[VllmServer] = msgspec.field(default_factory=list)
    errors: list[SnapshotError] = msgspec.field(default_factory=list)
    pids_resolvable: bool | None = None


class GpuSummary(Wire, frozen=True):
    index: int
    name: str
    total_gib: float
    free_gib: float


class AgentRegistration(Wire, frozen=True):
    """What an agent writes into the registry under its host name; read by the bot."""

    host: str
    url: str
    gpus: list[GpuSummary]
    registered_at: str
    version: str


# --- requests ----------------------------------------------------------------------------------


MAX_TOP = 50  # fixes one answer may carry


class DiagnoseRequest(Wire, frozen=True):
    log: str
    model: str | None = None
    gpu: str | None = None
    command: str | None = None
    vllm_version: str | None = None
    snapshot: Snapshot | None = None
    top: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP)] = 5


class SpeculativeConfig(Wire, frozen=True):
    """vLLM's `--speculative-config`: the method, how many tokens it drafts, and the draft model.

    `mtp` (and vLLM's `<family>_mtp` names) use the checkpoint's own multi-token-prediction layers;
    methods with a `model` load that draft model beside the target; `ngram`/`suffix` need no memory.
    """

    method: str | None = None
    num_speculative_tokens: int = 1
    model: str | None = None


class EstimateRequest(Wire, frozen=True):
    model: str | None = None
    config: dict[str, object] | None = None
    gpu: str | None = None
    gpu_total_gib: float | None = None
    gpus: int = 1
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    free_gib: float | None = None
    vllm_version: str | None = None
    enforce_eager: bool | None = None
    # How the engine is started: `serve` (`vllm serve`, the API server: the default) or `llm` (the
    # `LLM(...)` class), whose scheduler defaults batch more tokens on the same GPU.
    entrypoint: Literal["serve", "llm"] | None = None
    # data-parallel engines (each its own KV cache); with enable_expert_parallel a MoE model's experts
    # are split whole over the TP × DP GPUs rather than sliced by TP
    data_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    speculative_config: SpeculativeConfig | None = None
    # --enable-prefix-caching (None: vLLM's default, which is off for linear-attention/Mamba hybrids);
    # a hybrid with it keeps a second state page per request (mamba_cache_mode "align")
    enable_prefix_caching: bool | None = None
    # Parameter counts per safetensors dtype read from the checkpoint's headers (e.g. {"BF16": 8030261248});
    # with it the weights are the checkpoint's bytes, not the architecture's parameter count.
    parameters: dict[str, int] | None = None


class PreflightRequest(Wire, frozen=True):
    """Will `command` start on the host whose `snapshot` this is (or on an empty `gpu`), now?"""

    command: Annotated[str, msgspec.Meta(min_length=1, max_length=65536)]
    snapshot: Snapshot | None = None
    gpu: str | None = None
    model: str | None = None
    vllm_version: str | None = None
    top: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP)] = 3
    # for a model the catalog lacks, as in EstimateRequest: its config.json and checkpoint totals
    config: dict[str, object] | None = None
    parameters: dict[str, int] | None = None


# --- pre-flight ----------------------------------------------------------------------------------

# starts; rejected (vLLM's argument parser refuses a flag); refused (the startup check); fails (later)
PreflightOutcome = Literal["starts", "rejected", "refused", "fails"]


class CommandIssue(Wire, frozen=True):
    """A flag of the command that vLLM does not accept in the version it is checked against."""

    rule: str
    flag: str
    severity: Severity
    message: str


class Preflight(Wire, frozen=True):
    """The answer of `POST /v1/preflight` and `vramdoc preflight --json`."""

    outcome: PreflightOutcome
    phase: Phase | None
    verdict: str
    host: str | None
    gpus: list[int]
    vllm_version: str
    version_source: Literal["request", "snapshot", "assumed"]
    issues: list[CommandIssue]
    budget: Budget
    fixes: list[Fix]
    corrected_command: str | None
    uncertain: list[str]


# --- calibration -------------------------------------------------------------------------------


class CalibrationSample(Wire, frozen=True):
    """One pasted start-up: its configuration, what vLLM measured and what the estimator predicted
    for the same inputs (GiB per GPU, keyed by Budget field). Numbers and ids only, never log text."""

    key: str
    model: str
    family: str | None
    gpu: str
    total_gib: float
    vllm_version: str | None
    vllm_minor: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool | None = None
    measured: dict[str, float] = msgspec.field(default_factory=dict)
    predicted: dict[str, float] = msgspec.field(default_factory=dict)


class CalibrationFigure(Wire, frozen=True):
    """The estimator's error on one figure: predicted − measured, GiB."""

    samples: int
    mean_error_gib: float
    mean_abs_error_gib: float
    max_abs_error_gib: float


class CalibrationGroup(Wire, frozen=True):
    """The error by model family, GPU and vLLM minor; `enough` once estimates cite it."""

    family: str | None
    gpu: str
    vllm_minor: str | None
    samples: int
    enough: bool
    figures: dict[str, CalibrationFigure]


class CalibrationReport(Wire, frozen=True):
    """`GET /v1/calibration`: every group, and how many samples a group needs before it is cited."""

    min_samples: int
    samples: int
    groups: list[CalibrationGroup]
