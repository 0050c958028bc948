"""A diagnosis sizes a model the catalog lacks from what the host's agent read from disk (pure core)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from service.cli import main
from service.core import diagnose
from service.packs import RulePacks, load_packs
from service.schemas import DiagnoseRequest, GpuInfo, Snapshot, VllmServer

from .conftest import config

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PRIVATE = "acme/private-qwen"


def _log() -> str:
    # a real capacity failure, its model renamed to one no catalog or Hub has
    text = (CORPUS / "v0.32-kv-capacity-qwen.log").read_text()
    return text.replace("Qwen/Qwen2.5-0.5B-Instruct", PRIVATE)


def _snapshot() -> Snapshot:
    server = VllmServer(
        url="http://127.0.0.1:8000",
        model=PRIVATE,
        kv_cache_usage=None,
        requests_running=None,
        requests_waiting=None,
        preemptions_total=None,
        model_path="/models/acme/private-qwen",
        model_config=config("Qwen/Qwen3-8B"),
        model_parameters={"BF16": 8_190_735_360},
    )
    return Snapshot(
        host="gpu-7",
        captured_at="2026-12-01T09:00:00Z",
        driver_version=None,
        cuda_version=None,
        gpus=[],
        vllm=[server],
    )


def test_without_the_agent_the_private_model_has_no_budget() -> None:
    packs: RulePacks = load_packs()
    diagnosis = diagnose(DiagnoseRequest(log=_log(), gpu="H100"), packs)
    assert diagnosis.facts.model == PRIVATE
    assert diagnosis.budget is None


def test_the_agents_report_gives_the_budget_and_says_so() -> None:
    packs = load_packs()
    diagnosis = diagnose(DiagnoseRequest(log=_log(), gpu="H100", model=PRIVATE, snapshot=_snapshot()), packs)
    assert diagnosis.budget is not None
    assert diagnosis.budget.sources["model"].note == "config.json the agent on gpu-7 read from disk"
    assert diagnosis.budget.sources["weights_gib"].kind == "exact"
    assert "request-hint-unknown" not in [f.rule for f in diagnosis.findings]


def test_a_preflight_sizes_the_private_model_from_what_the_hosts_agent_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="NVIDIA H100 80GB HBM3",
        total_gib=79.65,
        used_gib=0.5,
        free_gib=79.15,
        reserved_gib=0.5,
        utilization_pct=0,
        compute_capability="9.0",
        mig_mode=False,
    )
    snapshot = msgspec.structs.replace(_snapshot(), gpus=[gpu])
    path = tmp_path / "snap.json"
    path.write_bytes(msgspec.json.encode(snapshot))

    code = main(
        ["preflight", f"vllm serve {PRIVATE} --max-model-len 8192", "--snapshot", str(path), "--json"]
    )

    answer = json.loads(capsys.readouterr().out)
    assert code == 0 and answer["outcome"] == "starts"
    assert "gpu-7" in answer["budget"]["sources"]["model"]["note"]
    assert answer["budget"]["sources"]["weights_gib"]["kind"] == "exact"
