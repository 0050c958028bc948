"""Calculators for configuration errors and for the command line itself."""

from __future__ import annotations

from service.first_use import first_use_re
from service.fixes.calculators import readings
from service.fixes.calculators.parallel import accepted_sizes
from service.fixes.context import FixContext, Proposal
from service.fixes.limits import (
    divisors,
)

_CHECKPOINT_QUANT = first_use_re(r"model config \(([\w\-]+)\)")


_NOT_DIVISIBLE = first_use_re(r"\b(\d+) is not divisible by (\d+)\b")


def _split_dimension(ctx: FixContext) -> int | None:
    """The model dimension vLLM failed to split over the ranks ("32768 is not divisible by 3")."""
    for text in ctx.lines:
        if match := _NOT_DIVISIBLE.search(text):
            return int(match.group(1))
    return None


def _divides_dimension(ctx: FixContext, tp: int, gpus: int | None) -> list[Proposal]:
    """Without a head count, the size the assertion itself names still bounds the valid ranks."""
    dimension = _split_dimension(ctx)
    if dimension is None:
        return []
    limit = min(tp, gpus) if gpus is not None else tp
    below = [d for d in divisors(dimension) if d <= limit and d != tp]
    if not below or below[-1] == 1:
        return []
    why = (
        f"vLLM splits a dimension of {dimension} evenly across the tensor-parallel ranks; "
        f"{tp} does not divide it, {below[-1]} does (and the attention heads must divide too)."
    )
    return [Proposal(change=f"{ctx.flag} {below[-1]}", why=why, source=("log",), likelihood=0.85)]


