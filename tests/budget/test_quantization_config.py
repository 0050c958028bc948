"""Quantization read from a checkpoint's `quantization_config`, as vLLM's methods name it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.budget import GIB, estimate
from service.budget.config import model_from_config
from service.errors import InvalidConfigError
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"
QWEN3_8B = json.loads((CONFIGS / "Qwen--Qwen3-8B.json").read_text())


def _ct(num_bits: int, kind: str, **extra: object) -> dict[str, object]:
    weights = {"num_bits": num_bits, "type": kind, "group_size": 16 if kind == "float" else 128, **extra}
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }


@pytest.mark.parametrize(
    ("quantization_config", "method"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "awq"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq-int8"),
        ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True}, "gptq"),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block"),
        (_ct(8, "int"), "int8-w8a8"),
        (_ct(4, "int"), "w4a16"),
        (_ct(8, "float"), "fp8"),
        (_ct(8, "float", strategy="block", block_structure=[128, 128]), "fp8-block"),
        (_ct(4, "float"), "nvfp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "nvfp4"),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
            "bitsandbytes-nf4",
        ),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes-int8"),
    ],
    ids=lambda v: v if isinstance(v, str) else str(v.get("quant_method")),
)
def test_the_checkpoint_method_is_read(quantization_config: dict[str, object], method: str) -> None:
    _, quant = model_from_config({**QWEN3_8B, "quantization_config": quantization_config})
    assert quant is not None and quant.method == method


def test_mxfp4_covers_the_experts_only() -> None:
    config = json.loads((CONFIGS / "openai--gpt-oss-120b.json").read_text())
    _, quant = model_from_config(config)
    assert quant is not None and (quant.method, quant.scope) == ("mxfp4", "experts")


def test_a_declared_fp8_kv_cache_is_what_auto_uses(catalog: Catalog) -> None:
    config = {
        **QWEN3_8B,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
        },
    }
    budget = estimate(EstimateRequest(model="nvidia/Qwen3-8B-FP4", config=config, gpu="B200"), catalog)
    assert budget.kv_cache_dtype == "fp8"
    assert budget.kv_bytes_per_token == 36 * 2 * 8 * 128 * 1
    assert any("declares an fp8 KV cache" in note for note in budget.notes)
    given = estimate(
        EstimateRequest(model="nvidia/Qwen3-8B-FP4", config=config, gpu="B200", kv_cache_dtype="bfloat16"),
        catalog,
    )
    assert given.kv_cache_dtype == "bfloat16"


def test_an_unknown_bit_width_is_a_clear_error() -> None:
    with pytest.raises(InvalidConfigError, match="3 bits is not in the catalog"):
        model_from_config({**QWEN3_8B, "quantization_config": {"quant_method": "gptq", "bits": 3}})


def test_awq_checkpoint_bytes_count_packed_weights_scales_and_zeros(catalog: Catalog) -> None:
    # Qwen3-32B-AWQ's safetensors: int32-packed qweight/qzeros, fp16 scales and unquantized tensors.
    # Whatever the formula's bits-per-weight says, the weights are these bytes (TP 1, plus the rope cache).
    config = json.loads((CONFIGS / "Qwen--Qwen3-32B-AWQ.json").read_text())
    parameters = {"I32": 3_962_306_560, "F16": 1_778_384_896}
    budget = estimate(
        EstimateRequest(model="Qwen/Qwen3-32B-AWQ", config=config, gpu="A100-80GB", parameters=parameters),
        catalog,
    )
    stored = 3_962_306_560 * 4 + 1_778_384_896 * 2
    rope = 40960 * 128 * 2
    assert budget.quantization == "awq"
    assert budget.weights_gib == pytest.approx((stored + rope) / GIB, abs=1e-3)
