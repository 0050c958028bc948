"""`vramdoc estimate`: the memory budget of a model on a GPU, readable or as Budget JSON (DESIGN §3.4).

Exit 0 when it fits, 1 when it does not, 2 for bad input (one sentence on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import msgspec

from service.budget import estimate
from service.errors import InputError, InvalidConfigError, PackError
from service.models.chain import DiskModelCache, ModelResolver, ModelSettings, cite
from service.packs import default_rules_dir
from service.packs.catalog import Catalog, load_catalog
from service.quantities import HumanNumberError, command_int
from service.redacted import redacted_estimate
from service.schemas import BUDGET_LABELS, Budget, EstimateRequest, SpeculativeConfig

__all__ = ["human_bytes", "human_tokens", "model_cache", "parse_human_int", "render", "run"]

_BAR_WIDTH = 60


def parse_human_int(text: str, flag: str) -> int:
    """A flag value by vLLM's rule (service.quantities): `16M` = 16·2^20, `16m` = 16·10^6."""
    try:
        return command_int(text)
    except HumanNumberError as exc:
        raise InvalidConfigError(f"{flag} {exc}.") from exc


def human_bytes(n: float) -> str:
    """`16M`, `128K`, `14.99G` — binary units, as vLLM accepts them back."""
    for unit, size in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.2f}{unit}"
    return f"{n:.0f}"


