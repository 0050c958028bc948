"""Hostile input to today's surfaces over real HTTP (`/v1/preflight`, `/v1/estimate`'s EP/DP and
speculative fields, `/v1/fingerprints`, `/v1/diagnose` with a snapshot): a 400/422 problem with the
reason in one sentence, never a 500, and never a secret echoed back."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

# the fixtures' types (tests/api/conftest.py); not imported, since `conftest` names a module per folder
ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
API_KEY = "sk-" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"


def _snapshot(name: str, total_gib: float, free_gib: float) -> dict[str, object]:
    gpu = {
        "index": 0,
        "uuid": "GPU-0",
        "name": name,
        "total_gib": total_gib,
        "used_gib": 0.0,
        "free_gib": free_gib,
        "reserved_gib": None,
        "utilization_pct": None,
        "compute_capability": None,
        "mig_mode": None,
    }
    return {
        "host": "gpu-07",
        "captured_at": "2026-12-01T12:00:00Z",
        "driver_version": None,
        "cuda_version": None,
        "gpus": [gpu],
    }


def _no_secret(text: str) -> None:
    for secret in (HF_TOKEN, API_KEY):
        assert secret[:12] not in text and secret[-12:] not in text


@pytest.mark.parametrize(
    ("body", "kind", "said"),
    [
        ({"command": f"vllm serve {MODEL} -tp 0", "gpu": "L4"}, "invalid-config", "tensor_parallel_size"),
        (
            {"command": f"vllm serve {MODEL} --gpu-memory-utilization 7", "gpu": "L4"},
            "invalid-config",
            "gpu_memory_utilization",
        ),
        ({"command": f"vllm serve {MODEL} --kv-cache-dtype fp99", "gpu": "L4"}, "invalid-config", "fp99"),
        ({"command": f"vllm serve {MODEL} -pp 100000", "gpu": "L4"}, "invalid-config", "layers"),
        ({"command": f"vllm serve {MODEL}", "gpu": f"RTX 9999 Ultra {HF_TOKEN}"}, "unknown-gpu", "RTX 9999"),
        (
            {"command": f"vllm serve {MODEL}", "snapshot": _snapshot("NVIDIA H100 80GB HBM3", -5, -9)},
            "invalid-config",
            "-5",
        ),
        (
            {"command": f"vllm serve {MODEL}", "snapshot": _snapshot("Weird GPU", 1e308, 1e308)},
            "invalid-config",
            "not plausible",
        ),
        (
            {"command": f"vllm serve {MODEL}", "snapshot": {**_snapshot("x", 1, 1), "gpus": []}},
            "no-gpu",
            "lists no GPU",
        ),
        (
            {"command": f"rm -rf / ; $(( )) \u0000 --hf-token {HF_TOKEN}", "gpu": "L4"},
            "no-model",
            "names no model",
        ),
    ],
    ids=[
        "tp-0",
        "utilization-7",
        "unknown-kv-dtype",
        "pp-beyond-layers",
        "unknown-gpu-with-token",
        "negative-snapshot",
        "implausible-snapshot",
        "zero-gpu-snapshot",
        "garbage-command",
    ],
)
def test_a_preflight_that_cannot_be_sized_says_why_in_one_sentence(
    client: httpx.Client, problem: ProblemCheck, body: dict[str, object], kind: str, said: str
) -> None:
    response = client.post("/v1/preflight", json=body)
    detail = str(problem(response, 422, kind)["detail"])
    assert said in detail and "cannot be sized on" not in detail
    _no_secret(response.text)


@pytest.mark.parametrize(
    "body",
    [
        {"command": f"vllm serve {MODEL}", "snapshot": {**_snapshot("x", 1, 1), "gpus": "none"}},
        {"command": f"vllm serve {MODEL}", "top": 10**9, "gpu": "L4"},
        {"command": 42, "gpu": "L4"},
        {"command": ""},
    ],
    ids=["gpus-not-a-list", "top-huge", "command-not-a-string", "empty-command"],
)
def test_a_malformed_preflight_body_is_a_validation_problem(
    client: httpx.Client, problem: ProblemCheck, body: dict[str, object]
) -> None:
    problem(client.post("/v1/preflight", json=body), 400, "validation-error")


def test_a_preflight_with_tokens_in_its_command_echoes_none_of_them(client: httpx.Client) -> None:
    command = f"vllm serve {MODEL} --hf-token {HF_TOKEN} --api-key {API_KEY} --max-model-len 65536"
    response = client.post("/v1/preflight", json={"command": command, "gpu": "L4"})
    assert response.status_code == 200 and response.json()["verdict"]
    _no_secret(response.text)


def test_a_preflight_command_over_the_length_bound_is_refused_and_one_under_it_answered(
    client: httpx.Client, problem: ProblemCheck
) -> None:
    under = f"vllm serve {MODEL} " + "--max-num-seqs 8 " * 3_500  # about 60 KB of repeated flags
    over = f"vllm serve {MODEL} " + "--max-num-seqs 8 " * 50_000

    answered = client.post("/v1/preflight", json={"command": under, "gpu": "L4"})
    refused = client.post("/v1/preflight", json={"command": over, "gpu": "L4"})

    assert answered.status_code == 200 and answered.json()["outcome"]
    assert "length <=" in str(problem(refused, 400, "validation-error")["detail"])


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"speculative_config": "ngram"}, 400, "validation-error"),
        ({"speculative_config": [1, 2]}, 400, "validation-error"),
        ({"speculative_config": {"method": "eagle", "num_speculative_tokens": "x"}}, 400, "validation-error"),
        ({"speculative_config": {"method": "eagle", "model": "nobody/none"}}, 422, "unknown-model"),
        ({"data_parallel_size": -1}, 422, "invalid-config"),
        ({"data_parallel_size": "two"}, 400, "validation-error"),
    ],
    ids=[
        "speculative-a-string",
        "speculative-a-list",
        "draft-tokens-a-string",
        "draft-model-unknown",
        "dp-negative",
        "dp-not-a-number",
    ],
)
def test_wrong_shaped_speculative_and_parallel_fields_are_a_problem(
    client: httpx.Client, problem: ProblemCheck, body: dict[str, object], status: int, kind: str
) -> None:
    problem(client.post("/v1/estimate", json={"model": MODEL, "gpu": "L4", **body}), status, kind)


@pytest.mark.parametrize(
    "query",
    ["days=-1", "days=0", "days=abc", f"days={10**30}", "limit=1000000000", "limit=-5", "limit=1.5"],
)
def test_fingerprints_parameters_out_of_range_are_a_400_before_redis_is_asked(
    client: httpx.Client, problem: ProblemCheck, query: str
) -> None:
    problem(client.get(f"/v1/fingerprints?{query}"), 400, "validation-error")


@pytest.mark.parametrize(
    "snapshot",
    [
        {**_snapshot("x", 1, 1), "gpus": []},
        _snapshot("NVIDIA H100 80GB HBM3", -5, -9),
        _snapshot("Weird GPU", 1e308, 1e308),
    ],
    ids=["zero-gpus", "negative-memory", "implausible-unknown-gpu"],
)
def test_a_diagnosis_with_a_broken_snapshot_is_still_answered(
    client: httpx.Client, snapshot: dict[str, object]
) -> None:
    log = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
    response = client.post("/v1/diagnose", json={"log": log, "model": MODEL, "snapshot": snapshot})
    assert response.status_code == 200 and response.json()["phase"] == "kv_cache_capacity"
