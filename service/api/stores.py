"""Shared state for rate limits and the response cache: Litestar stores in Redis or in process memory.

Redis is optional and may fail at any time. Every Redis call is bounded by short socket timeouts;
after a failure the service stops asking Redis for a few seconds (logging once), counts rate limits
in process memory instead and skips the cache, so diagnosis never waits on Redis. The Redis client
(a fifth of a second to import) is imported only when a Redis URL is configured.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from litestar.stores.base import Store

if TYPE_CHECKING:
    from service.api.redis_store import RedisCounterStore

__all__ = ["BoundedMemoryStore", "CounterStore", "SharedState"]

log = logging.getLogger("vramdoc.service")

_RETRY_AFTER_FAILURE_S = 5.0
_REDIS_TIMEOUT_S = 0.5


def _seconds(value: int | timedelta | None) -> float | None:
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class CounterStore(Protocol):
    """A store that can also count hits in a fixed time window, atomically."""

    async def get(self, key: str, renew_for: int | timedelta | None = None) -> bytes | None: ...

    async def set(self, key: str, value: str | bytes, expires_in: int | timedelta | None = None) -> None: ...

    async def incr(self, key: str, expires_in: int) -> int: ...


class BoundedMemoryStore(Store):
    """An in-process store with expiry and a cap on entries (oldest evicted first), so memory stays flat."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, tuple[bytes, float | None]] = OrderedDict()

    def _live(self, key: str) -> tuple[bytes, float | None] | None:
        item = self._items.get(key)
        if item is not None and item[1] is not None and item[1] <= time.monotonic():
            del self._items[key]
            return None
        return item

    def _put(self, key: str, value: bytes, expires_in: float | None) -> None:
        self._items[key] = (value, None if expires_in is None else time.monotonic() + expires_in)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    async def set(self, key: str, value: str | bytes, expires_in: int | timedelta | None = None) -> None:
        self._put(key, value.encode() if isinstance(value, str) else value, _seconds(expires_in))

    async def get(self, key: str, renew_for: int | timedelta | None = None) -> bytes | None:
        item = self._live(key)
        if item is None:
            return None
        if renew_for is not None and item[1] is not None:
            self._put(key, item[0], _seconds(renew_for))
        return item[0]

    async def incr(self, key: str, expires_in: int) -> int:
        """Count one hit; no await between read and write, so it is atomic on the event loop."""
        item = self._live(key)
        count = int(item[0]) + 1 if item is not None else 1
        remaining = item[1] - time.monotonic() if item is not None and item[1] is not None else expires_in
        self._put(key, str(count).encode(), remaining)
        return count

    async def delete(self, key: str) -> None:
        self._items.pop(key, None)

    async def delete_all(self) -> None:
        self._items.clear()

    async def exists(self, key: str) -> bool:
        return self._live(key) is not None

    async def expires_in(self, key: str) -> int | None:
        item = self._live(key)
        return None if item is None or item[1] is None else int(item[1] - time.monotonic())


class SharedState:
    """Rate-limit counters and cached responses, degrading to process memory while Redis is down."""

    def __init__(
        self, redis_url: str | None, namespace: str = "vramdoc", cache_max_entries: int = 4096
    ) -> None:
        self.redis: RedisCounterStore | None = None
        # what a failing Redis call raises: OSError alone until there is a Redis to fail
        self._failures: tuple[type[Exception], ...] = (OSError,)
        if redis_url is not None:
            from service.api.redis_store import REDIS_FAILURES, RedisCounterStore
            from service.redis_link import connect_redis

            client = connect_redis(redis_url, timeout_s=_REDIS_TIMEOUT_S)
            self.redis = RedisCounterStore(client, namespace=namespace)
            self._failures = REDIS_FAILURES
        self.memory_limits = BoundedMemoryStore(max_entries=65536)
        self.memory_cache = BoundedMemoryStore(max_entries=cache_max_entries)
        self._down_until = 0.0
        self.last_error: str | None = None

    def _redis_usable(self) -> RedisCounterStore | None:
        if self.redis is None or time.monotonic() < self._down_until:
            return None
        return self.redis

    def _redis_failed(self, exc: Exception) -> None:
        if time.monotonic() >= self._down_until:
            log.warning(
                "Redis is unreachable (%s): counting rate limits in process memory and skipping the "
                "response cache for %.0f s.",
                exc,
                _RETRY_AFTER_FAILURE_S,
            )
        self.last_error = type(exc).__name__
        self._down_until = time.monotonic() + _RETRY_AFTER_FAILURE_S

    async def hit(self, key: str, window_s: int) -> int:
        """Count one request for `key` in the current window and return the count so far."""
        redis = self._redis_usable()
        if redis is not None:
            try:
                return await redis.incr(f"rl:{key}", window_s)
            except self._failures as exc:
                self._redis_failed(exc)
        return await self.memory_limits.incr(f"rl:{key}", window_s)

    async def cached(self, key: str) -> bytes | None:
        if self.redis is None:
            return await self.memory_cache.get(f"cache:{key}")
        redis = self._redis_usable()
        if redis is None:
            return None
        try:
            return await redis.get(f"cache:{key}")
        except self._failures as exc:
            self._redis_failed(exc)
            return None

    async def store(self, key: str, value: bytes, ttl_s: int) -> None:
        if self.redis is None:
            await self.memory_cache.set(f"cache:{key}", value, expires_in=ttl_s)
            return
        redis = self._redis_usable()
        if redis is None:
            return
        try:
            await redis.set(f"cache:{key}", value, expires_in=ttl_s)
        except self._failures as exc:
            self._redis_failed(exc)

    async def redis_status(self) -> str:
        """`not configured`, `ok`, or `unreachable: <error class>` (asks Redis now, ignoring the back-off).

        Only the error's class: readiness is public, the address and message go to the log.
        """
        if self.redis is None:
            return "not configured"
        try:
            await self.redis.ping()
        except self._failures as exc:
            self._redis_failed(exc)
            return f"unreachable: {self.last_error}"
        self._down_until = 0.0
        return "ok"

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.__aexit__(None, None, None)
