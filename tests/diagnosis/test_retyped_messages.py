"""A vLLM message a person retyped in shorthand (words dropped, `<` for "is less than") is still
read as its template, with the template's own facts; a message cut after its first words is read
by the opening of its template (the fragments table's heads). Neither fires on prose that only
shares words with a template, nor on vLLM's own lines printed by its logger."""

from __future__ import annotations

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis


def _diagnose(packs: RulePacks, log: str) -> Diagnosis:
    return classify(DiagnoseRequest(log=log), packs)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(
            "Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57 GiB)", id="lt"
        ),
        pytest.param(
            "free memory on device (38.74/121.63 GiB) on startup less than desired gpu memory "
            "utilization (0.35, 42.57 GiB)",
            id="lower-case-dropped-words",
        ),
        pytest.param(
            "> `Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57 GiB)`",
            id="quoted-in-markdown",
        ),
    ],
)
def test_a_retyped_startup_check_is_startup_budget_with_its_four_facts(packs: RulePacks, line: str) -> None:
    log = f"The coder instance failed engine init:\n\n{line}\n\nso we lowered the utilization."
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == "startup_budget"
    facts = diagnosis.facts
    assert (facts.free_gib, facts.total_gib) == (38.74, 121.63)
    assert (facts.gpu_memory_utilization, facts.requested_gib) == (0.35, 42.57)
    assert diagnosis.confidence < 0.95  # weaker than the message itself


def test_a_retyped_kv_check_reads_the_templates_own_fact_names(packs: RulePacks) -> None:
    log = "got: max seq len (32768) larger than max tokens in KV cache (7344), what now?"
    diagnosis = _diagnose(packs, log)
    assert diagnosis.phase == "kv_cache_capacity"
    assert diagnosis.facts.max_model_len == 32768


@pytest.mark.parametrize(
    "log",
    [
        pytest.param(
            "INFO 03-09 01:15:14 [gpu_worker.py:250] Free memory on device (110.37/121.69 GiB) on "
            "startup. Desired GPU memory utilization is (0.87, 105.87 GiB).",
            id="v1-startup-info-line",
        ),
        pytest.param(
            "Free memory on device (110.37/121.69 GiB) on startup. Desired GPU memory utilization "
            "is (0.87, 105.87 GiB).",
            id="info-wording-without-the-comparison",
        ),
        pytest.param(
            "Can I still use FP8 E5M2 KV Cache if my GPU capability is less than 8.9?",
            id="question-with-a-version",
        ),
        pytest.param(
            "We set gpu memory utilization to 0.9 and the free memory on the box is 70 of 80 GiB, all fine.",
            id="prose-sharing-words-and-numbers",
        ),
    ],
)
def test_lines_that_only_share_words_with_a_template_are_no_failure(packs: RulePacks, log: str) -> None:
    assert _diagnose(packs, log).phase == "no_failure"


@pytest.mark.parametrize(
    "message",
    ["Prequant BitsAndBytes", "Prequant BitsAndBytes models", "Prequant BitsAndBytes models with"],
)
def test_a_raised_message_cut_after_its_first_words_is_its_templates_phase(
    packs: RulePacks, message: str
) -> None:
    log = (
        'Traceback (most recent call last):\n  File "/usr/lib/python3/site-packages/vllm/model_executor/'
        'model_loader/loader.py", line 1058, in _load_weights\n    raise ValueError(\n'
        f"ValueError: {message}\n"
    )
    assert _diagnose(packs, log).phase == "quantization_config"


def test_a_cut_head_of_another_exception_class_is_not_that_template(packs: RulePacks) -> None:
    log = "KeyError: Prequant BitsAndBytes\n"
    assert _diagnose(packs, log).phase != "quantization_config"
