"""tools/export_calibration.py: samples recorded in a real Redis come out as rows in the schema of
tests/budget/realworld_numbers.yaml, decoded by that file's own strict schema."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import redis.asyncio as aioredis

from service.calibration import calibration_sample
from service.calibration_store import CalibrationStore
from service.core import diagnose
from service.packs import RulePacks
from service.schemas import DiagnoseRequest
from tests.budget.profiles import load_points

REPO = Path(__file__).resolve().parents[2]
LOG = (REPO / "tests" / "healthy" / "v0.20-v1-cudagraph-profiling-advisory.log").read_text()


def _tool() -> ModuleType:
    path = REPO / "tools" / "export_calibration.py"
    spec = importlib.util.spec_from_file_location("export_calibration", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["export_calibration"] = module
    spec.loader.exec_module(module)
    return module


export_calibration = _tool()


def test_recorded_samples_export_as_points_of_the_fitted_dataset(
    packs: RulePacks, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    sample = calibration_sample(diagnose(DiagnoseRequest(log=LOG, gpu="H100"), packs), packs)
    assert sample is not None

    async def record() -> None:
        store = CalibrationStore(aioredis.from_url(redis_url), key_prefix=key_prefix)
        assert await store.record(sample)
        await store.close()

    asyncio.run(record())
    out = tmp_path / "rows.yaml"

    assert (
        export_calibration.main(
            ["--redis-url", redis_url, "--prefix", key_prefix.rstrip(":"), "-o", str(out)]
        )
        == 0
    )

    (point,) = load_points(out)
    assert point.model == "meta-llama/Llama-3.1-8B-Instruct" and point.gpu == "H100-SXM-80GB"
    assert point.vllm_version == "0.20.0" and point.tp == 1
    assert point.weights_gib == sample.measured["weights_gib"]
    assert point.kv_gib == sample.measured["available_kv_gib"]
    assert point.excerpt is None and "keeps no log text" in (point.note or "")


def test_without_a_redis_url_it_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VRAMDOC_REDIS_URL", raising=False)

    assert export_calibration.main([]) == 2
    assert "VRAMDOC_REDIS_URL" in capsys.readouterr().err
