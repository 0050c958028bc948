"""A local GGUF file's header gives the tensor types the budget sizes (the name says which model it is)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from service.budget import estimate, find_model
from service.budget.gguf import file_type_counts
from service.errors import InvalidConfigError
from service.models.chain import ModelResolver, ModelSettings
from service.models.gguf import read_tensor_types
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

NAME = "Meta-Llama-3.1-8B-Instruct-Q8_0.gguf"


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _gguf(tensors: list[tuple[str, list[int], int]], *, version: int = 3) -> bytes:
    """A GGUF header as llama.cpp writes one: metadata (a string, a string array, a u32), tensor infos."""
    metadata = [
        _string("general.architecture") + struct.pack("<I", 8) + _string("llama"),
        _string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + b"".join(_string(t) for t in "abc"),
        _string("llama.block_count") + struct.pack("<II", 4, 32),
    ]
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata)) + b"".join(metadata)
    for name, dims, kind in tensors:
        out += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, 0)
    return out


def _ids(catalog: Catalog) -> dict[str, int]:
    return {t.id: t.ggml_type for t in catalog.dtypes.gguf_types}


def _q8_file(catalog: Catalog, folder: Path, name: str = NAME) -> Path:
    """A header whose tensors hold Llama-3.1-8B's elements in Q8_0, with F32 norms."""
    model = find_model(catalog, "Llama-3.1-8B-Instruct")[0]
    [q8] = [f for f in catalog.dtypes.gguf_file_types if f.id == "Q8_0"]
    elements = file_type_counts(model, q8)["Q8_0"]
    ids = _ids(catalog)
    path = folder / name
    path.write_bytes(
        _gguf([("blk.all.weight", [4096, elements // 4096], ids["Q8_0"]), ("norms", [266240], ids["F32"])])
    )
    return path


def test_the_header_gives_elements_per_tensor_type(catalog: Catalog, tmp_path: Path) -> None:
    path = _q8_file(catalog, tmp_path)
    names = {t.ggml_type: t.id for t in catalog.dtypes.gguf_types}
    counts = read_tensor_types(path, names)
    assert set(counts) == {"Q8_0", "F32"} and counts["F32"] == 266240


def test_shards_are_summed_over_their_siblings(catalog: Catalog, tmp_path: Path) -> None:
    ids = _ids(catalog)
    for i in (1, 2):
        (tmp_path / f"m-Q4_K_M-0000{i}-of-00002.gguf").write_bytes(_gguf([("t", [256, 4], ids["Q4_K"])]))
    names = {v: k for k, v in ids.items()}
    assert read_tensor_types(tmp_path / "m-Q4_K_M-00001-of-00002.gguf", names) == {"Q4_K": 2048}


def test_a_local_gguf_file_is_sized_from_its_header(catalog: Catalog, tmp_path: Path) -> None:
    path = _q8_file(catalog, tmp_path)
    request = EstimateRequest(model=str(path), gpu="L4", vllm_version="0.33.0")
    prepared, resolved = ModelResolver(ModelSettings(cache_dir=str(tmp_path / "hf"))).prepare(
        request, catalog
    )
    assert resolved.source == "catalog" and prepared.parameters is not None
    budget = estimate(prepared, catalog)
    assert "its header: F32, Q8_0" in " ".join(budget.notes)
    assert budget.weights_gib == pytest.approx(7.95, abs=0.05)


def test_the_service_reads_no_gguf_path_of_its_own_disk(catalog: Catalog, tmp_path: Path) -> None:
    path = _q8_file(catalog, tmp_path)
    request = EstimateRequest(model=str(path), gpu="L4", vllm_version="0.33.0")
    settings = ModelSettings(cache_dir=str(tmp_path / "hf"), local_paths=False)
    prepared, _ = ModelResolver(settings).prepare(request, catalog)
    assert prepared.parameters is None  # sized by the name's file type instead


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"NOPE" + b"\0" * 20, "no GGUF magic"),
        (_gguf([("t", [32], 8)])[:30], "ends inside its GGUF header"),
        (_gguf([("t", [32], 8)], version=1), "GGUF version 1"),
        (b"GGUF" + struct.pack("<IQQ", 3, 10**9, 0), "claims 1000000000 tensors"),
        (b"", "ends inside its GGUF header"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**63), "a count of 9223372036854775808"),
        (  # arrays of arrays of arrays...: a bounded depth, not a RecursionError
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + _string("k")
            + struct.pack("<I", 9)
            + struct.pack("<IQ", 9, 1) * 5000,
            "nests GGUF metadata arrays deeper than",
        ),
        (  # a string array claiming 49 million items in a few bytes ends at the file's end
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("k") + struct.pack("<IIQ", 9, 8, 49_000_000),
            "ends inside its GGUF header",
        ),
        (_gguf([("t", [2**63] * 4, 8)]), "has a tensor of .* elements; not a GGUF model"),
    ],
)
def test_a_broken_gguf_header_is_a_clear_error(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)
    with pytest.raises(InvalidConfigError, match=said):
        read_tensor_types(path, {8: "Q8_0"})
