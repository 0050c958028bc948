"""Calculators: small pure functions that turn facts into one exact change each, or decline.

Each calculator reads a FixContext and returns Proposals (usually zero or one). It declines
(returns []) when its advice cannot work for the facts at hand, and proposes without a number
(`exact=False`, `needs=[…]`) only where the advice holds anyway. A recipe in `rules/fixes/` names
its calculator by its key in CALCULATORS; adding one is a function, a line here and a test.
"""

from __future__ import annotations

from collections.abc import Callable

from service.errors import PackError
from service.fixes.calculators import config, host, kv, requests, runtime, startup, warmup, weights
from service.fixes.context import FixContext, Proposal
from service.packs.fixes import FixPack

__all__ = ["CALCULATORS", "Calculator", "check_calculators"]

Calculator = Callable[[FixContext], list[Proposal]]

CALCULATORS: dict[str, Calculator] = {
    "free_other_memory": startup.free_other_memory,
    "switch_gpu": startup.switch_gpu,
    "startup_utilization": startup.startup_utilization,
    "quantize_weights": weights.quantize_weights,
    "quantized_checkpoint": weights.quantized_checkpoint,
    "weights_tensor_parallel": weights.weights_tensor_parallel,
    "larger_gpu": weights.larger_gpu,
    "fit_max_model_len": kv.fit_max_model_len,
    "raise_utilization": kv.raise_utilization,
    "fp8_kv_cache": kv.fp8_kv_cache,
    "kv_allocation_utilization": kv.kv_allocation_utilization,
    "kv_bytes_after_allocation_oom": kv.kv_bytes_after_allocation_oom,
    "kv_tensor_parallel": kv.kv_tensor_parallel,
    "kv_cache_memory_bytes": kv.kv_cache_memory_bytes,
    "enforce_eager": warmup.enforce_eager,
    "capture_sizes": warmup.capture_sizes,
    "lower_max_num_seqs": warmup.lower_max_num_seqs,
    "lower_max_num_batched_tokens": warmup.lower_max_num_batched_tokens,
    "graph_headroom": warmup.graph_headroom,
    "activation_headroom": warmup.activation_headroom,
    "cap_request_length": runtime.cap_request_length,
    "watch_kv_metrics": runtime.watch_kv_metrics,
    "fit_max_tokens": requests.fit_max_tokens,
    "raise_max_model_len": requests.raise_max_model_len,
    "shorten_prompt": requests.shorten_prompt,
    "fix_tensor_parallel": config.fix_tensor_parallel,
    "expose_gpus": config.expose_gpus,
    "match_quantization": config.match_quantization,
    "supported_quantization": config.supported_quantization,
    "non_marlin_kernel": config.non_marlin_kernel,
    "float16": config.float16,
    "unknown_flags": config.unknown_flags,
    "lower_swap_space": host.lower_swap_space,
    "lower_cpu_offload": host.lower_cpu_offload,
    "raise_host_memory": host.raise_host_memory,
    "fewer_loading_workers": host.fewer_loading_workers,
}


def check_calculators(pack: FixPack) -> None:
    """Raise PackError at the first recipe whose calculator is not in CALCULATORS.

    The packs are data and do not know the Python above them, so this check runs where the rules
    are loaded for use (`service.core.load_rules`).
    """
    for recipe in pack.recipes:
        if recipe.calculator in CALCULATORS:
            continue
        known = ", ".join(sorted(CALCULATORS))
        origin = pack.calculator_origins.get(recipe.id)
        raise PackError(
            origin.file if origin is not None else "rules/fixes",
            f"unknown calculator {recipe.calculator!r} (known: {known})",
            path=origin.path if origin is not None else None,
            line=origin.line if origin is not None else None,
            rule_id=recipe.id,
        )
