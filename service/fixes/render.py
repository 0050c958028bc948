"""Plain-text rendering of ranked fixes for `vramdoc diagnose` (the JSON is the Fix structs as they are)."""

from __future__ import annotations

from collections.abc import Sequence

from service.schemas import Fix

__all__ = ["render_fixes", "to_make_exact"]

# What a person can paste or name so that a fact is known; keyed by fact name (DESIGN §3.2).
_GIVE = {
    "other_processes": "paste `nvidia-smi` from the host, or name the host",
    "free_gib": "paste `nvidia-smi` from the host, or name the host",
    "total_gib": "name the GPU, or paste `nvidia-smi` from the host",
    "available_kv_cache_gib": "paste the start-up log up to vLLM's KV-cache lines",
    "estimated_max_model_len": "paste the start-up log up to vLLM's KV-cache lines",
    "kv_cache_tokens": "paste the start-up log up to vLLM's KV-cache lines",
    "max_num_seqs": "paste the `vllm serve` command",
    "max_num_batched_tokens": "paste the `vllm serve` command",
    "num_attention_heads": "name the model, or paste its config.json",
    "quantization": "name the model, or paste its config.json",
    "requested_tokens": "paste the whole error the API returned",
    "context_limit": "paste the whole error the API returned",
}


def to_make_exact(needs: Sequence[str]) -> str:
    """One sentence saying what would give a fix its exact value."""
    ways = list(dict.fromkeys(_GIVE.get(n, "paste more of the log") for n in needs)) or [
        "paste more of the log"
    ]
    said = " or ".join(ways) if len(ways) <= 2 else ", ".join(ways[:-1]) + " or " + ways[-1]
    return f"To size this exactly, {said}."


def render_fixes(fixes: Sequence[Fix], corrected_command: str | None = None) -> str:
    """The fixes as numbered, readable lines, then the corrected command when there is one."""
    if not fixes:
        return "Fixes: none to suggest for this failure."
    lines = ["Fixes, best first (change one thing at a time):"]
    for fix in fixes:
        lines.append(f"  {fix.rank}. {fix.title}")
        lines.append(f"     change:   {fix.change}")
        lines.append(f"     why:      {fix.why}")
        lines.append(f"     costs:    {fix.tradeoff}")
        if fix.source:
            lines.append(f"     from:     {', '.join(fix.source)}")
        if not fix.exact:
            lines.append(f"     exact:    {fix.to_make_exact or to_make_exact(fix.needs)}")
    if corrected_command:
        lines += ["", "Corrected command (top fix applied):", f"  {corrected_command}"]
    return "\n".join(lines)
