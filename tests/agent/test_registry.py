"""The agent registry and heartbeat against a real Redis server (short TTLs)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest
from redis.asyncio import Redis

from service.agent.registry import (
    Heartbeat,
    InvalidHostError,
    agent_key,
    get_agent,
    list_agents,
    register,
)
from service.schemas import AgentRegistration, GpuSummary


def registration(host: str, free_gib: float = 2.693) -> AgentRegistration:
    return AgentRegistration(
        host=host,
        url=f"http://{host}:9400",
        gpus=[GpuSummary(index=0, name="NVIDIA H100 80GB HBM3", total_gib=79.647, free_gib=free_gib)],
        registered_at="2026-11-29T16:00:00Z",
        version="0.1.0",
    )


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def poll(predicate: Callable[[], Awaitable[bool]], attempts: int = 250, pause_s: float = 0.02) -> bool:
    """Re-check an async predicate until it holds; False if it never did (no timing asserted)."""
    for _ in range(attempts):
        if await predicate():
            return True
        await asyncio.sleep(pause_s)
    return False


def test_agent_key_follows_the_contract() -> None:
    assert agent_key("GPU-Node-07") == "vramdoc:agent:gpu-node-07"
    for bad in ("", "-leading-dash", "has space", "x" * 64, "semi;colon", "star*"):
        with pytest.raises(InvalidHostError, match="is not a host name"):
            agent_key(bad)


async def test_registration_is_listed_read_back_and_carries_a_ttl(redis: Redis, key_prefix: str) -> None:
    prefix = f"{key_prefix}agent:"
    await register(redis, registration("gpu-b"), ttl_s=45, prefix=prefix)
    await register(redis, registration("gpu-a", free_gib=40.0), ttl_s=45, prefix=prefix)
    assert [r.host for r in await list_agents(redis, prefix)] == ["gpu-a", "gpu-b"]
    assert await get_agent(redis, "GPU-A", prefix) == registration("gpu-a", free_gib=40.0)
    assert await get_agent(redis, "gpu-z", prefix) is None
    with pytest.raises(InvalidHostError):
        await get_agent(redis, "gpu-a*", prefix)  # a typed name is a key, never a pattern
    assert 0 < await redis.pttl(f"{prefix}gpu-a") <= 45_000
    stored = msgspec.json.decode(await redis.get(f"{prefix}gpu-a"))
    assert set(stored) == {"host", "url", "gpus", "registered_at", "version"}


async def test_list_agents_skips_entries_it_cannot_decode(redis: Redis, key_prefix: str) -> None:
    prefix = f"{key_prefix}agent:"
    await register(redis, registration("good"), ttl_s=30, prefix=prefix)
    await redis.set(f"{prefix}garbage", b"not json")
    await redis.set(f"{prefix}wrong-shape", b'{"host": "wrong-shape"}')
    assert [r.host for r in await list_agents(redis, prefix)] == ["good"]
    assert await get_agent(redis, "garbage", prefix) is None


async def test_list_agents_sees_only_its_prefix(redis: Redis, key_prefix: str) -> None:
    await register(redis, registration("mine"), ttl_s=30, prefix=f"{key_prefix}agent:")
    await register(redis, registration("other"), ttl_s=30, prefix=f"{key_prefix}other:")
    assert [r.host for r in await list_agents(redis, f"{key_prefix}agent:")] == ["mine"]


async def test_heartbeat_keeps_refreshing_and_a_dead_agent_expires(redis: Redis, key_prefix: str) -> None:
    prefix = f"{key_prefix}agent:"
    beats = 0

    async def build() -> AgentRegistration:
        nonlocal beats
        beats += 1
        return registration("gpu-hb")

    heartbeat = Heartbeat(redis, build, interval_s=0.05, prefix=prefix)
    assert heartbeat.ttl_s == pytest.approx(0.15)
    task = asyncio.create_task(heartbeat.run())

    async def refreshed_past_ttl() -> bool:
        return beats >= 8 and await get_agent(redis, "gpu-hb", prefix) is not None

    assert await poll(refreshed_past_ttl)  # 8 beats span more than one TTL: still registered
    task.cancel()  # the agent dies without deregistering
    with contextlib.suppress(asyncio.CancelledError):
        await task

    async def expired() -> bool:
        return await get_agent(redis, "gpu-hb", prefix) is None

    assert await poll(expired)
    assert await list_agents(redis, prefix) == []


async def test_clean_stop_deregisters_at_once(redis: Redis, key_prefix: str) -> None:
    prefix = f"{key_prefix}agent:"

    async def build() -> AgentRegistration:
        return registration("gpu-stop")

    heartbeat = Heartbeat(redis, build, interval_s=30, prefix=prefix)
    assert await heartbeat.beat()
    assert await redis.pttl(f"{prefix}gpu-stop") > 60_000  # TTL is three 30 s intervals
    await heartbeat.stop()
    assert await get_agent(redis, "gpu-stop", prefix) is None


async def test_failed_registration_is_retried_with_backoff_then_recovers(
    redis: Redis, key_prefix: str
) -> None:
    prefix = f"{key_prefix}agent:"
    attempts = 0

    async def flaky_build() -> AgentRegistration:
        nonlocal attempts
        attempts += 1
        if attempts <= 3:
            raise ConnectionError("redis went away")
        return registration("gpu-flaky")

    heartbeat = Heartbeat(redis, flaky_build, interval_s=4, prefix=prefix)
    delays = []
    for _ in range(3):
        assert await heartbeat.beat() is False
        delays.append(heartbeat.retry_delay())
    assert delays == [0.5, 1.0, 2.0]
    heartbeat.failures = 10
    assert heartbeat.retry_delay() == 4  # never longer than one interval
    assert await heartbeat.beat() is True
    assert heartbeat.failures == 0
    assert await get_agent(redis, "gpu-flaky", prefix) is not None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_redis_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    client = Redis.from_url(f"redis://127.0.0.1:{_closed_port()}/0", socket_connect_timeout=0.5)

    async def build() -> AgentRegistration:
        return registration("gpu-offline")

    heartbeat = Heartbeat(client, build, interval_s=15)
    try:
        with caplog.at_level("WARNING", logger="vramdoc.agent.registry"):
            assert await heartbeat.beat() is False
            await heartbeat.stop()
    finally:
        await client.aclose()
    assert heartbeat.failures == 1
    assert "agent registration failed (attempt 1)" in caplog.text
    assert "agent deregistration failed" in caplog.text
