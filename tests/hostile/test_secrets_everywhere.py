"""Planted secrets, hard-wrapped at random widths, sent to a real service with a real Redis: no run
of 8 secret characters survives in the answer, in Redis keys or values, or in any log record."""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.api.app import create_app
from service.api.settings import Settings
from service.packs import load_packs
from service.serving import server_options
from tests.diagnosis.test_redact import _PLANTED, _pasted_log, hard_wrap, leaked


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def service(redis_url: str) -> Iterator[tuple[httpx.Client, str, _Records]]:
    """The service with Redis (rate limits and the response cache) and every log record kept."""
    prefix = f"vramdoc-test-{uuid.uuid4().hex[:10]}"
    records = _Records()
    logging.getLogger().addHandler(records)
    app = create_app(Settings(redis_url=redis_url, redis_prefix=prefix), packs=load_packs())
    config = uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="info", **server_options())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{config.port}", timeout=30) as client:
            yield client, prefix, records
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        logging.getLogger().removeHandler(records)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.integers(min_value=12, max_value=140), endpoint=st.sampled_from(["diagnose", "classify"]))
def test_no_wrapped_secret_survives_in_answers_redis_or_logs(
    service: tuple[httpx.Client, str, _Records], redis_url: str, width: int, endpoint: str
) -> None:
    client, prefix, records = service
    log = hard_wrap(_pasted_log(_PLANTED), width)
    hint = f"vllm serve m --hf-token {_PLANTED['hf']} --api-key {_PLANTED['apikey']}"
    answers = [
        client.post(f"/v1/{endpoint}", content=log, params={"command": hint, "model": _PLANTED["openai"]}),
        client.post(f"/v1/{endpoint}", files={"log": ("vllm.log", log.encode())}),
        client.post(f"/v1/{endpoint}", json={"log": log, "gpu": _PLANTED["github"], "command": hint}),
    ]
    stored = redis.Redis.from_url(redis_url)
    keys = list(stored.scan_iter(match=f"{prefix}*"))
    assert keys, "the response cache and rate limits wrote nothing to Redis"
    places = {
        "answers": "\n".join(f"{r.status_code} {r.text}" for r in answers),
        "redis keys": "\n".join(k.decode() for k in keys),
        "redis values": "\n".join(
            (stored.get(k) or b"").decode("utf-8", "replace") for k in keys if stored.type(k) == b"string"
        ),
        "logs": "\n".join(records.lines),
    }
    for where, text in places.items():
        for name, secret in _PLANTED.items():
            assert not leaked(secret, text), (where, name, width)
