"""Figures vLLM itself printed wrong (rules/misleading.yaml) are kept as printed, flagged with the
bug and its source, and left out of what the budget and the fixes compute with."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.commands.diagnose import render_report
from service.core import diagnose
from service.diagnosis import classify_text
from service.diagnosis.misleading import arithmetic_facts
from service.errors import PackError
from service.packs import RulePacks
from service.packs.misleading import load_misleading
from service.schemas import DiagnoseRequest

MAMBA = "Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size."
HYBRID_BOOT = f"""\
INFO 01-20 10:00:00 [api_server.py:1] vLLM API server version {{version}}
INFO 01-20 10:00:05 [config.py:1] {MAMBA}
INFO 01-20 10:01:00 [kv_cache_utils.py:1] GPU KV cache size: 290,864 tokens
INFO 01-20 10:01:00 [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per request: 33.04x
INFO 01-20 10:02:00 [api_server.py:1] Application startup complete.
"""


def _flagged(packs: RulePacks, log: str) -> dict[str, bool]:
    return {item.fact: item.usable for item in classify_text(log, packs).misleading}


def test_a_hybrid_models_kv_token_count_in_the_affected_releases_is_flagged_and_kept(
    packs: RulePacks,
) -> None:
    diagnosis = classify_text(HYBRID_BOOT.format(version="0.14.1"), packs)
    (flag,) = diagnosis.misleading
    assert (flag.fact, flag.bug, flag.usable) == ("kv_cache_tokens", "vllm-v1-kv-tokens-hybrid-groups", False)
    assert "40691" in flag.source
    assert diagnosis.facts.kv_cache_tokens == 290864
    assert arithmetic_facts(diagnosis).kv_cache_tokens is None
    assert arithmetic_facts(diagnosis).max_concurrency == 33.04


def test_the_same_line_after_the_fix_or_without_a_hybrid_layout_is_not_flagged(packs: RulePacks) -> None:
    plain = "\n".join(line for line in HYBRID_BOOT.splitlines() if "mamba" not in line)
    assert _flagged(packs, HYBRID_BOOT.format(version="0.21.0")) == {}
    assert _flagged(packs, plain.format(version="0.14.1")) == {}


def test_an_unknown_version_does_not_assume_a_bug_that_was_fixed(packs: RulePacks) -> None:
    unversioned = "\n".join(HYBRID_BOOT.splitlines()[1:])
    assert _flagged(packs, unversioned) == {}


def test_v0_weights_printed_as_gb_are_flagged_as_gib_and_still_computed_with(packs: RulePacks) -> None:
    log = (
        "INFO 05-01 10:00:00 api_server.py:1] vLLM API server version 0.6.3\n"
        "INFO 05-01 10:00:30 model_runner.py:1] Loading model weights took 14.9888 GB\n"
    )
    diagnosis = classify_text(log, packs)
    assert {item.fact: item.usable for item in diagnosis.misleading} == {"model_weights_gib": True}
    assert arithmetic_facts(diagnosis).model_weights_gib == 14.9888


def test_the_full_diagnosis_keeps_the_flagged_figure_in_its_facts(packs: RulePacks) -> None:
    result = diagnose(DiagnoseRequest(log=HYBRID_BOOT.format(version="0.14.1")), packs)
    assert result.facts.kv_cache_tokens == 290864
    assert [item.fact for item in result.misleading] == ["kv_cache_tokens"]


def _bugs_file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "misleading.yaml").write_text(body, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "bugs:\n  - {id: a-b, fact: kv_cache_tokens, rules: [no-such-rule], versions: {},"
            " note: n, source: s}\n",
            "unknown rule",
        ),
        (
            "bugs:\n  - {id: a-b, fact: not_a_fact, rules: [r-1], versions: {}, note: n, source: s}\n",
            "unknown fact",
        ),
        (
            "bugs:\n  - {id: a-b, fact: kv_cache_tokens, rules: [r-1], versions: {}, wording: '(',"
            " note: n, source: s}\n",
            "not RE2",
        ),
    ],
)
def test_a_bad_logging_bug_entry_is_a_pack_error_naming_it(tmp_path: Path, body: str, problem: str) -> None:
    with pytest.raises(PackError, match=problem):
        load_misleading(_bugs_file(tmp_path, body), {"r-1": object()})


def test_the_text_report_says_which_figure_misleads_and_why(packs: RulePacks) -> None:
    report = render_report(diagnose(DiagnoseRequest(log=HYBRID_BOOT.format(version="0.14.1")), packs))
    assert "! kv_cache_tokens is misleading as vLLM printed it (not computed with)" in report


MISREPORTED = (
    '{"error":{"message":"This model\'s maximum context length is 3 tokens. However, your request has 8 '
    'input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value=8)",'
    '"type":"BadRequestError","param":"input_tokens","code":400}}'
)


def test_a_completions_limit_less_max_tokens_is_flagged_and_implies_no_max_model_len(
    packs: RulePacks,
) -> None:
    # 0.10-0.15 printed max_model_len - max_tokens here; the wording itself dates the log
    log = f"vllm serve ./llama-194m --max-model-len 2048\n\n{MISREPORTED}\n"
    diagnosis = classify_text(log, packs)
    assert diagnosis.phase == "request_too_long"
    assert diagnosis.facts.context_limit == 3  # kept as printed
    assert diagnosis.facts.max_model_len == 2048  # from the command, not the misprinted limit
    assert [m.bug for m in diagnosis.misleading] == ["vllm-completions-limit-less-max-tokens"]
    assert arithmetic_facts(diagnosis).context_limit is None


def test_a_release_past_the_fix_is_not_flagged(packs: RulePacks) -> None:
    diagnosis = classify_text(f"{MISREPORTED}\n", packs, vllm_version="0.16.0")
    assert diagnosis.misleading == []
    assert diagnosis.facts.max_model_len == 3
