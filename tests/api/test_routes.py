"""Every endpoint over real HTTP: raw and JSON logs, estimates, catalog views, health and metrics."""

from __future__ import annotations

from pathlib import Path

import httpx
import msgspec

from service.schemas import Budget, Diagnosis

KV_LOG = (Path(__file__).parent / "data" / "kv-capacity-v0.32-qwen.log").read_text()
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def test_raw_log_body_is_diagnosed_with_query_hints(client: httpx.Client) -> None:
    response = client.post(
        "/v1/diagnose", params={"model": QWEN}, content=KV_LOG, headers={"content-type": "text/plain"}
    )
    assert response.status_code == 200, response.text
    diagnosis = msgspec.json.decode(response.content, type=Diagnosis)
    assert diagnosis.phase == "kv_cache_capacity"
    assert diagnosis.facts.estimated_max_model_len == 1344
    assert any("1344" in e.text for e in diagnosis.evidence)
    assert diagnosis.rules_version.startswith("sha256:")


def test_raw_log_without_content_type_is_diagnosed(client: httpx.Client) -> None:
    response = client.post("/v1/diagnose", content=KV_LOG.encode())
    assert response.status_code == 200
    assert response.json()["phase"] == "kv_cache_capacity"


def test_json_request_gives_the_same_diagnosis_as_the_raw_log(client: httpx.Client) -> None:
    raw = client.post("/v1/diagnose", params={"model": QWEN, "top": 3}, content=KV_LOG + "\n")
    as_json = client.post("/v1/diagnose", json={"top": 3, "model": QWEN, "log": KV_LOG + "\n"})
    assert as_json.status_code == 200
    assert as_json.json() == raw.json()
    assert (raw.headers["x-cache"], as_json.headers["x-cache"]) == ("miss", "hit")
    assert 0 < len(as_json.json()["fixes"]) <= 3


def test_classify_returns_phase_and_facts_without_budget_or_fixes(client: httpx.Client) -> None:
    response = client.post("/v1/classify", content=KV_LOG)
    assert response.status_code == 200
    body = response.json()
    assert body["phase"] == "kv_cache_capacity"
    assert body["budget"] is None
    assert body["fixes"] == []


def test_estimate_returns_a_budget(client: httpx.Client) -> None:
    response = client.post("/v1/estimate", json={"model": QWEN, "gpu": "A100-80GB", "max_model_len": 4096})
    assert response.status_code == 200, response.text
    budget = msgspec.json.decode(response.content, type=Budget)
    assert budget.max_model_len == 4096
    assert budget.weights_gib > 0
    assert budget.fits


def test_catalog_lists_models_and_gpus(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    gpus = client.get("/v1/gpus").json()
    assert any(QWEN in (m["hf_id"], m["id"], *m["aliases"]) for m in models)
    assert gpus and all(g["total_gib"] > 0 for g in gpus)


def test_rules_report_the_digest_every_diagnosis_names(client: httpx.Client) -> None:
    rules = client.get("/v1/rules").json()
    diagnosis = client.post("/v1/diagnose", content=KV_LOG).json()
    assert rules["rules_version"] == diagnosis["rules_version"]
    assert rules["packs"]["signature_rules"] > 0
    assert rules["packs"]["fix_recipes"] > 0
    assert rules["packs"]["gpus"] == len(client.get("/v1/gpus").json())


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready"
    assert ready["redis"] == "not configured"


def test_metrics_count_requests_by_route_and_diagnoses_by_phase(client: httpx.Client) -> None:
    client.post("/v1/diagnose", content=KV_LOG + "\n# metrics test\n")
    text = client.get("/metrics").text
    assert 'vramdoc_diagnoses_total{endpoint="diagnose",phase="kv_cache_capacity"}' in text
    assert 'path="/v1/diagnose"' in text and 'status_code="200"' in text
    assert "vramdoc_http_request_duration_seconds_bucket" in text


def test_openapi_documents_both_body_kinds_and_resolvable_schemas(client: httpx.Client) -> None:
    schema = client.get("/schema/openapi.json").json()
    body = schema["paths"]["/v1/diagnose"]["post"]["requestBody"]["content"]
    assert set(body) >= {"application/json", "text/plain"}
    ref = body["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    components = schema["components"]["schemas"]
    assert "log" in components[ref]["properties"]
    assert "Snapshot" in components
    assert {"Diagnosis", "Budget", "EstimateRequest", "Problem"} <= set(components)
    params = {p["name"] for p in schema["paths"]["/v1/diagnose"]["post"]["parameters"]}
    assert params == {"model", "gpu", "command", "vllm_version", "top"}


def test_openapi_documents_metrics_as_the_prometheus_text_it_serves(client: httpx.Client) -> None:
    response = client.get("/metrics")
    documented = client.get("/schema/openapi.json").json()["paths"]["/metrics"]["get"]["responses"]["200"]
    assert list(documented["content"]) == [response.headers["content-type"]]
    assert response.headers["content-type"].startswith("text/plain")
