"""Fingerprints: the same failure on another host maps to one key; no log text is ever kept."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.core import diagnose
from service.fingerprints import fingerprint
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis

LOG = (Path(__file__).parents[1] / "bot" / "data" / "kv-capacity-qwen.log").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def diagnosis(packs: RulePacks) -> Diagnosis:
    return diagnose(DiagnoseRequest(log=LOG), packs)


def _with_facts(diagnosis: Diagnosis, **changes: object) -> Diagnosis:
    return msgspec.structs.replace(diagnosis, facts=msgspec.structs.replace(diagnosis.facts, **changes))


def test_fingerprint_keeps_ids_and_rounded_numbers_only(diagnosis: Diagnosis, packs: RulePacks) -> None:
    print_ = fingerprint(diagnosis, packs)
    assert print_ is not None
    assert print_.phase == diagnosis.phase == "kv_cache_capacity"
    assert print_ == diagnosis.fingerprint
    assert print_.rule == "vllm-kv-max-seq-len-model"  # the root, not the "EngineCore failed" wrapper
    assert print_.vllm_minor == "0.32"
    assert print_.model == "qwen/qwen2.5-0.5b-instruct"
    assert print_.numbers == {"estimated_max_model_len": 2048.0, "max_model_len": 2048.0}  # 1344 bucketed
    encoded = msgspec.json.encode(print_).decode()
    for item in diagnosis.evidence:
        assert item.text.strip() not in encoded
    assert "ValueError" not in encoded and "KV cache" not in encoded


def test_nearby_numbers_on_another_patch_release_share_the_key(
    diagnosis: Diagnosis, packs: RulePacks
) -> None:
    first = fingerprint(diagnosis, packs)
    version = diagnosis.facts.vllm_version or "0.8.5"
    patch = version.rsplit(".", 1)[0] + ".99"
    other = fingerprint(
        _with_facts(diagnosis, estimated_max_model_len=1100, max_model_len=2000, vllm_version=patch), packs
    )
    assert first is not None and other is not None
    assert first.key == other.key


def test_a_different_decisive_number_or_minor_version_changes_the_key(
    diagnosis: Diagnosis, packs: RulePacks
) -> None:
    first = fingerprint(diagnosis, packs)
    variants = [
        _with_facts(diagnosis, max_model_len=131072),
        _with_facts(diagnosis, vllm_version="0.3.0"),
        _with_facts(diagnosis, model="Qwen/Qwen2.5-72B-Instruct"),
        msgspec.structs.replace(diagnosis, phase="weights_oom"),
    ]
    keys = set()
    for variant in variants:
        other = fingerprint(variant, packs)
        assert other is not None
        keys.add(other.key)
    assert first is not None
    assert first.key not in keys and len(keys) == len(variants)


def test_a_healthy_log_has_no_fingerprint(diagnosis: Diagnosis, packs: RulePacks) -> None:
    assert fingerprint(msgspec.structs.replace(diagnosis, phase="no_failure"), packs) is None
