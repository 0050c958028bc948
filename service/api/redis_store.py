"""The Redis side of the service's shared state (service.api.stores imports it only when a Redis URL
is configured, so a service without Redis never loads the client)."""

from __future__ import annotations

from litestar.stores.redis import RedisStore
from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["REDIS_FAILURES", "RedisCounterStore"]

# What a Redis call raises when Redis is down, slow or gone mid-call.
REDIS_FAILURES: tuple[type[Exception], ...] = (RedisError, OSError)


class RedisCounterStore(RedisStore):
    """Litestar's RedisStore plus an atomic fixed-window counter (INCR, then EXPIRE on first hit)."""

    def __init__(self, redis: Redis, namespace: str) -> None:
        super().__init__(redis, namespace=namespace, handle_client_shutdown=True)
        self._client = redis

    async def incr(self, key: str, expires_in: int) -> int:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.incr(self._make_key(key))
            pipe.expire(self._make_key(key), expires_in, nx=True)
            count, _ = await pipe.execute()
        return int(count)

    async def ping(self) -> None:
        await self._client.ping()
