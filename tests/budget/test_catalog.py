"""The catalogs load, meet the issue's coverage, and reject bad entries naming file, entry, field, line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from service.budget import estimate, parameter_count
from service.budget.resolve import other_sizes
from service.errors import PackError
from service.packs.catalog import (
    Catalog,
    fold_name,
    gfx_capability,
    gpu_short_name,
    load_catalog,
    version_tuple,
)
from service.schemas import EstimateRequest

from .conftest import RULES


def test_catalog_covers_forty_models_and_thirty_gpus(catalog: Catalog) -> None:
    assert len(catalog.models.models) >= 40
    assert len(catalog.gpus.gpus) >= 30


@pytest.mark.parametrize(
    "family",
    [
        "Llama-2",
        "Llama-3-",
        "Llama-3.1",
        "Llama-3.2",
        "Llama-3.3",
        "Qwen2.5",
        "Qwen3-8B",
        "Qwen3-30B-A3B",
        "Mistral-7B",
        "Mixtral",
        "gemma-2",
        "gemma-3",
        "Phi-3",
        "phi-4",
        "DeepSeek-V2",
        "DeepSeek-V3",
        "DeepSeek-R1",
        "Distill",
        "gpt-oss",
        "Qwen2.5-0.5B-Instruct",
        "TinyLlama",
        "opt-125m",
    ],
)
def test_catalog_covers_each_family_the_issue_names(catalog: Catalog, family: str) -> None:
    assert any(family.lower() in m.id.lower() for m in catalog.models.models)


@pytest.mark.parametrize(
    "gpu",
    [
        "T4",
        "V100-SXM2-16GB",
        "V100-SXM2-32GB",
        "RTX-2080-Ti",
        "RTX-3090",
        "RTX-4090",
        "RTX-5090",
        "A10",
        "A10G",
        "L4",
        "L20",
        "L40S",
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "H100-PCIE-80GB",
        "H100-SXM-80GB",
        "H100-NVL",
        "H20",
        "H200",
        "B200",
        "GB10",
        "V100-PCIE-16GB",
        "V100-PCIE-32GB",
        "RTX-2060",
        "RTX-3060",
        "RTX-3070",
        "RTX-4060",
        "RTX-4060-Ti-8GB",
        "RTX-4060-Ti-16GB",
        "RTX-4070",
        "RTX-4070-Ti",
        "RTX-4070-Super",
        "RTX-4060-Laptop",
        "RTX-4070-Laptop",
        "RTX-4080-Laptop",
        "RTX-4090-Laptop",
        "RTX-5060",
        "RTX-5070",
        "RTX-5080",
        "RTX-A4000",
        "RTX-A6000",
        "RTX-4000-Ada",
        "RTX-6000-Ada",
        "L40",
        "A30",
        "A40",
        "H800",
        "GH200",
        "B300",
        "GB200",
        "MI100",
        "MI210",
        "MI250X",
        "MI300X",
        "MI325X",
        "MI355X",
        "RX-7900-XTX",
        "Radeon-PRO-W7900",
        "Arc-A770",
        "Arc-B580",
        "Arc-Pro-B60",
        "Gaudi2",
        "Gaudi3",
        "Strix-Halo",
    ],
)
def test_catalog_covers_each_gpu_the_issue_names(catalog: Catalog, gpu: str) -> None:
    assert gpu in {g.id for g in catalog.gpus.gpus}


def test_every_gpu_name_leads_to_one_entry(catalog: Catalog) -> None:
    """An NVML name or alias that two entries share would silently resolve to whichever sorts first."""
    owners: dict[str, set[str]] = {}
    for gpu in catalog.gpus.gpus:
        for name in (gpu.id, *gpu.aliases):
            for key in {fold_name(name), fold_name(gpu_short_name(name))}:
                owners.setdefault(key, set()).add(gpu.id)
    shared = {key: ids for key, ids in owners.items() if len(ids) > 1}
    assert shared == {}


def test_every_gpu_names_its_capability_or_its_platforms_equivalent(catalog: Catalog) -> None:
    for gpu in catalog.gpus.gpus:
        if gpu.vendor == "intel":
            assert gpu.arch, gpu.id  # vLLM's XPU and HPU platforms report no capability
        else:
            assert gpu.capability is not None, gpu.id


@pytest.mark.parametrize(
    ("arch", "capability"), [("gfx90a", (9, 0)), ("gfx942", (9, 4)), ("gfx1100", (11, 0))]
)
def test_amd_capability_is_derived_from_the_gfx_arch_as_hip_does(
    arch: str, capability: tuple[int, int]
) -> None:
    assert gfx_capability(arch) == capability


def test_unified_memory_systems_say_so_in_the_budget(catalog: Catalog) -> None:
    for name in ("GB10", "Strix-Halo"):
        budget = estimate(EstimateRequest(model="Qwen2.5-0.5B-Instruct", gpu=name), catalog)
        assert any("shares memory with the host" in note for note in budget.notes), name


def test_an_amd_gpu_with_an_nvidia_capability_is_rejected(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    _replace(
        rules / "catalog" / "gpus.yaml",
        "vendor: amd, arch: gfx942,",
        'vendor: amd, compute_capability: "9.4",',
    )
    with pytest.raises(PackError, match="only NVIDIA GPUs name a compute_capability"):
        load_catalog(rules)


@pytest.mark.parametrize(
    ("model", "count"),
    [
        ("Llama-3.1-8B-Instruct", 8_030_261_248),
        ("Qwen2.5-0.5B-Instruct", 494_032_768),
        ("Llama-2-7b-hf", 6_738_415_616),
        ("TinyLlama-1.1B-Chat-v1.0", 1_100_048_384),
        ("opt-125m", 125_239_296),
        ("gemma-2-9b-it", 9_241_705_984),
        ("gemma-3-4b-it", 4_300_079_472),
        ("Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),
        ("Qwen3-30B-A3B", 30_532_122_624),
        ("DeepSeek-V3", 671_026_419_200),
        ("gpt-oss-20b", 20_914_757_184),
        ("gpt-oss-120b", 116_829_156_672),
    ],
)
def test_parameter_counts_are_computed_from_the_architecture(
    catalog: Catalog, model: str, count: int
) -> None:
    spec = next(m for m in catalog.models.models if m.id == model)
    assert parameter_count(spec) == count


def test_every_checkpoint_names_a_known_base_and_method(catalog: Catalog) -> None:
    ids = {m.id for m in catalog.models.models}
    methods = {q.id for q in catalog.dtypes.quantization}
    for ckpt in catalog.models.checkpoints:
        assert ckpt.base in ids and ckpt.quantization.method in methods


def test_awq_bytes_per_weight_include_group_scales_and_zero_points(catalog: Catalog) -> None:
    awq = next(q for q in catalog.dtypes.quantization if q.id == "awq")
    assert awq.bytes_per_weight == pytest.approx(0.5 + 2.5 / 128)


def test_version_tuple_orders_release_spellings() -> None:
    assert version_tuple("v0.10.1.1") == (0, 10, 1)
    assert version_tuple("0.11.0rc2") < version_tuple("0.29")
    with pytest.raises(ValueError, match="not a vLLM version"):
        version_tuple("latest")


def _copy_rules(tmp_path: Path) -> Path:
    shutil.copytree(RULES / "catalog", tmp_path / "catalog")
    return tmp_path


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_bad_model_field_names_file_entry_path_and_line(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    models = rules / "catalog" / "models.yaml"
    _replace(
        models,
        "num_attention_heads: 14\n    num_key_value_heads: 2\n",
        "num_attention_heads: 14\n    num_key_value_heads: 3\n",
    )
    with pytest.raises(PackError) as caught:
        load_catalog(rules)
    error = caught.value
    assert error.file == "catalog/models.yaml"
    assert error.rule_id == "Qwen2.5-0.5B-Instruct"
    assert error.path is not None and error.path.startswith("$.models[")
    assert "multiple of num_key_value_heads" in str(error)
    assert error.line is not None
    line = models.read_text(encoding="utf-8").splitlines()[error.line - 1]
    assert "Qwen2.5-0.5B-Instruct" in line


def test_wrong_type_points_at_the_line_of_the_field(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    gpus = rules / "catalog" / "gpus.yaml"
    _replace(gpus, "{id: T4, nominal_gb: 16, total_gib: 14.75", "{id: T4, nominal_gb: 16, total_gib: lots")
    with pytest.raises(PackError) as caught:
        load_catalog(rules)
    error = caught.value
    assert error.rule_id == "T4"
    assert error.path is not None and error.path.endswith(".total_gib")
    assert (
        error.line is not None and "id: T4" in gpus.read_text(encoding="utf-8").splitlines()[error.line - 1]
    )


def test_unsorted_table_is_rejected(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    _replace(rules / "catalog" / "gpus.yaml", "{id: A10,", "{id: Z10,")
    with pytest.raises(PackError, match="sorted"):
        load_catalog(rules)


def test_gpu_claiming_fp8_below_ada_is_rejected(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    _replace(
        rules / "catalog" / "gpus.yaml",
        'compute_capability: "7.5", bf16: false, fp8: false, fp4: false, aliases: [Tesla T4',
        'compute_capability: "7.5", bf16: false, fp8: true, fp4: false, aliases: [Tesla T4',
    )
    with pytest.raises(PackError, match="fp8 needs compute capability"):
        load_catalog(rules)


def test_checkpoint_with_unknown_quantization_method_is_rejected(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    _replace(
        rules / "catalog" / "models.yaml",
        "quantization: {method: gptq-int8}",
        "quantization: {method: gptq-int3}",
    )
    with pytest.raises(PackError) as caught:
        load_catalog(rules)
    assert "gptq-int3" in str(caught.value) and caught.value.path is not None


def test_missing_catalog_file_is_a_pack_error(tmp_path: Path) -> None:
    rules = _copy_rules(tmp_path)
    (rules / "catalog" / "engines.yaml").unlink()
    with pytest.raises(PackError, match="cannot be read"):
        load_catalog(rules)


@pytest.mark.parametrize(
    ("typed", "others"),
    [
        ("A100", ["A100-PCIE-40GB", "A100-SXM4-40GB"]),  # the 40 GB cards it also abbreviates
        ("NVIDIA A100", ["A100-PCIE-40GB", "A100-SXM4-40GB"]),
        ("A100-80GB", []),  # a full name abbreviates no card of another size
        ("A10", []),  # a digit follows: "A10" is not short for "A100"
    ],
)
def test_a_gpu_name_that_abbreviates_cards_of_another_size_names_them(
    catalog: Catalog, typed: str, others: list[str]
) -> None:
    chosen = next(g for g in catalog.gpus.gpus if g.id == "A100-SXM4-80GB")
    found = other_sizes(catalog, typed, chosen)
    assert [name for name in found if name.startswith("A100")] == others
