"""A real Redis stopped and restarted under the bot: no user-visible failure, one log line per outage.

Each test runs its own `redis-server` on a fixed free port, so it can stop it and start it again on
the same address while the bot's clients keep their pooled (now stale) connections.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import msgspec
import pytest
import redis

from bot.hosts import HostDirectory
from bot.state import RedisState, open_state
from service.redis_link import connect_redis
from service.schemas import AgentRegistration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RestartableRedis:
    """A private redis-server that a test can stop and start again on the same port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", self._dir.name]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                if redis.Redis.from_url(self.url, socket_timeout=0.2).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


@pytest.fixture
def restartable() -> Iterator[RestartableRedis]:
    server = RestartableRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _register(url: str, host: str) -> None:
    entry = AgentRegistration(
        host=host, url=f"http://{host}:9400", gpus=[], registered_at="2026-01-01T00:00:00Z", version="test"
    )
    redis.Redis.from_url(url).set(f"vramdoc:agent:{host}", msgspec.json.encode(entry), ex=600)


async def test_a_redis_restart_costs_no_failed_registry_lookup(restartable: RestartableRedis) -> None:
    directory = HostDirectory(connect_redis(restartable.url, timeout_s=1.0))
    try:
        _register(restartable.url, "gpu-07")
        assert (await directory.resolve(("gpu-07",))).found  # a pooled connection now exists
        restartable.stop()
        restartable.start()  # the pooled connection is stale: Redis closed it
        _register(restartable.url, "gpu-07")
        found = await directory.resolve(("gpu-07",))
        assert not found.registry_down
        assert found.found == {"gpu-07": "http://gpu-07:9400"}
    finally:
        await directory.close()


async def test_a_stopped_redis_is_logged_once_per_outage(
    restartable: RestartableRedis, caplog: pytest.LogCaptureFixture
) -> None:
    state = open_state(restartable.url, key_prefix="vramdoc-test:restart:")
    assert isinstance(state, RedisState)
    try:
        assert await state.claim_event("Ev-before")
        restartable.stop()
        with caplog.at_level(logging.INFO, logger="bot.state"):
            # Every event still answers once (memory de-dup), and the outage is one warning.
            assert [await state.claim_event(f"Ev-down-{i}") for i in range(5)] == [True] * 5
            assert not await state.claim_event("Ev-down-0")
            restartable.start()
            assert await state.claim_event("Ev-after")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert redis.Redis.from_url(restartable.url).exists("vramdoc-test:restart:bot:event:Ev-after")
    finally:
        await state.close()
