"""Block Kit rendering: golden snapshots of each kind of answer, and Slack's limits on every one.

Set VRAMDOC_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from agent_standin import h100_snapshot
from bot_samples import kv_capacity_diagnosis, qwen_budget
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.blocks import (
    LIMITS,
    Message,
    limit_violations,
    render_budget,
    render_diagnosis,
    render_error,
    render_help,
    render_snapshots,
)
from bot.clients import HostFailure
from service.schemas import Diagnosis, Evidence, Fix

GOLDEN = Path(__file__).parent / "golden"

SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def _check_golden(name: str, message: Message) -> None:
    path = GOLDEN / f"{name}.json"
    actual = json.loads(msgspec.json.encode(message))
    if os.environ.get("VRAMDOC_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert actual == json.loads(path.read_text(encoding="utf-8")), f"{path.name} differs from the rendering"


def _all_strings(message: Message) -> str:
    return msgspec.json.encode(message).decode()


CASES = {
    "diagnosis_kv_capacity": lambda: render_diagnosis(kv_capacity_diagnosis()),
    "diagnosis_all_fixes": lambda: render_diagnosis(kv_capacity_diagnosis(), all_fixes=True),
    "diagnosis_with_live_gpus": lambda: render_diagnosis(
        kv_capacity_diagnosis(with_budget=False),
        snapshots=[h100_snapshot("gpu-07")],
        failures=[HostFailure("gpu-08", "gpu-08 did not answer within 3 s")],
        hosts=["gpu-07", "gpu-08"],
        notes=["I don't know the host gpu-99; known hosts: gpu-07, gpu-08."],
    ),
    "budget_does_not_fit": lambda: render_budget(qwen_budget(fits=False)),
    "budget_fits": lambda: render_budget(qwen_budget(fits=True)),
    "snapshots": lambda: render_snapshots(
        [h100_snapshot("gpu-07")],
        [HostFailure("gpu-08", "gpu-08 refused the connection")],
        hosts=["gpu-07", "gpu-08"],
    ),
    "error": lambda: render_error(
        "The vramdoc service at http://127.0.0.1:8080 refused the connection; try again."
    ),
    "help": lambda: render_help(["gpu-07", "gpu-08"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendering_matches_golden_and_slack_limits(name: str) -> None:
    message = CASES[name]()
    assert limit_violations(message) == []
    _check_golden(name, message)


def test_diagnosis_leads_with_phase_then_shows_top_three_fixes_and_a_show_all_button() -> None:
    message = render_diagnosis(kv_capacity_diagnosis())
    kinds = [b["type"] for b in message.blocks]
    assert kinds[0] == "header"
    assert "kv_cache_capacity" in message.blocks[1]["text"]["text"]
    text = _all_strings(message)
    assert "```--max-model-len 1344```" in text
    assert "--tensor-parallel-size 2" not in text
    assert "show_all_fixes" in text
    assert message.upload is None


def test_all_fixes_drops_the_show_all_button() -> None:
    text = _all_strings(render_diagnosis(kv_capacity_diagnosis(), all_fixes=True))
    assert "--tensor-parallel-size 2" in text and "show_all_fixes" not in text


def test_secrets_in_evidence_are_redacted_in_blocks_text_and_report() -> None:
    base = kv_capacity_diagnosis(fixes=30)
    long_lines = [Evidence(line=i, text=f"HF_TOKEN={SECRET} line {i} " + "x" * 200) for i in range(60)]
    diagnosis = msgspec.structs.replace(base, evidence=long_lines, summary=f"token {SECRET} leaked")
    message = render_diagnosis(diagnosis)
    assert message.upload is not None
    assert SECRET not in _all_strings(message)
    assert "[REDACTED]" in message.upload.content


def test_long_evidence_goes_to_an_uploaded_report_and_the_message_stays_within_limits() -> None:
    base = kv_capacity_diagnosis(fixes=60)
    evidence = [Evidence(line=i, text="E" * 2500) for i in range(400)]
    message = render_diagnosis(
        msgspec.structs.replace(base, evidence=evidence, title="T" * 500), all_fixes=True
    )
    assert limit_violations(message) == []
    assert message.upload is not None
    assert message.upload.content.count("E" * 2500) == 400
    assert "--max-num-seqs 60" in message.upload.content


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3500)


@settings(max_examples=40, deadline=None)
@given(
    title=_text,
    summary=_text,
    evidence=st.lists(st.tuples(st.integers(0, 10**6), _text), max_size=80),
    fixes=st.lists(st.tuples(_text, _text, _text, _text), max_size=70),
    all_fixes=st.booleans(),
)
def test_any_diagnosis_renders_within_slack_limits(
    title: str,
    summary: str,
    evidence: list[tuple[int, str]],
    fixes: list[tuple[str, str, str, str]],
    all_fixes: bool,
) -> None:
    diagnosis: Diagnosis = msgspec.structs.replace(
        kv_capacity_diagnosis(),
        title=title,
        summary=summary,
        evidence=[Evidence(line=n, text=t) for n, t in evidence],
        fixes=[
            Fix(id=f"f{i}", rank=i + 1, title=a, change=b, why=c, tradeoff=d)
            for i, (a, b, c, d) in enumerate(fixes)
        ],
    )
    message = render_diagnosis(
        diagnosis, all_fixes=all_fixes, hosts=["gpu-07"], snapshots=[h100_snapshot("gpu-07")]
    )
    assert limit_violations(message) == []
    assert len(message.blocks) <= LIMITS["blocks"]


def test_limit_checker_catches_violations() -> None:
    bad = Message(
        text="x",
        blocks=[{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]
        + [{"type": "section", "text": {"type": "mrkdwn", "text": "s" * 3001}}] * 50,
    )
    problems = limit_violations(bad)
    assert "51 blocks > 50" in problems
    assert "block 0: header of 151 chars" in problems
    assert "block 1: section text of 3001 chars" in problems


def test_every_corpus_diagnosis_renders_within_slack_limits() -> None:
    """Real diagnoses (the core over the shared corpus) rendered the way the bot posts them."""
    from service.core import diagnose
    from service.packs import load_packs
    from service.schemas import DiagnoseRequest

    packs = load_packs()
    corpus = sorted((Path(__file__).parents[1] / "corpus").rglob("*.log"))
    assert corpus, "the shared corpus is missing"
    for log in corpus:
        diagnosis = diagnose(DiagnoseRequest(log=log.read_text(encoding="utf-8", errors="replace")), packs)
        for message in (
            render_diagnosis(diagnosis),
            render_diagnosis(diagnosis, all_fixes=True, hosts=["gpu-07"]),
        ):
            assert limit_violations(message) == [], log.name


@pytest.mark.parametrize(
    "question",
    [
        "estimate qwen2.5-7b on L4",
        "will Llama-3.1-70B fit on 2×A100-80GB at 32k?",
        "will Qwen/Qwen2.5-0.5B-Instruct fit on 24GB with fp8 kv cache at 8192 tokens",
    ],
)
def test_real_estimates_from_sizing_questions_render_within_slack_limits(question: str) -> None:
    from bot.parse import parse_ask
    from service.budget import estimate
    from service.packs.catalog import load_catalog

    request = parse_ask(question).estimate
    assert request is not None
    budget = estimate(request, load_catalog(Path(__file__).parents[2] / "rules"))
    message = render_budget(budget)
    assert limit_violations(message) == []
    assert message.blocks[0]["text"]["text"].startswith("Fits" if budget.fits else "Does not fit")


def test_corrected_command_is_shown_copyable() -> None:
    command = "vllm serve Qwen/Qwen2.5-0.5B-Instruct --max-model-len 1344"
    message = render_diagnosis(msgspec.structs.replace(kv_capacity_diagnosis(), corrected_command=command))
    texts = [b["text"]["text"] for b in message.blocks if b["type"] == "section" and "text" in b]
    assert any(f"```\n{command}\n```" in text for text in texts)
    assert limit_violations(message) == []


def test_redaction_that_lengthens_text_still_keeps_slack_limits() -> None:
    noisy = " ".join(["password=abcd"] * 400)
    diagnosis = msgspec.structs.replace(
        kv_capacity_diagnosis(), summary=noisy, title=noisy, evidence=[Evidence(line=1, text=noisy)]
    )
    message = render_diagnosis(diagnosis)
    assert limit_violations(message) == []
    assert "abcd" not in _all_strings(message)


def test_a_line_repeated_on_every_rank_is_shown_once_with_its_count() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    evidence = [Evidence(line=7, text=oom, rule="cuda-oom", repeats=16)]
    message = render_diagnosis(msgspec.structs.replace(kv_capacity_diagnosis(), evidence=evidence))
    shown = _all_strings(message)
    assert shown.count(oom) == 1
    assert "(×16)" in shown
