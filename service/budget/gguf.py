"""GGUF checkpoints (llama.cpp files) as vLLM loads them: which model, and how many bytes its weights take.

vLLM serves a GGUF file given as a local path, `<repo>/<file>.gguf` or `<repo>:<quant type>`
(gguf_loader.py) and keeps its tensors in their GGUF types on the GPU, so the weights are the sum over
tensor types of elements × the type's block bytes per block weights (dtypes.yaml `gguf_types`). The
types come from the file's header when it was read (`parameters`, keyed by type name), else from
the file type the name carries (Q4_K_M …) and llama.cpp's rule for it (`gguf_file_types`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from service.budget.weights import parameter_count
from service.first_use import first_use_re
from service.packs.catalog import Catalog, GgufFileType, ModelSpec

__all__ = [
    "base_model_names",
    "file_type_counts",
    "find_file_type",
    "gguf_bytes",
    "is_gguf_reference",
    "type_counts",
]

_SHARD = first_use_re(r"-\d{2,5}-of-\d{2,5}$")
_REPO_SUFFIX = first_use_re(r"[-_.]gguf$", re.IGNORECASE)


def is_gguf_reference(name: str) -> bool:
    """Whether a model reference points at a GGUF file (`.gguf`, a `-GGUF` repo, or `repo:type`)."""
    text = name.strip()
    return "gguf" in text.lower() or ("/" in text and ":" in text.rsplit("/", 1)[-1])


def _pattern(file_type: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![a-z0-9]){re.escape(file_type)}(?![a-z0-9])", re.IGNORECASE)


def find_file_type(catalog: Catalog, name: str) -> GgufFileType | None:
    """The GGUF file type a reference names (the longest that matches, so Q4_K_M before Q4_0)."""
    if not is_gguf_reference(name):
        return None
    for file_type in sorted(catalog.dtypes.gguf_file_types, key=lambda f: -len(f.id)):
        if _pattern(file_type.id).search(name):
            return file_type
    return None


def base_model_names(name: str, file_type: GgufFileType | None) -> list[str]:
    """Names of the model a GGUF reference holds: the file's stem and the repo's, without GGUF words."""
    ref = name.strip().rstrip("/")
    tail = ref.rsplit("/", 1)[-1]
    if "/" in ref and ":" in tail:
        ref = ref.rsplit(":", 1)[0]
    parts = ref.split("/")
    names = []
    for part in reversed(parts[-2:] if len(parts) > 1 else parts):
        stem = part.removesuffix(".gguf").removesuffix(".GGUF")
        stem = _SHARD.sub("", stem)
        if file_type is not None:
            stem = _pattern(file_type.id).sub("", stem)
        stem = _REPO_SUFFIX.sub("", stem.strip("-_. "))
        if stem:
            names.append(stem.strip("-_. "))
    return names


def _more_bits_layer(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _attn_v(model: ModelSpec) -> int:
    return 0 if model.mla is not None else model.hidden_size * model.num_key_value_heads * model.kv_head_dim


def _ffn_down(model: ModelSpec, i: int) -> int:
    moe = model.moe
    if moe is None or i < moe.first_dense_layers or (i + 1) % moe.layer_step:
        return model.intermediate_size * model.hidden_size
    shared = moe.shared_intermediate_size or moe.shared_experts * moe.intermediate_size
    return (moe.num_experts * moe.intermediate_size + shared) * model.hidden_size


def file_type_counts(model: ModelSpec, file_type: GgufFileType) -> dict[str, int]:
    """Elements per tensor type of the model quantized to `file_type` by llama.cpp's rule."""
    n = model.num_hidden_layers
    total = parameter_count(model)
    embedding = model.vocab_size * model.hidden_size
    output = 0 if model.tie_word_embeddings else embedding
    more = 0
    if file_type.more_bits is not None:
        more = sum(_attn_v(model) + _ffn_down(model, i) for i in range(n) if _more_bits_layer(i, n))
    counts: dict[str, int] = {}
    # a tied embedding is the LM head too, and llama.cpp gives it the output's type
    head = embedding if model.tie_word_embeddings else output
    for kind, elements in (
        (file_type.base, total - embedding - output - more + (0 if model.tie_word_embeddings else embedding)),
        (file_type.more_bits or file_type.base, more),
        (file_type.output, head),
    ):
        counts[kind] = counts.get(kind, 0) + elements
    return counts


def type_counts(parameters: Mapping[str, int], catalog: Catalog) -> dict[str, int] | None:
    """A checkpoint's element counts when they are keyed by GGUF tensor types, else None."""
    # the quantized types only: F16/BF16/F32 are safetensors dtypes too
    known = {t.id for t in catalog.dtypes.gguf_types if not t.cast}
    counts = {key.upper(): value for key, value in parameters.items()}
    if not any(key in known for key in counts):
        return None
    return counts


def gguf_bytes(
    counts: Mapping[str, int], catalog: Catalog, served_dtype_bytes: float
) -> tuple[int, list[str]]:
    """Bytes of those elements on the GPU, and the types the catalog does not know."""
    types = {t.id: t for t in catalog.dtypes.gguf_types}
    total, unknown = 0.0, []
    for kind, elements in counts.items():
        spec = types.get(kind)
        if spec is None:
            unknown.append(kind)
        else:
            total += elements * (served_dtype_bytes if spec.cast else spec.bytes_per_weight)
    return int(total), sorted(unknown)
