"""The agent's HTTP surface over loopback: a real uvicorn server, real HTTP, real Redis."""

from __future__ import annotations

import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
import uvicorn
from redis import Redis

from service.agent.app import AgentIdentity, authorized, create_app
from service.agent.settings import AgentSettings
from service.schemas import AgentRegistration, Snapshot

from .conftest import InstallNvml

TOKEN = "c0ffee" * 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve() -> Iterator[Callable[[AgentSettings, str], str]]:
    """Start the agent app under uvicorn on a loopback port; returns its base URL."""
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(settings: AgentSettings, prefix: str) -> str:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        app = create_app(
            settings, AgentIdentity(host="gpu-test", url=url, token=TOKEN), registry_prefix=prefix
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running.append((server, thread))
        for _ in range(500):
            if server.started:
                return url
            time.sleep(0.01)
        raise RuntimeError("the agent did not start")

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def agent_url(
    fake_nvml: InstallNvml, metrics_server: str, serve: Callable[[AgentSettings, str], str], key_prefix: str
) -> str:
    _lib, procfs = fake_nvml("h100_two_processes")
    settings = AgentSettings(vllm_urls=(f"{metrics_server}/v1",), proc_root=procfs.root)
    return serve(settings, f"{key_prefix}agent:")


def test_healthz_needs_no_token(agent_url: str) -> None:
    response = httpx.get(f"{agent_url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "host": "gpu-test"}


@pytest.mark.parametrize(
    "header",
    [
        None,
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer",
        f"Bearer {TOKEN.upper()}",
    ],
    ids=["missing", "prefix", "longer", "wrong-scheme", "no-scheme", "empty", "wrong-case"],
)
def test_snapshot_without_the_right_token_is_a_bare_401(agent_url: str, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    response = httpx.get(f"{agent_url}/v1/snapshot", headers=headers)
    assert response.status_code == 401
    assert response.content == b""
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_snapshot_with_the_token_returns_gpus_processes_and_vllm(agent_url: str, metrics_server: str) -> None:
    response = httpx.get(f"{agent_url}/v1/snapshot", headers={"Authorization": f"bearer {TOKEN}"})
    assert response.status_code == 200
    snapshot = msgspec.json.decode(response.content, type=Snapshot)
    assert snapshot.host == "gpu-test"
    assert (snapshot.driver_version, snapshot.cuda_version, snapshot.pids_resolvable) == (
        "550.54.15",
        "12.4",
        True,
    )
    assert [p.pid for p in snapshot.gpus[0].processes] == [4242, 5117]
    [server] = snapshot.vllm
    assert (server.url, server.preemptions_total) == (f"{metrics_server}/v1", 2609)
    assert server.version == "0.11.0"  # from the server's GET /version, for pre-flight
    assert snapshot.errors == []


def test_token_is_compared_in_constant_time(agent_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    assert httpx.get(f"{agent_url}/v1/snapshot", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(f"{agent_url}/v1/snapshot").status_code == 401
    assert compared == [(b"nope", TOKEN.encode()), (b"", TOKEN.encode())]


def test_authorized_accepts_only_the_exact_bearer_token() -> None:
    assert authorized(f"Bearer {TOKEN}", TOKEN)
    assert authorized(f"  BEARER   {TOKEN}  ", TOKEN)
    assert not authorized(None, TOKEN)
    assert not authorized(f"Token {TOKEN}", TOKEN)


def test_running_agent_registers_itself_and_deregisters_on_shutdown(
    fake_nvml: InstallNvml, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    _lib, procfs = fake_nvml("a100_mig")
    prefix = f"{key_prefix}agent:"
    settings = AgentSettings(vllm_urls=(), redis_url=redis_url, heartbeat_s=0.05, proc_root=procfs.root)
    port = _free_port()
    app = create_app(
        settings,
        AgentIdentity(host="gpu-mig", url="http://gpu-mig:9400", token=TOKEN),
        registry_prefix=prefix,
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    redis = Redis.from_url(redis_url)
    try:
        raw = None
        for _ in range(500):
            raw = redis.get(f"{prefix}gpu-mig")
            if raw is not None:
                break
            time.sleep(0.01)
        assert raw is not None
        registration = msgspec.json.decode(raw, type=AgentRegistration)
        assert registration.url == "http://gpu-mig:9400"
        assert [(g.index, g.name, g.total_gib) for g in registration.gpus] == [
            (0, "NVIDIA A100-SXM4-80GB", 80.0)
        ]
        assert registration.version == "0.1.0"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert redis.get(f"{prefix}gpu-mig") is None
    redis.close()