def fix_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """A tensor-parallel size that divides the attention heads and is at most the GPUs present."""
    if ctx.flag is None:
        return []
    tp = readings.tensor_parallel(ctx)
    pp, _ = readings.int_flag(ctx, ctx.facts.pipeline_parallel_size, "--pipeline-parallel-size")
    gpus = ctx.gpus_present
    too_many = gpus is not None and tp * (pp or 1) > gpus
    if ctx.phase != "parallelism_config" and not too_many:
        return []
    heads = readings.heads(ctx)
    # each pipeline stage needs its own TP group of GPUs
    limit = min(tp, gpus // (pp or 1)) if gpus is not None else tp
    if limit < 1:
        return []
    if heads is None:
        if ctx.phase == "parallelism_config" and (split := _divides_dimension(ctx, tp, gpus)):
            return split
        if not too_many or gpus is None:
            return []
        power = 1 << (gpus.bit_length() - 1)
        why = f"{tp} is more than the {gpus} GPUs present; a power of two usually divides the heads."
        return [
            Proposal(
                change=f"{ctx.flag} {power}",
                why=why,
                exact=False,
                needs=("num_attention_heads",),
                likelihood=0.6,
            )
        ]
    found = accepted_sizes(ctx)
    sizes, rule = found if found is not None else (divisors(heads), "heads")
    valid = [d for d in sizes if d <= (gpus // (pp or 1) if gpus is not None else heads)]
    below = [d for d in valid if d <= limit]
    if not below or below[-1] == tp:
        return []
    choice = below[-1]
    shown = ", ".join(map(str, valid))
    why = (
        f"vLLM accepts TP {shown} for this model (heads, KV heads, MLP and vocabulary split evenly)"
        if rule == "catalog"
        else f"{heads} attention heads divide evenly by {shown}"
    )
    why += f" (with {gpus} GPUs present)" if gpus is not None else ""
    why += f"; {tp} does not work."
    likelihood = 0.95 if ctx.phase == "parallelism_config" else 0.3
    sources = ctx.sources_of("num_attention_heads") + (("snapshot",) if too_many else ())
    return [Proposal(change=f"{ctx.flag} {choice}", why=why, source=sources, likelihood=likelihood)]


def _checkpoint_quantization(ctx: FixContext) -> str | None:
    """The method the checkpoint's config names, from vLLM's mismatch message."""
    for text in [x.message or "" for x in ctx.findings] + list(ctx.lines):
        if match := _CHECKPOINT_QUANT.search(text):
            return match.group(1)
    return None


def match_quantization(ctx: FixContext) -> list[Proposal]:
    """Let vLLM read the checkpoint's own quantization method instead of a conflicting `--quantization`."""
    if ctx.flag is None:
        return []
    if _mismatch(ctx) is False:
        return []  # the GPU refused the method: the checkpoint's own method would be refused too
    checkpoint = _checkpoint_quantization(ctx)
    given = ctx.command is not None and ctx.command.has(ctx.flag)
    if given:
        why = (
            "vLLM reads the quantization method from the checkpoint's config; a "
            "different --quantization conflicts with it."
        )
        if checkpoint:
            why = f"The checkpoint is quantized with {checkpoint}; without --quantization vLLM uses that."
        return [Proposal(change=f"remove {ctx.flag}", why=why, source=("command",), likelihood=0.9)]
    if checkpoint:
        why = f"The checkpoint's config says {checkpoint}; pass the same method."
        return [Proposal(change=f"{ctx.flag} {checkpoint}", why=why, likelihood=0.8)]
    return [
        Proposal(
            change=f"drop {ctx.flag}, or set it to the quant_method in the checkpoint's config.json",
            why="The quantization method given does not match the checkpoint or this GPU.",
            exact=False,
            needs=("quantization",),
            likelihood=0.6,
        )
    ]


_UNSUPPORTED = first_use_re(
    r"quantization method (\S+) is not supported for the current GPU\. Minimum capability: (\d+)\. "
    r"Current capability: (\d+)|(\S+) quantization is currently not supported in"
)


def _unsupported_method(ctx: FixContext) -> tuple[str, int | None] | None:
    """The method vLLM refused on this GPU and the GPU's capability as vLLM printed it (75 = 7.5)."""
    for text in ctx.lines:
        if match := _UNSUPPORTED.search(text):
            if match.group(1):
                return match.group(1), int(match.group(3))
            return match.group(4), None
    return None


def _mismatch(ctx: FixContext) -> bool | None:
    """Whether the failure is a method mismatch (True), a GPU refusal (False), or unknown (None)."""
    texts = [x.rule for x in ctx.findings] + list(ctx.lines)
    if any("does not match" in t or "mismatch" in t for t in texts):
        return True
    if _unsupported_method(ctx) is not None:
        return False
    return None


def non_marlin_kernel(ctx: FixContext) -> list[Proposal]:
    """awq_marlin / gptq_marlin need compute capability 8.0; plain awq / gptq run from 7.5 (Turing)."""
    refused = _unsupported_method(ctx)
    method = refused[0] if refused else ctx.facts.quantization
    if ctx.flag is None or method is None or not method.endswith("_marlin"):
        return []
    cc = readings.compute_capability(ctx)
    capability = refused[1] if refused and refused[1] is not None else (cc[0] * 10 + cc[1] if cc else None)
    if capability is not None and (capability < 75 or capability >= 80):
        return []
    plain = method.removesuffix("_marlin")
    why = (
        f"{method} needs compute capability 8.0; the {plain} kernels run on this GPU's 7.5, a little slower."
    )
    return [
        Proposal(change=f"{ctx.flag} {plain}", why=why, source=("log",) if refused else (), likelihood=0.95)
    ]


def supported_quantization(ctx: FixContext) -> list[Proposal]:
    """A checkpoint quantized with a method this GPU runs (AWQ/GPTQ need compute capability 7.5+)."""
    if _mismatch(ctx):
        return []
    cc = readings.compute_capability(ctx)
    refused = _unsupported_method(ctx)
    if refused is None and cc is None:
        return []
    if refused is not None and refused[0].endswith("_marlin"):
        return []  # the checkpoint runs with the plain kernel (use-non-marlin-kernel)
    if refused is not None and refused[1] is not None:
        where = f" (compute capability {refused[1] // 10}.{refused[1] % 10})"
    else:
        where = f" (compute capability {cc[0]}.{cc[1]})" if cc is not None else ""
    method = f"{refused[0]} " if refused else ""
    why = (
        f"The {method}method is not available on this GPU{where}; AWQ and GPTQ checkpoints "
        "run on compute capability 7.5 and newer."
    )
    model = ctx.facts.model
    base = model.rsplit("/", 1)[-1].removesuffix("-FP8").removesuffix("-fp8") if model else None
    target = f"of {base} " if base else "of the model "
    return [Proposal(change=f"serve an AWQ or GPTQ checkpoint {target}instead", why=why, likelihood=0.6)]


def float16(ctx: FixContext) -> list[Proposal]:
    """bfloat16 needs compute capability 8.0; float16 runs everywhere."""
    cc = readings.compute_capability(ctx)
    if ctx.flag is None or (cc is not None and cc >= (8, 0)):
        return []
    where = f"this GPU has compute capability {cc[0]}.{cc[1]}" if cc else "this GPU is older than Ampere"
    why = (
        f"bfloat16 needs compute capability 8.0 and {where}; float16 has the "
        "same size and range for most models."
    )
    source = ctx.sources_of("compute_capability") if cc else ()
    return [Proposal(change=f"{ctx.flag} half", why=why, source=source, likelihood=0.95)]


def _removed_before(removed: tuple[int, int, int] | None, ctx: FixContext) -> bool:
    return removed is not None and (ctx.version is None or ctx.version >= removed)


def unknown_flags(ctx: FixContext) -> list[Proposal]:
    """Flags in the user's command that their vLLM version does not have: rename or remove each."""
    if ctx.command is None or ctx.pack is None:
        return []
    proposals: list[Proposal] = []
    for name, values in ctx.command.flags.items():
        spec = ctx.pack.flag(name)
        if spec is None or any(spec.exists(v) for v in ctx.span):
            continue  # absent only if no version the log allows has it
        if spec.versions.removed and not spec.never and not ctx.floor_known:
            continue  # an older release than the range shows may still have it
        version = readings.version_text(ctx)
        if spec.never:
            why = f"{name} has never been a vLLM flag."
        elif _removed_before(spec.versions.bounds[1], ctx):
            why = f"{name} was removed in vLLM {spec.versions.removed}; {version} rejects it."
        else:
            why = f"{name} arrived in vLLM {spec.versions.introduced}; {version} rejects it."
        replacement = next(
            (
                r
                for r in (spec.replacement, spec.previous)
                if r is not None and ctx.pack.spelling([r], ctx.span)
            ),
            None,
        )
        likelihood = 1.0 if ctx.phase in ("not_memory", "no_failure") else 0.1
        if spec.note:
            why += f" {spec.note}"
        if replacement is not None:
            kept = " ".join(values) if spec.keep_values and values else ""
            change = f"{replacement} {kept}".rstrip() + f" instead of {name}"
            title = f"Use {replacement} instead of {name}"
        else:
            change, title = f"remove {name}", f"Drop {name}"
        proposals.append(
            Proposal(change=change, why=why, source=("command",), likelihood=likelihood, title=title)
        )
    return proposals


# vLLM's GPU-shortage errors (rules/signatures/startup.yaml); the same rule also matches the
# quantized-shape errors, which a count of visible GPUs does not fix
_SHORTAGE_RULES = frozenset(
    {"vllm-world-size-exceeds-gpus", "vllm-tp-exceeds-gpus-warning", "vllm-parallel-exceeds-local-gpus"}
)
_SHAPE_WORDS = ("min_thread_", "quantized weight shape")
_WORLD_SIZE = first_use_re(r"(?:World size \(|placement group requiring )(\d+)")


def _gpu_shortage(ctx: FixContext) -> bool:
    named = any(f.rule in _SHORTAGE_RULES for f in ctx.findings)
    shape = any(word in line for line in ctx.lines for word in _SHAPE_WORDS)
    return named and not shape


def _gpus_needed(ctx: FixContext) -> int | None:
    for line in ctx.lines:
        if match := _WORLD_SIZE.search(line):
            return int(match.group(1))
    if ctx.facts.tensor_parallel_size is None and ctx.command is None:
        return None
    pp, _ = readings.int_flag(ctx, ctx.facts.pipeline_parallel_size, "--pipeline-parallel-size")
    return readings.tensor_parallel(ctx) * (pp or readings.pipeline_parallel(ctx))


def expose_gpus(ctx: FixContext) -> list[Proposal]:
    """More GPUs asked for than vLLM (or Ray) can see: make the missing ones visible to it."""
    if ctx.phase != "parallelism_config" or not _gpu_shortage(ctx):
        return []
    needed = _gpus_needed(ctx)
    count = f"all {needed} GPUs" if needed is not None else "every GPU TP × PP needs"
    visible = ctx.command.env_value("CUDA_VISIBLE_DEVICES") if ctx.command is not None else None
    why = "vLLM places one worker per GPU of TP × PP and found fewer GPUs than that."
    if visible is not None:
        listed = len([d for d in visible.split(",") if d.strip()])
        why += f" CUDA_VISIBLE_DEVICES={visible} shows it {listed}."
    if ctx.gpus_present is not None:
        why += f" {ctx.gpus_present} are visible now."
    change = (
        f"make {count} visible to vLLM: list them in CUDA_VISIBLE_DEVICES, give Ray that many "
        f"(`ray status`; `ray start --num-gpus N` on each node), and pass them into the container "
        f"(`docker run --gpus all`, or the pod's `nvidia.com/gpu` limit)"
    )
    return [
        Proposal(
            change=change,
            why=why,
            source=("log",),
            exact=needed is not None,
            needs=() if needed is not None else ("tensor_parallel_size",),
            likelihood=0.8,
        )
    ]
