"""A context-free OOM is placed by the caller's model and GPU only when the weights cannot fit."""

from __future__ import annotations

import pytest

from service.diagnosis import classify_text
from service.diagnosis.hints import (
    budget_reading,
    checkpoint_gib,
    gpu_gib_told,
    gpu_named,
    gpus_counted,
    model_named,
    model_params_billion,
    weights_hint,
)
from service.diagnosis.placement import BudgetReading
from service.packs import load_packs

CATALOG = load_packs().catalog
MARGINS = load_packs().evidence.in_use_margins


def budget_hint(facts: dict[str, object]) -> BudgetReading | None:
    return budget_reading(facts, CATALOG, MARGINS)


@pytest.mark.parametrize(
    ("model", "billions"),
    [
        ("Qwen/Qwen2.5-72B-Instruct", 72.0),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56.0),
        ("Qwen/Qwen2.5-0.5B-Instruct", 0.5),
        ("meta-llama/Llama-3.1-8B", 8.0),
        ("facebook/opt-125m", None),
    ],
)
def test_parameter_count_is_read_from_the_model_id(model: str, billions: float | None) -> None:
    assert model_params_billion(model) == billions


def test_weights_larger_than_the_gpu_mean_weights_oom() -> None:
    assert (
        weights_hint({"model": "meta-llama/Llama-3.3-70B-Instruct", "gpu_name": "RTX 4090"}, CATALOG)
        == "weights_oom"
    )


def test_tensor_parallel_split_and_quantization_count() -> None:
    facts: dict[str, object] = {"model": "Qwen/Qwen2.5-72B-Instruct", "total_gib": 79.19}
    assert weights_hint(facts, CATALOG) == "weights_oom"
    assert weights_hint({**facts, "tensor_parallel_size": 4}, CATALOG) is None
    assert weights_hint({**facts, "model": "Qwen/Qwen2.5-72B-Instruct-AWQ"}, CATALOG) is None


def test_gpu_memory_and_weight_widths_come_from_the_catalog() -> None:
    """Issue 11: hints.py kept its own table of GPU sizes and quantization widths."""
    facts: dict[str, object] = {"model": "org/Some-34B-Instruct"}
    # 34e9 × 2 bytes = 63.3 GiB: more than an L40S (44.39 GiB), less than an H100 (79.19 GiB)
    assert weights_hint({**facts, "gpu_name": "NVIDIA L40S"}, CATALOG) == "weights_oom"
    assert weights_hint({**facts, "gpu_name": "NVIDIA H100 80GB HBM3"}, CATALOG) is None
    assert weights_hint({**facts, "gpu_name": "L40S", "quantization": "awq"}, CATALOG) is None
    assert weights_hint({**facts, "gpu_name": "L40S", "dtype": "float32"}, CATALOG) == "weights_oom"
    assert weights_hint({**facts, "gpu_name": "some 48GB card"}, CATALOG) == "weights_oom"


def test_unknown_size_or_model_gives_no_hint() -> None:
    assert weights_hint({"model": "Qwen/Qwen2.5-72B-Instruct"}, CATALOG) is None
    assert weights_hint({"gpu_name": "H100 80GB"}, CATALOG) is None


def test_catalog_budget_places_a_context_free_oom_for_models_without_a_size_in_the_name() -> None:
    assert weights_hint({"model": "deepseek-ai/DeepSeek-V3", "total_gib": 79.19}, CATALOG) is None
    assert budget_hint({"model": "deepseek-ai/DeepSeek-V3", "total_gib": 79.19}) == BudgetReading(
        weights="exceed"
    )
    assert budget_hint({"model": "facebook/opt-125m", "total_gib": 79.19}) == BudgetReading(weights="room")
    assert budget_hint({"model": "no-such/model-xyz", "total_gib": 79.19}) is None


@pytest.mark.parametrize(
    ("words", "gpu"),
    [
        ("I'm running it on Google Colab using the T4 GPU.", "T4"),
        ("We serve it on a single nvidia L4 in the cloud", "L4"),
        ("部署在4张A100-40G上推理的时候报错", "A100-SXM4-40GB"),
        ("It is an RTX 3090 box with 64 GB of RAM", "RTX-3090"),
    ],
)
def test_a_gpu_the_persons_words_name_is_found_in_the_catalog(words: str, gpu: str) -> None:
    assert gpu_named([words], CATALOG) == gpu


def test_several_or_no_gpus_named_name_none() -> None:
    assert gpu_named(["It fails on the L4 GPU but works on an H100 NVL"], CATALOG) is None
    assert gpu_named(["The W4A16 checkpoint and section A2 of the docs"], CATALOG) is None
    assert gpu_named(["It crashes on my laptop"], CATALOG) is None


ON_T4 = "Hi, I am running this on the T4 GPU in Colab."
BARE_CUT_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU "


@pytest.mark.parametrize(
    ("command", "words", "phase"),
    [
        # 70B at 16 bits cannot load on one 16 GB card: the cut OOM happened while loading
        ("vllm serve meta-llama/Llama-3.1-70B-Instruct", ON_T4, "weights_oom"),
        ("vllm serve Qwen/Qwen2.5-32B-Instruct", "The machine has one NVIDIA L4 card", "weights_oom"),
        # a 1.5B model fits: the words do not make it a loading failure
        ("vllm serve Qwen/Qwen2.5-1.5B-Instruct", ON_T4, "warmup_oom"),
    ],
)
def test_a_named_model_that_cannot_fit_the_named_gpu_places_a_bare_oom(
    command: str, words: str, phase: str
) -> None:
    log = f"{words}\n\n`{command}`\n\n{BARE_CUT_OOM}\n"
    assert classify_text(log, load_packs()).phase == phase


