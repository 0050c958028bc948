"""The agent registry in Redis: `vramdoc:agent:<host>` holds a JSON `AgentRegistration`.

Each agent rewrites its key on every heartbeat with a TTL of three intervals, so an agent that dies
disappears within three heartbeats; a clean shutdown deletes the key at once. Readers (the bot) list
agents with SCAN, never KEYS (the reader and the key scheme live in service/registry.py).
`registered_at` is the time of the latest heartbeat write, so a reader can tell how fresh it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import msgspec
from redis.asyncio import Redis

from service.registry import AGENT_KEY_PREFIX, InvalidHostError, agent_key, get_agent, list_agents
from service.schemas import AgentRegistration

__all__ = [
    "AGENT_KEY_PREFIX",
    "Heartbeat",
    "InvalidHostError",
    "RegistrationBuilder",
    "agent_key",
    "deregister",
    "get_agent",
    "list_agents",
    "register",
]

TTL_HEARTBEATS = 3
_FIRST_RETRY_S = 0.5

log = logging.getLogger("vramdoc.agent.registry")

RegistrationBuilder = Callable[[], Awaitable[AgentRegistration]]


async def register(
    redis: Redis, registration: AgentRegistration, ttl_s: float, prefix: str = AGENT_KEY_PREFIX
) -> None:
    """Write (or refresh) one agent's entry with a TTL."""
    key = agent_key(registration.host, prefix)
    await redis.set(key, msgspec.json.encode(registration), px=max(1, round(ttl_s * 1000)))


async def deregister(redis: Redis, host: str, prefix: str = AGENT_KEY_PREFIX) -> None:
    await redis.delete(agent_key(host, prefix))


class Heartbeat:
    """Keeps one agent registered: rewrite every interval, retry failures with backoff, never raise."""

    def __init__(
        self,
        redis: Redis,
        build: RegistrationBuilder,
        interval_s: float,
        prefix: str = AGENT_KEY_PREFIX,
    ) -> None:
        self.redis = redis
        self.build = build
        self.interval_s = interval_s
        self.prefix = prefix
        self.failures = 0
        self.host: str | None = None

    @property
    def ttl_s(self) -> float:
        return TTL_HEARTBEATS * self.interval_s

    def retry_delay(self) -> float:
        """Exponential backoff from half a second, never longer than one interval."""
        return float(min(self.interval_s, _FIRST_RETRY_S * 2 ** (self.failures - 1)))

    async def beat(self) -> bool:
        """Register once; True when the entry was written."""
        try:
            registration = await self.build()
            self.host = registration.host
            await register(self.redis, registration, self.ttl_s, self.prefix)
        except Exception as err:  # a registry problem must never stop the agent
            self.failures += 1
            log.warning("agent registration failed (attempt %d): %s", self.failures, err)
            return False
        if self.failures:
            log.info("agent registration succeeded again after %d failures", self.failures)
        self.failures = 0
        return True

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            ok = await self.beat()
            await asyncio.sleep(self.interval_s if ok else self.retry_delay())

    async def stop(self) -> None:
        """Remove this agent's entry now instead of waiting for the TTL; failures are only logged."""
        if self.host is None:
            return
        try:
            await deregister(self.redis, self.host, self.prefix)
        except Exception as err:
            log.warning("agent deregistration failed: %s", err)
