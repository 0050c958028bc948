"""Calculators for a KV cache too small for one request or for the load."""

from __future__ import annotations

from service.fixes.calculators import readings
from service.fixes.calculators.parallel import accepted_sizes, plan_tensor_parallel
from service.fixes.calculators.readings import gib, tokens
from service.fixes.calculators.warmup import lower_by_shortfall
from service.fixes.calculators.weights import tensor_parallel_proposal
from service.fixes.context import FixContext, Proposal
from service.fixes.limits import (
    STARTUP_MARGIN_GIB,
    max_passing_utilization,
    round_up,
)

_KV_HEADROOM_GIB = 0.1
_MAX_UTILIZATION = 0.98


def _kv_need_and_have(ctx: FixContext) -> tuple[float, float, tuple[str, ...]] | None:
    """KV memory one request at max_model_len needs, and what is available, in GiB."""
    f = ctx.facts
    if f.needed_kv_cache_gib is not None and f.available_kv_cache_gib is not None:
        return f.needed_kv_cache_gib, f.available_kv_cache_gib, ctx.sources_of("needed_kv_cache_gib")
    b = ctx.budget
    if b is not None and not readings.no_cache_blocks(ctx):  # the log's measurement beats the estimate
        need = (b.kv_bytes_per_token * b.max_model_len + b.kv_bytes_per_block) / 2**30
        return need, b.available_kv_gib, ("budget",)
    return None


