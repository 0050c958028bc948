"""The multimodal encoder's share of vLLM's profiling run (a separate budget term).

Before the decoder's dummy batch, vLLM's profile_run (v1/worker/gpu_model_runner.py) runs the vision
encoder on a dummy batch of images of the largest feature size and keeps the outputs in the encoder
cache while the decoder runs. How many: multimodal/encoder_budget.py gives the encoder a budget of
max(max_num_batched_tokens, tokens per image) tokens (compute_mm_encoder_budget), so
N = max(1, min(budget // T, max_num_seqs × max(1, max_model_len // T))) images of T tokens.
The peak is therefore the decoder's activation plus N × T cached embeddings, or the encoder's own
activation over N × patches tokens when that is larger.
"""

from __future__ import annotations

from service.budget.inputs import Run
from service.packs.catalog import OverheadEra

__all__ = ["encoder_profile_bytes", "profiled_images"]


def profiled_images(run: Run) -> tuple[int, int]:
    """(images, tokens per image) vLLM's profile run encodes, or (0, 0) without a fixed-size tower."""
    vision = run.model.vision
    if vision is None or not vision.patches:
        return 0, 0
    tokens = vision.image_tokens
    budget = max(run.max_num_batched_tokens, tokens)
    per_prompt = max(1, run.max_model_len // tokens)
    return max(1, min(budget // tokens, run.max_num_seqs * per_prompt)), tokens


def encoder_profile_bytes(run: Run, tp: int, decoder_activation: int, era: OverheadEra) -> int:
    """Bytes the encoder's profiling adds above the decoder's activation peak on one GPU."""
    vision = run.model.vision
    images, tokens = profiled_images(run)
    if vision is None or images == 0:
        return 0
    cached = images * tokens * run.model.hidden_size * run.dtype_bytes
    # the tower's forward pass with the era's fitted activation coefficients (per element of MLP
    # width / TP and of hidden size, as overheads.py states them), over its patches
    forward, hidden, _ = era.activation.coefficients
    per_patch = forward * vision.intermediate_size / tp + hidden * vision.hidden_size
    encoder = images * vision.patches * per_patch
    return int(cached + max(0.0, encoder - decoder_activation))
