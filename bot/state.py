"""The bot's short-lived memory: event de-duplication and per-thread context.

Redis when VRAMDOC_REDIS_URL is set (shared by every bot replica), else process memory. When Redis
fails the bot still answers: it falls back to process memory for that call and logs the failure,
so a Slack retry may at worst be answered by another replica, never silently dropped.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Protocol

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.redis_link import Outage, connect_redis
from service.schemas import EstimateRequest

__all__ = ["MemoryState", "RedisState", "State", "ThreadContext", "open_state"]

log = logging.getLogger(__name__)

_MEMORY_LIMIT = 10_000


class ThreadContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a thread has given so far, so a follow-up ("and gpu-07?") combines with it.

    The log is stored redacted: nothing secret is ever written to Redis.
    """

    log: str | None = None
    command: str | None = None
    hosts: tuple[str, ...] = ()
    vllm_version: str | None = None
    # the thread's sizing question, so a reply naming the vLLM version sizes it for that release
    estimate: EstimateRequest | None = None


class State(Protocol):
    async def claim_event(self, event_id: str) -> bool:
        """True the first time an event id is seen within the de-dup window."""
        ...

    async def load_thread(self, channel: str, thread_ts: str) -> ThreadContext | None: ...

    async def save_thread(self, channel: str, thread_ts: str, context: ThreadContext) -> None: ...

    async def close(self) -> None: ...


class MemoryState:
    """Process-local state with expiry; bounded so a busy workspace cannot grow it without limit."""

    def __init__(self, *, dedup_ttl_s: int = 3600, thread_ttl_s: int = 7 * 24 * 3600) -> None:
        self._dedup_ttl_s = dedup_ttl_s
        self._thread_ttl_s = thread_ttl_s
        self._events: OrderedDict[str, float] = OrderedDict()
        self._threads: OrderedDict[str, tuple[float, ThreadContext]] = OrderedDict()

    async def claim_event(self, event_id: str) -> bool:
        now = time.monotonic()
        expires = self._events.get(event_id)
        if expires is not None and expires > now:
            return False
        self._events[event_id] = now + self._dedup_ttl_s
        self._events.move_to_end(event_id)
        while len(self._events) > _MEMORY_LIMIT:
            self._events.popitem(last=False)
        return True

    async def load_thread(self, channel: str, thread_ts: str) -> ThreadContext | None:
        entry = self._threads.get(f"{channel}:{thread_ts}")
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    async def save_thread(self, channel: str, thread_ts: str, context: ThreadContext) -> None:
        key = f"{channel}:{thread_ts}"
        self._threads[key] = (time.monotonic() + self._thread_ttl_s, context)
        self._threads.move_to_end(key)
        while len(self._threads) > _MEMORY_LIMIT:
            self._threads.popitem(last=False)

    async def close(self) -> None:
        return None


class RedisState:
    """Redis-backed state (`SET NX EX` for de-dup); each failing call falls back to memory and logs."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        key_prefix: str = "vramdoc:",
        dedup_ttl_s: int = 3600,
        thread_ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        self._redis = client
        self._prefix = key_prefix
        self._dedup_ttl_s = dedup_ttl_s
        self._thread_ttl_s = thread_ttl_s
        self._fallback = MemoryState(dedup_ttl_s=dedup_ttl_s, thread_ttl_s=thread_ttl_s)
        self._outage = Outage(log, "the bot's de-dup and thread context")

    async def claim_event(self, event_id: str) -> bool:
        try:
            first = await self._redis.set(
                f"{self._prefix}bot:event:{event_id}", "1", nx=True, ex=self._dedup_ttl_s
            )
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "de-duplicating and keeping threads in memory")
            return await self._fallback.claim_event(event_id)
        self._outage.ok()
        return bool(first)

    async def load_thread(self, channel: str, thread_ts: str) -> ThreadContext | None:
        try:
            raw = await self._redis.get(f"{self._prefix}bot:thread:{channel}:{thread_ts}")
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "de-duplicating and keeping threads in memory")
            return await self._fallback.load_thread(channel, thread_ts)
        self._outage.ok()
        if raw is None:
            return await self._fallback.load_thread(channel, thread_ts)
        try:
            return msgspec.json.decode(raw, type=ThreadContext)
        except msgspec.DecodeError:
            log.warning("thread context for %s:%s is unreadable; ignoring it", channel, thread_ts)
            return None

    async def save_thread(self, channel: str, thread_ts: str, context: ThreadContext) -> None:
        key = f"{self._prefix}bot:thread:{channel}:{thread_ts}"
        try:
            await self._redis.set(key, msgspec.json.encode(context), ex=self._thread_ttl_s)
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "de-duplicating and keeping threads in memory")
            await self._fallback.save_thread(channel, thread_ts, context)
            return
        self._outage.ok()

    async def close(self) -> None:
        await self._redis.aclose()


def open_state(
    redis_url: str | None,
    *,
    key_prefix: str = "vramdoc:",
    dedup_ttl_s: int = 3600,
    thread_ttl_s: int = 7 * 24 * 3600,
) -> State:
    """Redis state when a URL is given, else memory; connecting is lazy, so a down Redis never blocks."""
    if redis_url is None:
        return MemoryState(dedup_ttl_s=dedup_ttl_s, thread_ttl_s=thread_ttl_s)
    client = connect_redis(redis_url, timeout_s=1.0)
    return RedisState(client, key_prefix=key_prefix, dedup_ttl_s=dedup_ttl_s, thread_ttl_s=thread_ttl_s)