def _scaled_length(configured: int, need_gib: float, have_gib: float, block_size: int | None) -> int:
    """The longest length whose KV need fits `have`, scaling the logged need of `configured` tokens.

    The log rounds both figures to 0.01, so the smaller bound of each is taken, and one block is
    left spare for vLLM's null block: the result fits however the figures were rounded.
    """
    block = block_size or 16
    tokens_fit = configured * max(have_gib - 0.005, 0.0) / (need_gib + 0.005)
    return max(0, int(tokens_fit // block) * block - block)


def _too_long_for_cache(ctx: FixContext) -> bool:
    """vLLM said one request of max_model_len does not fit (its figures may be cut off)."""
    texts = [x.rule for x in ctx.findings] + list(ctx.lines)
    return any("max-seq-len" in t or "max seq len" in t or "stored in KV cache" in t for t in texts)


def fit_max_model_len(ctx: FixContext) -> list[Proposal]:
    """`--max-model-len` at most the longest request the KV cache holds (vLLM's estimate or the budget's)."""
    f = ctx.facts
    if ctx.flag is None or (f.available_kv_cache_gib is not None and f.available_kv_cache_gib <= 0):
        return []
    configured = f.max_model_len or (ctx.budget.max_model_len if ctx.budget is not None else None)
    estimate, source = f.estimated_max_model_len, ctx.source("estimated_max_model_len")
    if estimate is None and f.kv_cache_tokens is not None:
        # V0's "maximum number of tokens that can be stored in KV cache"; V1 counts the null block
        null_block = f.block_size or 16 if ctx.version is None or ctx.version >= (0, 8, 5) else 0
        estimate, source = f.kv_cache_tokens - null_block, ctx.source("kv_cache_tokens")
    scaled = False
    if estimate is None and configured and f.needed_kv_cache_gib and f.available_kv_cache_gib:
        estimate = _scaled_length(configured, f.needed_kv_cache_gib, f.available_kv_cache_gib, f.block_size)
        source, scaled = ctx.source("needed_kv_cache_gib"), True
    if estimate is None and ctx.budget is not None:
        estimate, source = ctx.budget.max_model_len_fit, "budget"
        if configured is not None and estimate >= configured and _too_long_for_cache(ctx):
            estimate = None  # the log says it does not fit: the log outranks the estimate
    if estimate is None:
        if readings.no_cache_blocks(ctx) or not (f.needed_kv_cache_gib or _too_long_for_cache(ctx)):
            return []  # "No available memory for the cache blocks": no length is short enough
        return [
            Proposal(
                change=f"lower {ctx.flag} below {configured}" if configured else f"lower {ctx.flag}",
                why="The KV cache cannot hold one request of the configured length; a shorter one fits.",
                exact=False,
                needs=("estimated_max_model_len",),
                likelihood=0.7,
            )
        ]
    if estimate <= 0 or (configured is not None and estimate >= configured):
        return []
    why = f"The KV cache holds one request of at most {tokens(estimate)} tokens"
    why += f" ({source})" if source.startswith("line") else ""
    if scaled:
        why = (
            f"{gib(f.available_kv_cache_gib or 0)} of KV cache holds {gib(f.needed_kv_cache_gib or 0)} worth "
            f"of {tokens(configured or 0)} tokens in proportion, rounded down with a block to spare: "
            f"{tokens(estimate)} tokens"
        )
    if configured is not None:
        why += f"; {tokens(configured)} does not fit."
    else:
        why += "."
    if all(v is None or v >= (0, 14, 0) for v in ctx.span):
        why += f" `{ctx.flag} auto` (vLLM 0.14+) picks the same fit at every start."
    return [Proposal(change=f"{ctx.flag} {estimate}", why=why, source=(source,), likelihood=0.95)]


def _startup_ceiling(ctx: FixContext) -> tuple[float | None, str]:
    """The highest utilization that would still pass the startup check, from free memory."""
    f = ctx.facts
    total, _ = readings.total_gib(ctx)
    free = f.free_gib
    source = ctx.source("free_gib")
    if free is None and ctx.gpu is not None and ctx.phase in readings.STARTUP_PHASES:
        free, source = ctx.gpu.free_gib, "snapshot"
    elif free is None and ctx.gpu is not None and total is not None:
        # serving: at a restart vLLM would find what is free now plus what it holds itself
        current, _ = readings.utilization(ctx)
        free, source = ctx.gpu.free_gib + current * total, "snapshot"
    if free is None or total is None:
        return None, ""
    best = max_passing_utilization(free, total)
    return (min(best, _MAX_UTILIZATION) if best is not None else None), source


def _raise_without_numbers(
    ctx: FixContext, current: float, source: str, total: float | None
) -> list[Proposal]:
    """No blocks and no free-memory figure: the advice holds, the value needs what is free."""
    if current >= _MAX_UTILIZATION - 0.03:
        return []  # already near the top: the weights or activations are what must shrink
    f = ctx.facts
    assumed = " (the default, as the log states none)" if source == "default" else ""
    why = f"At {current:.2f}{assumed} nothing is left for KV-cache blocks after the weights and activations"
    if f.model_weights_gib is not None and total is not None:
        why += f" ({gib(f.model_weights_gib)} of weights in the {gib(current * total)} vLLM may use)"
    elif f.model_weights_gib is not None:
        why += f" ({gib(f.model_weights_gib)} of weights)"
    why += "; raise it as far as free memory allows (vLLM's default is 0.90 or 0.92)."
    return [
        Proposal(
            change=f"raise {ctx.flag} above {current:.2f}",
            why=why,
            source=(source,),
            exact=False,
            needs=("free_gib", "total_gib"),
            likelihood=0.9,
        )
    ]


def raise_utilization(ctx: FixContext) -> list[Proposal]:
    """Give the KV cache more of the GPU, only as far as free memory still passes the startup check."""
    total, total_source = readings.total_gib(ctx)
    if ctx.flag is None:
        return []
    current, current_source = readings.utilization(ctx)
    ceiling, free_source = _startup_ceiling(ctx)
    if kv_bytes_given(ctx):
        return []  # --kv-cache-memory-bytes overrides the utilization
    if (
        ctx.phase == "kv_cache_capacity"
        and readings.no_cache_blocks(ctx)
        and (total is None or ceiling is None)
    ):
        return _raise_without_numbers(ctx, current, current_source, total)
    if total is None:
        return []
    kv = _kv_need_and_have(ctx)
    kv_source: tuple[str, ...] = ()
    if ctx.phase == "kv_cache_capacity" and kv is None:
        if ceiling is None:
            return []
        target = ceiling
        why = (
            f"No memory is left for KV-cache blocks at {current:.2f}; {target:.2f} gives "
            f"them {gib((target - current) * total)}."
        )
    elif ctx.phase == "kv_cache_capacity" and kv is not None:
        need, have, kv_source = kv
        target = round_up(current + (need - have + _KV_HEADROOM_GIB) / total)
        why = (
            f"One request needs {gib(need)} of KV cache and {gib(have)} is available; "
            f"{target:.2f} adds {gib((target - current) * total)}."
        )
    else:
        if ceiling is None:
            return []
        target = ceiling
        why = (
            f"Raising {current:.2f} to {target:.2f} gives the KV cache "
            f"{gib((target - current) * total)} more."
        )
        if ctx.budget is not None and ctx.budget.kv_bytes_per_token > 0:
            extra_tokens = int((target - current) * total * 2**30 / ctx.budget.kv_bytes_per_token)
            why += f" That is about {tokens(extra_tokens)} more tokens in flight."
    if target <= current:
        return []
    if ceiling is None:
        if target > _MAX_UTILIZATION:
            return []
        return [
            Proposal(
                change=f"{ctx.flag} {target:.2f}",
                why=why + " Check that this much is free on the GPU before starting.",
                source=(current_source, total_source, *kv_source),
                exact=False,
                needs=("free_gib",),
                likelihood=0.5,
            )
        ]
    if target > ceiling:
        return []
    why += f" Free memory allows up to {ceiling:.2f}."
    return [
        Proposal(
            change=f"{ctx.flag} {target:.2f}",
            why=why,
            source=(current_source, total_source, free_source, *kv_source),
            likelihood=0.9,
        )
    ]


def fp8_kv_cache(ctx: FixContext) -> list[Proposal]:
    """An fp8 KV cache stores twice the tokens, on GPUs with native fp8 only."""
    f = ctx.facts
    if ctx.flag is None or (f.kv_cache_dtype or "auto").startswith(("fp8", "nvfp4", "int")):
        return []
    gpu = f.gpu_name or (ctx.budget.gpu if ctx.budget is not None else None)
    supported = ctx.catalog.gpu_supports_fp8(gpu) if ctx.catalog is not None and gpu else None
    source = "catalog"
    if supported is None and (cc := readings.compute_capability(ctx)) is not None:
        supported, source = cc >= (8, 9), ctx.source("compute_capability")
    if not supported:
        return []
    why = "fp8 stores each KV element in one byte instead of two, so the same memory holds twice the tokens."
    likelihood = 0.8
    kv = _kv_need_and_have(ctx)
    rerun = _rerun_fit(ctx, kv_cache_dtype="fp8")
    if rerun is not None:
        fit, configured = rerun
        why += f" The budget re-run holds one request of up to {tokens(fit)} tokens."
        likelihood = 0.8 if fit >= configured else 0.4
        source = "budget"
    elif ctx.phase == "kv_cache_capacity" and kv is not None:
        need, have, _ = kv
        if need / 2 <= have:
            why += f" One request then needs about {gib(need / 2)}, within the {gib(have)} available."
        else:
            why += (
                f" One request would still need about {gib(need / 2)}, more than the {gib(have)} available."
            )
            likelihood = 0.3
    return [Proposal(change=f"{ctx.flag} fp8", why=why, source=(source,), likelihood=likelihood)]


def _rerun_fit(
    ctx: FixContext, *, kv_cache_dtype: str | None = None, tensor_parallel_size: int | None = None
) -> tuple[int, int] | None:
    """The budget's longest request after one change, and the configured length, when both are known."""
    if ctx.catalog is None or ctx.budget is None:
        return None
    rerun = ctx.catalog.reestimate(
        ctx.budget, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size
    )
    return (rerun.max_model_len_fit, ctx.budget.max_model_len) if rerun is not None else None


def kv_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """The next accepted tensor-parallel size: each GPU then holds a share of the KV cache.

    For a cache too small for one request the size is re-estimated: the smallest that holds the
    configured length, or the GPUs present with the length their re-run holds.
    """
    if ctx.flag is None:
        return []
    current = readings.tensor_parallel(ctx)
    plan = plan_tensor_parallel(ctx, current) if ctx.phase == "kv_cache_capacity" else None
    if plan is not None and plan.rerun is not None:
        lead = "Each GPU then holds a share of the weights and of the KV heads."
        return [tensor_parallel_proposal(ctx, plan, lead)]
    found = accepted_sizes(ctx)
    if found is None:
        return []
    sizes, rule = found
    limit = ctx.gpus_present
    larger = [d for d in sizes if d > current and (limit is None or d <= limit)]
    if not larger:
        return []
    tp = larger[0]
    heads = readings.heads(ctx)
    accepted = (
        f"{tp} divides the {heads} attention heads"
        if rule != "catalog" and heads
        else (f"vLLM accepts TP {tp} for this model")
    )
    why = (
        f"With {tp} GPUs each holds 1/{tp} of the weights and of the KV heads, so more memory per GPU "
        f"is left for the KV cache; {accepted}."
    )
    likelihood = 0.8 if limit is not None else 0.5
    if limit is None:
        why += f" This needs {tp} GPUs."
    sources = (rule,) if rule == "catalog" else ctx.sources_of("num_attention_heads")
    if ctx.phase == "kv_cache_capacity" and (rerun := _rerun_fit(ctx, tensor_parallel_size=tp)) is not None:
        fit, configured = rerun
        why += f" The budget re-run holds one request of up to {tokens(fit)} tokens"
        why += "." if fit >= configured else f", fewer than {tokens(configured)}: not enough on its own."
        likelihood *= 1.0 if fit >= configured else 0.5
        sources += ("budget",)
    return [Proposal(change=f"{ctx.flag} {tp}", why=why, source=sources, likelihood=likelihood)]


def kv_bytes_given(ctx: FixContext) -> bool:
    """The user fixed the KV size with --kv-cache-memory-bytes, so utilization does not size it."""
    if ctx.command is not None and ctx.command.has("--kv-cache-memory-bytes"):
        return True
    return any("as specified by kv_cache_memory_bytes" in line for line in ctx.lines)


def _raise_kv_bytes(ctx: FixContext, flag: str) -> list[Proposal]:
    """The KV size the user set, raised to what one request of max_model_len needs."""
    f = ctx.facts
    b = ctx.budget
    if b is not None:
        need = b.kv_bytes_per_token * b.max_model_len + b.kv_bytes_per_block
        source, length = "budget", b.max_model_len
    elif f.needed_kv_cache_gib is not None and f.max_model_len is not None:
        # the log rounds to 0.01 GiB: take the top of that interval, plus 1 % for the null block
        need = int((f.needed_kv_cache_gib + 0.005) * 2**30 * 1.01)
        source, length = ctx.source("needed_kv_cache_gib"), f.max_model_len
    else:
        return []
    value = -(-need // 2**20) * 2**20
    why = (
        f"--kv-cache-memory-bytes fixes the KV cache size, so utilization cannot grow it; one request "
        f"of {tokens(length)} tokens needs {gib(need / 2**30)}, so {value // 2**20} MiB holds it."
    )
    return [Proposal(change=f"{flag} {value}", why=why, source=(source,), likelihood=0.9)]


def kv_cache_memory_bytes(ctx: FixContext) -> list[Proposal]:
    """Size the KV cache explicitly (vLLM 0.10.2+): one full-length request, checked against free memory."""
    f = ctx.facts
    if ctx.flag is None:
        return []
    if ctx.phase == "profiling_inconsistent":
        if f.available_kv_cache_gib is None or f.available_kv_cache_gib <= 0:
            return [
                Proposal(
                    change=f"{ctx.flag} <bytes from a clean start's 'Available KV cache memory'>",
                    why="A fixed KV size skips the memory profiling that other processes disturb.",
                    exact=False,
                    needs=("available_kv_cache_gib",),
                    likelihood=0.6,
                )
            ]
        value = int(f.available_kv_cache_gib * 2**30) // 2**20 * 2**20
        why = (
            f"A fixed KV size of {gib(value / 2**30)} (what vLLM measured before) skips the memory "
            "profiling that other processes disturb."
        )
        return [
            Proposal(
                change=f"{ctx.flag} {value}",
                why=why,
                source=ctx.sources_of("available_kv_cache_gib"),
                likelihood=0.7,
            )
        ]
    if kv_bytes_given(ctx):
        return _raise_kv_bytes(ctx, ctx.flag)
    b = ctx.budget
    if b is None:
        return []
    need = b.kv_bytes_per_token * b.max_model_len + b.kv_bytes_per_block
    value = -(-need // 2**20) * 2**20
    free = f.free_gib if f.free_gib is not None else b.startup_check.free_gib
    consumed = b.weights_gib + readings.per_gpu_reserve(ctx)
    why = (
        f"{gib(value / 2**30)} holds one request of {tokens(b.max_model_len)} "
        "tokens regardless of utilization."
    )
    if free is None:
        return [
            Proposal(
                change=f"{ctx.flag} {value}",
                why=why,
                source=("budget",),
                exact=False,
                needs=("free_gib",),
                likelihood=0.4,
            )
        ]
    if consumed + value / 2**30 + STARTUP_MARGIN_GIB > free:
        return []
    why += f" With {gib(consumed)} for weights and activations it fits the {gib(free)} free."
    return [Proposal(change=f"{ctx.flag} {value}", why=why, source=("budget",), likelihood=0.7)]


# --- an out-of-memory error while allocating the KV cache vLLM had sized -------------------------
# vLLM sizes the cache from what its profile left free, then allocates it (V0 `_init_cache_engine`,
# V1 `initialize_from_config`): running out there means memory that was free when it profiled was
# gone when it allocated (another process or a second instance started in between, fragmentation).
# Giving the cache more of the GPU makes that worse; the cache must be sized to what stays free.

_ALLOCATION_MARGIN_GIB = 0.5


def _lacking(ctx: FixContext) -> float | None:
    """What the failed allocation lacked, from the allocator's message; None when it gives no figures."""
    f = ctx.facts
    if f.tried_to_allocate_gib is None or f.free_gib is None:
        return None
    return max(0.0, f.tried_to_allocate_gib - f.free_gib)


def kv_allocation_utilization(ctx: FixContext) -> list[Proposal]:
    """Lower utilization by at least what the failed KV allocation lacked (a smaller cache that fits)."""
    if ctx.flag is None or kv_bytes_given(ctx):
        return []
    what = "memory other processes took after vLLM profiled"
    note = " The cache is allocated layer by layer, so this is the least it lacked."
    found = lower_by_shortfall(ctx, 0.0, what, note)
    if found or _lacking(ctx) is not None:
        return found
    current, source = readings.utilization(ctx)
    why = (
        f"The KV cache sized at {current:.2f} did not fit when it was allocated: memory free when vLLM "
        "profiled was taken before the allocation. A lower utilization sizes a smaller cache."
    )
    return [
        Proposal(
            change=f"lower {ctx.flag} below {current:.2f}",
            why=why,
            source=(source,),
            exact=False,
            needs=("tried_to_allocate_gib", "free_gib"),
            likelihood=0.6,
        )
    ]


def kv_bytes_after_allocation_oom(ctx: FixContext) -> list[Proposal]:
    """Fix the KV size (vLLM 0.10.2+) below what was sized, by what its allocation lacked."""
    f = ctx.facts
    if ctx.flag is None:
        return []
    lacking = _lacking(ctx)
    have = f.available_kv_cache_gib
    if have is None or have <= 0 or lacking is None:
        return [
            Proposal(
                change=f"{ctx.flag} <bytes: the KV cache vLLM sized, less what its allocation lacked>",
                why="A fixed KV size does not follow what the profile found free, so memory taken "
                "after profiling cannot make the allocation fail.",
                exact=False,
                needs=("available_kv_cache_gib", "tried_to_allocate_gib", "free_gib"),
                likelihood=0.5,
            )
        ]
    target = have - lacking - _ALLOCATION_MARGIN_GIB
    if target <= 0:
        return []
    value = int(target * 2**30) // 2**20 * 2**20
    why = (
        f"vLLM sized {gib(have)} of KV cache and its allocation lacked {gib(lacking)}; "
        f"{gib(value / 2**30)} leaves {gib(_ALLOCATION_MARGIN_GIB)} to spare."
    )
    sources = ctx.sources_of("available_kv_cache_gib", "tried_to_allocate_gib")
    return [Proposal(change=f"{ctx.flag} {value}", why=why, source=sources, likelihood=0.7)]
