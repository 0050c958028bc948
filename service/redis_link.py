"""How every vramdoc process talks to Redis: one connection policy, and an outage logged once.

A Redis restart leaves pooled connections that fail on first use; a PING before reusing a
connection idle for a while (`health_check_interval`) and one immediate retry on a dropped
connection make the restart invisible to the person asking. A Redis that stays down is logged when
it goes and when it comes back, not once per request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["DEFAULT_REDIS_PREFIX", "HEALTH_CHECK_INTERVAL_S", "Outage", "connect_redis", "redis_prefix"]

HEALTH_CHECK_INTERVAL_S = 10
# The installation's Redis namespace (VRAMDOC_REDIS_PREFIX), the same for the service, bot and agents.
DEFAULT_REDIS_PREFIX = "vramdoc"


def redis_prefix(env: Mapping[str, str]) -> str:
    """VRAMDOC_REDIS_PREFIX, else the default: every process of an installation reads it here."""
    return env.get("VRAMDOC_REDIS_PREFIX", "").strip() or DEFAULT_REDIS_PREFIX


def connect_redis(url: str, *, timeout_s: float, decode_responses: bool = False) -> Redis:
    """A lazily connecting client with health checks and one retry on a dropped connection."""
    client: Redis = Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry=Retry(NoBackoff(), retries=1),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        decode_responses=decode_responses,
    )
    return client


class Outage:
    """Logs a Redis outage once when it starts and once when it ends, whatever the call rate."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self.down = False

    def failed(self, exc: BaseException, fallback: str) -> None:
        if not self.down:
            self._log.warning(
                "Redis is unreachable for %s (%s); %s until it is back", self._what, exc, fallback
            )
        self.down = True

    def ok(self) -> None:
        if self.down:
            self._log.info("Redis is reachable again for %s", self._what)
        self.down = False