def human_tokens(n: int) -> str:
    """`32k`, `1.3k`, `512` for token counts."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M".replace(".0M", "M")
    if n >= 1000:
        return f"{n / 1000:.1f}k".replace(".0k", "k")
    return str(n)


_SPECULATIVE_EXAMPLE = '{"method": "mtp", "num_speculative_tokens": 2}'


def _request(args: argparse.Namespace) -> EstimateRequest:
    config: dict[str, object] | None = None
    if args.config:
        try:
            raw = Path(args.config).read_bytes()
        except OSError as exc:
            raise InvalidConfigError(
                f"The config file {args.config} cannot be read ({exc.strerror})."
            ) from exc
        try:
            config = msgspec.json.decode(raw, type=dict[str, object])
        except msgspec.DecodeError as exc:
            raise InvalidConfigError(f"The config file {args.config} is not a JSON object ({exc}).") from exc
    speculative = None
    if getattr(args, "speculative_config", None):
        try:
            speculative = msgspec.json.decode(args.speculative_config, type=SpeculativeConfig)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidConfigError(
                f"--speculative-config must be JSON such as {_SPECULATIVE_EXAMPLE} ({exc})."
            ) from exc
    max_len = args.max_model_len
    if max_len is not None and max_len.strip().lower() in ("-1", "auto"):
        max_len = None
    return EstimateRequest(
        model=args.model,
        config=config,
        gpu=args.gpu,
        gpus=args.gpus,
        dtype=args.dtype,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=parse_human_int(max_len, "--max-model-len") if max_len else None,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=(
            parse_human_int(args.max_num_batched_tokens, "--max-num-batched-tokens")
            if args.max_num_batched_tokens
            else None
        ),
        block_size=args.block_size,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        data_parallel_size=args.data_parallel_size,
        enable_expert_parallel=True if getattr(args, "enable_expert_parallel", False) else None,
        speculative_config=speculative,
        kv_cache_memory_bytes=(
            parse_human_int(args.kv_cache_memory_bytes, "--kv-cache-memory-bytes")
            if args.kv_cache_memory_bytes
            else None
        ),
        free_gib=args.free_gib,
        vllm_version=args.vllm_version,
        enforce_eager=True if getattr(args, "enforce_eager", False) else None,
        entrypoint=getattr(args, "entrypoint", None),
    )


def _bar(budget: Budget) -> list[str]:
    """A stacked bar of the GPU: weights, activation, non-torch, graphs, KV cache, the rest."""
    graph_source = budget.sources.get("cuda_graph_gib")
    graphs = budget.cuda_graph_gib if graph_source is None or graph_source.note is None else 0.0
    parts = [
        ("W", "weights", budget.weights_gib),
        ("A", "activation peak", budget.activation_peak_gib),
        ("N", "non-torch", budget.non_torch_gib),
        ("G", "CUDA graphs", graphs),
        ("K", "KV cache", max(budget.available_kv_gib, 0.0)),
    ]
    used = sum(p[2] for p in parts)
    parts.append((".", "not requested", max(budget.total_gib - used, 0.0)))
    scale = _BAR_WIDTH / max(budget.total_gib, used)
    bar = "".join(symbol * round(size * scale) for symbol, _, size in parts)
    legend = "  ".join(f"{symbol} {label} {size:.2f}" for symbol, label, size in parts if size > 0)
    return [f"[{bar[:_BAR_WIDTH].ljust(_BAR_WIDTH)}] {budget.total_gib:g} GiB", f" {legend} (GiB)"]


def render(budget: Budget) -> str:
    """The budget for a terminal: header, bar, KV pool, checks and the verdict."""
    quant = f", {budget.quantization}" if budget.quantization else ""
    data = f" DP {budget.data_parallel_size}" if budget.data_parallel_size > 1 else ""
    experts = f" EP {budget.expert_parallel_size}" if budget.expert_parallel_size > 1 else ""
    lines = [
        f"{budget.model} on {budget.gpus} × {budget.gpu} ({budget.total_gib:g} GiB), "
        f"vLLM {budget.vllm_version}",
        f"dtype {budget.dtype}{quant}, KV {budget.kv_cache_dtype}, TP {budget.tensor_parallel_size} "
        f"PP {budget.pipeline_parallel_size}{data}{experts}, block {budget.block_size}, max_model_len "
        f"{budget.max_model_len:,} ({human_tokens(budget.max_model_len)})",
        f"--gpu-memory-utilization {budget.gpu_memory_utilization} → requested "
        f"{budget.requested_gib:.2f} GiB per GPU",
        *_bar(budget),
        f"KV cache: {human_bytes(budget.kv_bytes_per_token)}/token, "
        f"{human_bytes(budget.kv_bytes_per_block)}/block, "
        f"{budget.num_blocks:,} blocks, {budget.kv_cache_tokens:,} tokens "
        f"({human_tokens(budget.kv_cache_tokens)}), {budget.max_concurrency:.2f}x concurrency",
        f"{BUDGET_LABELS['max_model_len_fit']}: {budget.max_model_len_fit:,} "
        f"({human_tokens(budget.max_model_len_fit)}) tokens",
    ]
    if budget.min_gpu_memory_utilization is not None:
        lines.append(f"{BUDGET_LABELS['min_gpu_memory_utilization']}: {budget.min_gpu_memory_utilization}")
    if budget.min_tensor_parallel_size is not None:
        lines.append(f"{BUDGET_LABELS['min_tensor_parallel_size']}: {budget.min_tensor_parallel_size}")
    check = budget.startup_check
    if check.free_gib is not None:
        state = {True: "passes", False: "FAILS", None: "not checked by this version"}[check.passes]
        lines.append(
            f"startup check: {check.free_gib} GiB free vs {check.requested_gib} GiB requested: {state}"
            + (f" (≤ {check.max_passing_utilization} passes)" if check.max_passing_utilization else "")
        )
    origin = budget.sources.get("model")
    if origin is not None and origin.note:
        lines.append(f"model from: {origin.note}")
    estimated = [k for k, s in budget.sources.items() if s.kind == "estimated"]
    if estimated:
        spread = budget.sources.get("available_kv_gib")
        plus = f" (KV memory ± {spread.uncertainty_gib:.2f} GiB)" if spread and spread.uncertainty_gib else ""
        named = ", ".join(BUDGET_LABELS.get(name, name) for name in estimated)
        lines.append(f"estimated: {named}{plus}")
    lines.extend(f"note: {n}" for n in budget.notes)
    lines.append(("FITS: " if budget.fits else "DOES NOT FIT: ") + budget.verdict)
    return "\n".join(lines)


def _catalog() -> Catalog:
    """The catalog from VRAMDOC_RULES_DIR, else the repository's rules/ (as load_packs finds it)."""
    return load_catalog(default_rules_dir())


def model_cache() -> DiskModelCache:
    """Resolved models under VRAMDOC_MODEL_CACHE_DIR, else the user's cache folder."""
    folder = os.environ.get("VRAMDOC_MODEL_CACHE_DIR")
    if folder:
        return DiskModelCache(Path(folder))
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return DiskModelCache(Path(base) / "vramdoc" / "models")


def _estimate(request: EstimateRequest, catalog: Catalog) -> Budget:
    """Resolve the model through the chain (catalog, config, local path, HF cache, Hub), then size it."""
    resolver = ModelResolver(ModelSettings.from_env(), model_cache())
    request, resolved = resolver.prepare(request, catalog)
    return cite(estimate(request, catalog), resolved)


def run(args: argparse.Namespace) -> int:
    """Print the budget; exit 0 fits, 1 does not fit, 2 input error."""
    try:
        budget = _estimate(redacted_estimate(_request(args)), _catalog())
    except InputError as exc:
        print(f"vramdoc estimate: {exc}", file=sys.stderr)
        return 2
    except PackError as exc:
        print(f"vramdoc estimate: the rule packs cannot be loaded: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(budget).decode() + "\n")
    else:
        print(render(budget))
    return 0 if budget.fits else 1
