"""GGUF checkpoints: the model a GGUF reference holds, and weights from its tensor types."""

from __future__ import annotations

import pytest

from service.budget import estimate, find_model
from service.budget.gguf import base_model_names, file_type_counts, find_file_type, gguf_bytes
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

LLAMA3_8B = "Meta-Llama-3-8B-Instruct"
Q4_K_M_FILE = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


@pytest.mark.parametrize(
    ("reference", "file_type", "model"),
    [
        (Q4_K_M_FILE, "Q4_K_M", "Llama-3.1-8B-Instruct"),
        ("Qwen/Qwen2.5-7B-Instruct-GGUF:Q5_K_M", "Q5_K_M", "Qwen2.5-7B-Instruct"),
        ("unsloth/Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q8_0.gguf", "Q8_0", "Qwen3-30B-A3B"),
        (
            "someone/Llama-3.1-8B-Instruct-GGUF/Llama-3.1-8B-Instruct-F16-00001-of-00002.gguf",
            "F16",
            "Llama-3.1-8B-Instruct",
        ),
    ],
)
def test_a_gguf_reference_names_its_file_type_and_the_model_it_holds(
    catalog: Catalog, reference: str, file_type: str, model: str
) -> None:
    found = find_file_type(catalog, reference)
    assert found is not None and found.id == file_type
    assert find_model(catalog, reference)[0].id == model


def test_a_quantized_name_that_is_not_gguf_is_no_gguf_reference(catalog: Catalog) -> None:
    assert find_file_type(catalog, "Qwen/Qwen2.5-7B-Instruct-AWQ") is None
    assert base_model_names("TheBloke/Llama-2-7B-GGUF/llama-2-7b.Q4_K_M.gguf", None)[-1] == "Llama-2-7B"


# llama.cpp's quantize table states each file type's size for Llama-3-8B (tools/quantize/quantize.cpp):
# Q4_K_M 4.58G, Q5_K_M 5.33G, Q6_K 6.14G, Q8_0 7.96G, Q4_0 4.34G, Q5_K_S 5.21G (GiB)
@pytest.mark.parametrize(
    ("file_type", "gib"),
    [("Q4_K_M", 4.58), ("Q5_K_M", 5.33), ("Q6_K", 6.14), ("Q8_0", 7.96), ("Q4_0", 4.34), ("Q5_K_S", 5.21)],
)
def test_file_type_rule_reproduces_llama_cpps_published_sizes(
    catalog: Catalog, file_type: str, gib: float
) -> None:
    model = find_model(catalog, LLAMA3_8B)[0]
    [spec] = [f for f in catalog.dtypes.gguf_file_types if f.id == file_type]
    total, unknown = gguf_bytes(file_type_counts(model, spec), catalog, 2)
    assert unknown == []
    assert total / 2**30 == pytest.approx(gib, abs=0.02)


def test_gguf_weights_replace_the_dtype_weights_in_the_budget(catalog: Catalog) -> None:
    plain = estimate(EstimateRequest(model="Llama-3.1-8B-Instruct", gpu="L4", vllm_version="0.33.0"), catalog)
    gguf = estimate(EstimateRequest(model=Q4_K_M_FILE, gpu="L4", vllm_version="0.33.0"), catalog)
    assert gguf.weights_gib == pytest.approx(4.6, abs=0.05)  # 4.57 GiB of tensors plus the rotary cache
    assert gguf.weights_gib < plain.weights_gib / 3
    assert gguf.kv_cache_tokens > plain.kv_cache_tokens
    assert gguf.sources["weights_gib"].note == "the GGUF file's tensor types"
    assert gguf.model == Q4_K_M_FILE


def test_tensor_types_read_from_a_gguf_header_are_used_as_given(catalog: Catalog) -> None:
    model = find_model(catalog, "Llama-3.1-8B-Instruct")[0]
    [q8] = [f for f in catalog.dtypes.gguf_file_types if f.id == "Q8_0"]
    header = file_type_counts(model, q8) | {"F32": 266_240}  # the norms, as a header lists them
    budget = estimate(
        EstimateRequest(model=Q4_K_M_FILE, gpu="L4", vllm_version="0.33.0", parameters=header), catalog
    )
    assert "its header: F32, Q8_0" in " ".join(budget.notes)
    assert budget.weights_gib == pytest.approx(7.95, abs=0.05)


def test_a_header_with_an_unknown_tensor_type_keeps_the_formula_and_says_why(catalog: Catalog) -> None:
    header = {"Q4_K": 7_000_000_000, "Q9_Z": 1_000_000_000}
    budget = estimate(
        EstimateRequest(model=Q4_K_M_FILE, gpu="L4", vllm_version="0.33.0", parameters=header), catalog
    )
    assert "unknown tensor types Q9_Z" in " ".join(budget.notes)
