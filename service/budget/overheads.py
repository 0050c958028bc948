"""What vLLM measures rather than computes (activation peak, non-torch memory, CUDA graphs), as
fitted coefficients times terms of the run.

The terms are what vLLM's profiling scales with; the coefficients are catalog data that
tools/fit_overheads.py fits to logged runs per era (rules/catalog/engines.yaml `overheads:`). The
estimator and the fit read the same terms from here, so the fit's coefficients mean what the
estimator multiplies.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from service.budget.inputs import GIB, Run
from service.packs.catalog import EngineFacts, OverheadEra, OverheadFit

__all__ = [
    "OverheadTerms",
    "activation_bytes",
    "component_bytes",
    "overhead_era",
    "overhead_terms",
    "profile_tokens",
]

Engine = Literal["v0", "v1"]


class OverheadTerms(msgspec.Struct, frozen=True):
    """What each coefficient of one GPU's overheads multiplies.

    activation (elements, coefficients in bytes each): the profile's forward pass, profile tokens ×
    MLP width / TP (the MLP's gate_up output and activation, or the routed experts' MoE workspace)
    and profile tokens × hidden size (residual and norm buffers), at one fitted rate of bytes per
    element (tools/fit_overheads.py writes it for both); then the sampler warm-up, rows ×
    vocabulary (fp32 logits and their copies, gathered whole on every GPU). The peak is the larger
    of the two, as vLLM runs them one after the other. non_torch (GiB): one, and one more when
    tensor or pipeline parallel starts NCCL and custom all-reduce buffers. cuda_graph (GiB): one,
    and the decoder layers on the GPU; none when eager.
    """

    activation: tuple[float, float, float]
    non_torch: tuple[float, float]
    cuda_graph: tuple[float, float]


def overhead_era(
    engine: EngineFacts, version: tuple[int, int, int], kind: Engine | None = None
) -> OverheadEra:
    """The era whose coefficients hold at `version`; `kind` v0 picks the V0 engine's era when a run
    chose V0 (VLLM_USE_V1=0) on a release whose default is V1."""
    era = next(e for e in engine.overheads if e.versions.contains(version))
    if kind == "v0" and not era.whole_prompt_profile:
        v0 = [e for e in engine.overheads if e.whole_prompt_profile]
        return v0[-1] if v0 else era
    return era


def profile_tokens(
    run: Run, era: OverheadEra, engine: EngineFacts, chunked_prefill: bool | None = None
) -> int:
    """Tokens of the profile batch: V0 without chunked prefill profiles whole prompts of
    max(max_model_len, max_num_batched_tokens); with it, and always on V1, max_num_batched_tokens.
    Unless stated, V0 chunks by default only above a long-context length (from the release the
    catalog names)."""
    if not era.whole_prompt_profile:
        return run.max_num_batched_tokens
    chunked = chunked_prefill
    if chunked is None:
        long_context = run.max_model_len > engine.long_context_chunked_prefill_above_len
        chunked = long_context and run.at_least(engine.long_context_chunked_prefill_since)
    return run.max_num_batched_tokens if chunked else max(run.max_model_len, run.max_num_batched_tokens)


def overhead_terms(
    run: Run,
    tp: int,
    layers: int,
    era: OverheadEra,
    engine: EngineFacts,
    chunked_prefill: bool | None = None,
) -> OverheadTerms:
    """The terms of one GPU holding `layers` decoder layers at tensor-parallel size `tp`."""
    model = run.model
    width = model.intermediate_size
    if model.moe is not None:
        routed = model.moe.experts_per_token * model.moe.intermediate_size
        width = max(routed, width if model.moe.first_dense_layers else 0)
    tokens = profile_tokens(run, era, engine, chunked_prefill)
    rows = min(run.max_num_seqs, tokens)
    parallel = 1.0 if tp * run.pp > 1 else 0.0
    graphs = (0.0, 0.0) if run.enforce_eager else (1.0, float(layers))
    return OverheadTerms(
        activation=(tokens * width / tp, float(tokens * model.hidden_size), float(rows * model.vocab_size)),
        non_torch=(1.0, parallel),
        cuda_graph=graphs,
    )


def component_bytes(fit: OverheadFit, terms: tuple[float, ...]) -> int:
    """Coefficients times terms (GiB each), in bytes."""
    return int(sum(c * t for c, t in zip(fit.coefficients, terms, strict=True)) * GIB)


def activation_bytes(fit: OverheadFit, terms: tuple[float, float, float]) -> int:
    """The activation peak in bytes: the larger of the forward pass and the sampler warm-up."""
    forward, hidden, sampler = fit.coefficients
    return int(max(forward * terms[0] + hidden * terms[1], sampler * terms[2]))