def test_weights_that_cannot_fit_do_not_move_a_failure_told_before_any_weight_loaded() -> None:
    # the person saw it fail in the device set-up, before loading: that the 70B would not have fit
    # the card either says nothing of this failure (the root is the earliest)
    command = "vllm serve meta-llama/Llama-3.1-70B-Instruct"
    told = "It fails before the model weights are loaded, right at CUDA initialization."
    log = f"{ON_T4} {told}\n\n`{command}`\n\n{BARE_CUT_OOM}\n"
    assert classify_text(log, load_packs()).phase == "startup_budget"


@pytest.mark.parametrize(
    ("words", "count"),
    [
        ("we serve it on 8x A100 80GB", 8),
        ("I have two 3090s and it still fails", 2),
        ("服务器是4张A100-40G", 4),
        ("用两块4090跑", 2),
        ("a dual RTX 4090 workstation", 2),
        ("node with H100 x 4", 4),
        ("on a single 4090 GPU", None),
        ("vLLM 0.8 on an A100", None),
        ("2x A100 for the trainer and 4x H100 for serving", None),
    ],
)
def test_the_gpu_count_a_persons_words_give_is_read(words: str, count: int | None) -> None:
    assert gpus_counted([words], CATALOG) == count


def test_weights_that_fit_over_the_gpus_the_person_counts_are_not_a_loading_failure() -> None:
    # 70B in bf16 (~130 GiB) cannot fit one 80 GiB GPU, but fits four of them
    command = "vllm serve meta-llama/Llama-3.1-70B-Instruct"
    one = f"The machine has one A100-80G card\n\n`{command}`\n\n{BARE_CUT_OOM}\n"
    four = f"The machine has 4x A100-80G cards\n\n`{command}`\n\n{BARE_CUT_OOM}\n"
    assert classify_text(one, load_packs()).phase == "weights_oom"
    assert classify_text(four, load_packs()).phase != "weights_oom"


def test_the_failing_process_far_below_its_weights_was_still_loading() -> None:
    # 70B in bf16 over TP 2 is about 66 GiB per GPU; the process held 31 GiB of it
    facts: dict[str, object] = {"model": "meta-llama/Llama-3.1-70B-Instruct", "total_gib": 79.25}
    reading = budget_hint({**facts, "tensor_parallel_size": 2, "process_in_use_gib": 31.2})
    assert reading is not None and reading.held == "below_weights"


def test_the_failing_process_holding_weights_and_pool_had_allocated_the_kv_cache() -> None:
    facts: dict[str, object] = {"model": "meta-llama/Llama-3.1-8B-Instruct", "total_gib": 79.19}
    assert budget_hint({**facts, "process_in_use_gib": 78.6}) == BudgetReading(
        weights="room", held="weights_and_pool"
    )
    # at its weights alone (about 15 GiB) the last layer loading and the profiling run look alike
    assert budget_hint({**facts, "process_in_use_gib": 16.0}) == BudgetReading(weights="room")


def test_a_quantization_the_checkpoint_lacks_loads_at_the_checkpoints_width() -> None:
    # Qwen2.5-14B: about 14 GiB once in fp8, but its 27.5 GiB of bf16 weights load first
    facts: dict[str, object] = {"model": "Qwen/Qwen2.5-14B-Instruct", "total_gib": 23.65}
    assert budget_hint({**facts, "quantization": "fp8"}) == BudgetReading(weights="exceed")
    # a checkpoint quantized on disk loads at its own width
    assert budget_hint({**facts, "model": "Qwen/Qwen2.5-14B-Instruct-AWQ"}) == BudgetReading(weights="room")


@pytest.mark.parametrize(
    ("words", "model"),
    [
        ("用Qwen2-72B在A800上跑，一启动就报错", "Qwen2-72B-Instruct"),
        ("serving meta-llama/Llama-3.1-8B-Instruct on one L4", "Llama-3.1-8B-Instruct"),
        ("it is Llama 3.1 70B on eight H100s", "Llama-3.1-70B-Instruct"),
        ("serving Llama-3-70B on two 4090s", "Meta-Llama-3-70B-Instruct"),
        ("serving a 70b on two 4090s", "1x70B"),  # no model named: its size class
        ("serving Yi-Lightning-70B-int4 on two 4090s", None),  # a name the catalog lacks: not sized
        ("a 13B model on a T4", "1x13B"),
        ("It crashes on my laptop", None),
        ("the 7B works, the 70B does not", None),  # two sizes: none
    ],
)
def test_the_model_a_persons_words_name_is_the_catalogs_or_its_size_class(
    words: str, model: str | None
) -> None:
    assert model_named([words], CATALOG) == model


def test_a_size_class_is_sized_from_its_number() -> None:
    assert model_params_billion("1x13B") == 13.0
    assert checkpoint_gib({"model": "1x13B"}, CATALOG) == pytest.approx(13e9 * 2 / 2**30)


@pytest.mark.parametrize(
    ("words", "gib"),
    [
        ("on a 24GB card", 23.52),  # the median of the 24 GB cards the catalog holds
        ("80G显存，跑Qwen2.5-72B-Instruct", None),
        ("Llama-3.1-8B on two 16 GB V100s", 15.6),
        ("the files are 16 GB in total", None),
        ("a 24GB card and a 48GB card", None),
    ],
)
def test_the_gpu_memory_a_persons_words_give(words: str, gib: float | None) -> None:
    told = gpu_gib_told([words], CATALOG)
    if gib is None and "显存" in words:
        assert told is not None and 79 < told <= 80
    else:
        assert told == (pytest.approx(gib) if gib is not None else None)
