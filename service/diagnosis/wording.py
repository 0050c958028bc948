"""Titles and one-paragraph summaries of a verdict, written from its phase and the facts stated."""

from __future__ import annotations

from service.diagnosis.interpret import Verdict
from service.first_use import first_use_re
from service.schemas import Facts, Phase

__all__ = ["PHASE_TITLES", "describe", "error_head"]

PHASE_TITLES: dict[Phase, str] = {
    "startup_budget": "vLLM refused to start: not enough free GPU memory for the requested utilization",
    "weights_oom": "Out of GPU memory while loading the model weights",
    "kv_cache_capacity": "The KV cache cannot hold one request of max_model_len",
    "warmup_oom": "Out of GPU memory during profiling, CUDA-graph capture or warm-up",
    "runtime_oom": "Out of GPU memory while serving requests",
    "kv_preemption": "Requests are preempted for lack of KV-cache space",
    "request_too_long": "A request is longer than the model's maximum context length",
    "profiling_inconsistent": "GPU memory changed during memory profiling",
    "parallelism_config": "Tensor/pipeline parallelism does not fit the model or the GPUs",
    "quantization_config": "The quantization method does not match the model or the GPU",
    "dtype_unsupported": "The dtype is not supported on this GPU",
    "host_oom": "The host ran out of RAM, not the GPU",
    "not_memory": "An error that is not about GPU memory",
    "no_failure": "No failure found",
}

_WHY: dict[Phase, str] = {
    "startup_budget": "Free memory at startup was below utilization x total, before weights loaded.",
    "weights_oom": "The weights do not fit at this dtype, quantization and parallelism on this GPU.",
    "kv_cache_capacity": "Weights loaded, but the KV cache left cannot hold one full-length request.",
    "warmup_oom": "Weights loaded; profiling, CUDA-graph capture or sampler warm-up then ran out of memory.",
    "runtime_oom": "Startup completed; a request then needed more memory than was left.",
    "kv_preemption": "Serving works, but requests are evicted and recomputed when the KV cache fills.",
    "request_too_long": "The prompt plus requested output exceed max_model_len, so the API rejected it.",
    "profiling_inconsistent": "Another process used or freed GPU memory while vLLM profiled its usage.",
    "parallelism_config": "The parallel layout does not divide the model, or needs more GPUs than exist.",
    "quantization_config": "The quantization disagrees with the checkpoint, or the GPU cannot run it.",
    "dtype_unsupported": "bfloat16 needs compute capability 8.0 or newer; use --dtype half on older GPUs.",
    "host_oom": "The kernel, the container runtime or Ray stopped a process for lack of host RAM.",
    "not_memory": "The failure in this log is not a GPU-memory problem vramdoc can budget.",
    "no_failure": "The log shows no failure signature.",
}

_SHOWN = (
    ("free_gib", "free {} GiB"),
    ("total_gib", "total {} GiB"),
    ("requested_gib", "requested {} GiB"),
    ("tried_to_allocate_gib", "tried to allocate {} GiB"),
    ("gpu_memory_utilization", "gpu_memory_utilization {}"),
    ("max_model_len", "max_model_len {}"),
    ("estimated_max_model_len", "estimated max length {}"),
    ("needed_kv_cache_gib", "KV cache needed {} GiB"),
    ("available_kv_cache_gib", "KV cache available {} GiB"),
    ("requested_tokens", "requested {} tokens"),
    ("context_limit", "context limit {}"),
)


def _number(value: object) -> str:
    """2 decimals, or 3 significant digits for small sizes (3.31 MiB is 0.00323 GiB, not 0.0)."""
    if isinstance(value, float):
        return f"{value:.3g}" if 0 < abs(value) < 0.1 else f"{round(value, 2):g}"
    return str(value)


# The exception a line names: `torch.distributed.DistBackendError: NCCL error …`, `RayTaskError(X)`.
_EXCEPTION = first_use_re(
    r"(?:^|(?<=[\s:>'\"(\[{|]))(?P<name>(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit)"
    r"|(?:[a-z_]\w*\.){2,}[A-Z][a-z]\w*(?=:\s))"
    r"(?P<inner>\([A-Z]\w*\))?(?::\s*(?P<message>.*))?"
)
# An OpenAI-compatible error body: {"object": "error", "message": "...", "type": "BadRequestError"}
_BODY_FIELD = first_use_re(
    r"""["'](?P<key>message|type)["']\s*:\s*(?P<q>["'])(?P<value>(?:\\.|(?!(?P=q)).){0,400})(?P=q)"""
)
HEAD_CHARS = 100
# the tag an issue title starts with: `[Bug]: `, `[Usage] `
_TITLE_TAG = first_use_re(r"^\s*\[[^\]]{1,24}\]:?\s*")


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= HEAD_CHARS:
        return text
    cut = text.rfind(" ", 0, HEAD_CHARS)
    return text[: cut if cut > HEAD_CHARS // 2 else HEAD_CHARS].rstrip(" ,.;:") + " …"


def error_head(text: str) -> str:
    """The exception and the head of its message, as a person would quote it in a reply.

    From generic structure, not from known exceptions: a JSON error body's `type` and `message`,
    the last exception a line names (a wrapper's message names the one it wraps first), or the line.
    """
    fields = {m.group("key"): m.group("value") for m in _BODY_FIELD.finditer(text)}
    if "message" in fields:
        kind = fields.get("type")
        return _shorten(f"{kind}: {fields['message']}" if kind else fields["message"])
    text = _TITLE_TAG.sub("", text, count=1)
    found = list(_EXCEPTION.finditer(text))
    if not found:
        return _shorten(text)
    first = found[0]
    message = (first.group("message") or "").strip()
    # a squashed traceback: the exception line is the last one named, with its own message
    last = found[-1]
    if len(found) > 1 and last.group("message") and "Traceback (most recent" in text[: first.start() + 1]:
        first, message = last, (last.group("message") or "").strip()
    name = first.group("name") + (first.group("inner") or "")
    return _shorten(f"{name}: {message}" if message else name)


def describe(verdict: Verdict, facts: Facts) -> tuple[str, str]:
    """(title, summary) for a verdict; a verdict that is not about memory names its error."""
    title = PHASE_TITLES[verdict.phase]
    root = verdict.root
    if root is not None and root.compiled.rule.kind == "failure":
        title = root.compiled.rule.title
    elif root is not None and verdict.phase == "not_memory":
        head = error_head(root.line.text)
        if root.compiled.rule.kind == "wrapper":
            title = f"An error whose root cause is not in the excerpt: {head}"
        else:
            title = f"Not a memory failure: {head}"
    numbers = []
    for name, template in _SHOWN:
        value = getattr(facts, name)
        if value is not None:
            numbers.append(template.format(_number(value)))
    parts = [_WHY[verdict.phase]]
    if verdict.root is not None:
        parts.append(f"Decided by line {verdict.root.line.number} ({verdict.basis}).")
    elif verdict.phase != "no_failure":  # no line decided: what did (the person's words, a cut traceback)
        parts.append(f"Decided by {verdict.basis}.")
    if numbers:
        parts.append("Stated: " + ", ".join(numbers) + ".")
    return title, " ".join(parts)
