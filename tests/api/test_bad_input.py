"""Malformed, oversized, binary and hostile input: always a 4xx problem or a diagnosis, never a 5xx."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from service.api.settings import Settings

ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]
ServerFactory = Callable[[Settings], httpx.Client]

KV_LOG = (Path(__file__).parent / "data" / "kv-capacity-v0.32-qwen.log").read_text()


def test_empty_log_is_422_with_a_helpful_detail(client: httpx.Client, problem: ProblemCheck) -> None:
    for response in (
        client.post("/v1/diagnose", content=b""),
        client.post("/v1/diagnose", json={"log": "  \n"}),
    ):
        body = problem(response, 422, "empty-log")
        assert "log" in str(body["detail"]).lower()


def test_unknown_model_is_422_with_suggestions(client: httpx.Client, problem: ProblemCheck) -> None:
    response = client.post("/v1/estimate", json={"model": "Qwen/Qwen2.5-0.5B-Instrukt", "gpu": "A100-80GB"})
    body = problem(response, 422, "unknown-model")
    assert body["suggestions"]
    assert "Qwen2.5-0.5B-Instrukt" in str(body["detail"])


def test_body_over_the_limit_is_413(serve: ServerFactory, problem: ProblemCheck) -> None:
    small = serve(Settings(rate_limit=None, max_body_bytes=1024))
    problem(small.post("/v1/diagnose", content=b"x" * 2048), 413, "body-too-large")
    # Without Content-Length (chunked), the limit is enforced while streaming.
    chunks: Iterator[bytes] = iter([b"y" * 600] * 4)
    problem(small.post("/v1/diagnose", content=chunks), 413, "body-too-large")
    problem(small.post("/v1/estimate", json={"model": "m" * 2000}), 413, "body-too-large")
    assert small.post("/v1/diagnose", content=KV_LOG[:1000]).status_code == 200


def test_binary_body_is_decoded_with_replacement_and_diagnosed(client: httpx.Client) -> None:
    response = client.post(
        "/v1/diagnose", content=os.urandom(4096), headers={"content-type": "application/octet-stream"}
    )
    assert response.status_code in {200, 422}, response.text
    if response.status_code == 200:
        assert response.json()["phase"] in {"no_failure", "not_memory"}


def test_invalid_utf8_inside_a_real_log_still_finds_the_failure(client: httpx.Client) -> None:
    broken = KV_LOG.encode().replace(b"Resolved architecture", b"Resolved \xff\xfe\xc3(architecture")
    response = client.post("/v1/diagnose", content=b"\x00\x9f" + broken)
    assert response.status_code == 200
    assert response.json()["phase"] == "kv_cache_capacity"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"log": "x", "top": "five"}', "$.top"),
        (b'{"log": 42}', "$.log"),
        (b'{"log": "x", "unexpected": 1}', "unexpected"),
        (b'{"model": "m"}', "log"),
        (b'{"log": "x", "top": 5000}', "$.top"),
        (b'{"log": "x", "snapshot": {"host": 1}}', "$.snapshot"),
    ],
)
def test_bad_json_fields_are_400_naming_the_field(
    client: httpx.Client, problem: ProblemCheck, body: bytes, field: str
) -> None:
    response = client.post("/v1/diagnose", content=body, headers={"content-type": "application/json"})
    assert field in str(problem(response, 400, "validation-error")["detail"])


def test_malformed_json_is_400(client: httpx.Client, problem: ProblemCheck) -> None:
    response = client.post("/v1/diagnose", content=b'{"log": ', headers={"content-type": "application/json"})
    problem(response, 400, "invalid-json")


def test_estimate_field_errors_name_the_field(client: httpx.Client, problem: ProblemCheck) -> None:
    body = problem(client.post("/v1/estimate", json={"model": "x", "gpus": "two"}), 400, "validation-error")
    assert "gpus" in str(body["detail"])
    malformed = client.post(
        "/v1/estimate", content=b'{"model": ', headers={"content-type": "application/json"}
    )
    problem(malformed, 400, "invalid-json")


def test_bad_query_parameter_is_400_naming_it(client: httpx.Client, problem: ProblemCheck) -> None:
    body = problem(client.post("/v1/diagnose?top=many", content=KV_LOG), 400, "validation-error")
    assert "top" in str(body["detail"])


def test_unknown_path_and_wrong_method_are_problems(client: httpx.Client, problem: ProblemCheck) -> None:
    problem(client.get("/v1/nothing-here"), 404, "not-found")
    problem(client.get("/v1/diagnose"), 405, "method-not-allowed")


def test_secrets_in_the_log_never_come_back(client: httpx.Client) -> None:
    token = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT"
    log = KV_LOG.replace("Engine core initialization failed.", f"Engine core failed. HF_TOKEN={token}")
    log += f"ERROR export HUGGING_FACE_HUB_TOKEN={token} curl -H 'Authorization: Bearer {token}'\n"
    for response in (
        client.post("/v1/diagnose", content=log, params={"command": f"vllm serve x --hf-token {token}"}),
        client.post("/v1/classify", json={"log": log}),
    ):
        assert response.status_code == 200
        assert token not in response.text


@pytest.mark.parametrize(
    "hostile",
    [
        "A" * 1_500_000,
        "\n" * 200_000,
        "(" * 50_000 + "CUDA out of memory" + ")" * 50_000,
        "Tried to allocate " + "9" * 5000 + " GiB",
        "\u202e\u0000\ufeff" * 10_000 + "torch.OutOfMemoryError: CUDA out of memory.",
        "{{7*7}} ${jndi:ldap://x} <script>alert(1)</script> '; DROP TABLE logs; --",
    ],
    ids=["one-huge-line", "only-newlines", "nested-parens", "huge-number", "control-chars", "injections"],
)
def test_hostile_logs_get_an_answer_not_a_crash(client: httpx.Client, hostile: str) -> None:
    response = client.post("/v1/diagnose", content=hostile.encode())
    assert response.status_code in {200, 422}, response.text[:500]


def test_absurdly_nested_json_is_400_not_a_crash(client: httpx.Client, problem: ProblemCheck) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    estimate = f'{{"model": "x", "config": {{"a": {deep}}}}}'.encode()
    body = problem(
        client.post("/v1/estimate", content=estimate, headers={"content-type": "application/json"}),
        400,
        "invalid-json",
    )
    assert "deeply" in str(body["detail"])
    diagnose = f'{{"log": "x", "snapshot": {deep}}}'.encode()
    problem(
        client.post("/v1/diagnose", content=diagnose, headers={"content-type": "application/json"}),
        400,
        "validation-error",
    )


def test_unknown_gpu_is_422_with_suggestions(client: httpx.Client, problem: ProblemCheck) -> None:
    response = client.post("/v1/estimate", json={"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "H1OO-80GB"})
    body = problem(response, 422, "unknown-gpu")
    assert body["suggestions"]
    assert "H1OO-80GB" in str(body["detail"])


@pytest.mark.parametrize("top", [-1, 51])
def test_a_json_top_out_of_bounds_is_a_400_naming_the_field(
    client: httpx.Client, problem: ProblemCheck, top: int
) -> None:
    """The bound lives in DiagnoseRequest's Meta; the JSON decoder enforces it."""
    body = problem(client.post("/v1/diagnose", json={"log": "x", "top": top}), 400, "validation-error")
    assert "$.top" in str(body["detail"])


def test_a_binary_file_is_422_saying_it_is_not_text(client: httpx.Client, problem: ProblemCheck) -> None:
    executable = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64
    body = problem(client.post("/v1/diagnose", content=executable), 422, "binary-log")
    assert "not text" in body["detail"] and "UTF-8" in body["detail"]
    utf16 = KV_LOG[:2000].encode("utf-16")
    problem(client.post("/v1/classify", content=utf16), 422, "binary-log")
