"""Calculators: small pure functions that turn facts into one exact change each, or decline.

Each calculator reads a FixContext and returns Proposals (usually zero or one). It declines
(returns []) when its advice cannot work for the facts at hand, and proposes without a number
(`exact=False`, `needs=[…]`) only where the advice holds anyway. A recipe in `rules/fixes/` names
its calculator by its key in CALCULATORS; adding one is a function, a line here and a test.
"""

from __future__ import annotations

from collections.abc import Callable

from service.fixes.calculators import config, kv, requests, runtime, startup, warmup, weights
from service.fixes.context import FixContext, Proposal

__all__ = ["CALCULATORS", "Calculator"]

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
}
