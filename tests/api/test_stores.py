"""Rate-limit counters and the response cache, in process memory and in a real Redis."""

from __future__ import annotations

import asyncio

from service.api.stores import BoundedMemoryStore, SharedState


async def test_memory_store_evicts_oldest_beyond_its_cap() -> None:
    store = BoundedMemoryStore(max_entries=3)
    for i in range(5):
        await store.set(f"k{i}", str(i))
    assert [await store.get(f"k{i}") for i in range(5)] == [None, None, b"2", b"3", b"4"]


async def test_memory_store_forgets_expired_values() -> None:
    store = BoundedMemoryStore()
    await store.set("short", b"x", expires_in=0)
    await store.set("long", b"y", expires_in=60)
    assert await store.get("short") is None
    assert await store.get("long") == b"y"
    assert 0 < (await store.expires_in("long") or 0) <= 60


async def test_memory_counter_counts_concurrent_hits_exactly() -> None:
    store = BoundedMemoryStore()
    counts = await asyncio.gather(*(store.incr("client", 60) for _ in range(50)))
    assert sorted(counts) == list(range(1, 51))


async def test_redis_counter_is_atomic_across_clients(redis_url: str, key_prefix: str) -> None:
    first = SharedState(redis_url, namespace=key_prefix)
    second = SharedState(redis_url, namespace=key_prefix)
    try:
        counts = await asyncio.gather(
            *(state.hit("ip:10.0.0.1:1", 60) for state in (first, second) for _ in range(20))
        )
        assert sorted(counts) == list(range(1, 41))
        assert first.redis is not None
        assert 0 < (await first.redis.expires_in("rl:ip:10.0.0.1:1") or 0) <= 60
    finally:
        await first.close()
        await second.close()


async def test_redis_cache_round_trips_with_expiry(redis_url: str, key_prefix: str) -> None:
    state = SharedState(redis_url, namespace=key_prefix)
    try:
        await state.store("diagnose:abc", b'{"phase":"no_failure"}', ttl_s=30)
        assert await state.cached("diagnose:abc") == b'{"phase":"no_failure"}'
        assert await state.cached("diagnose:other") is None
        assert await state.redis_status() == "ok"
    finally:
        await state.close()


async def test_unreachable_redis_degrades_to_memory_limits_and_no_cache(unused_redis_url: str) -> None:
    state = SharedState(unused_redis_url)
    try:
        assert [await state.hit("ip:1", 60) for _ in range(3)] == [1, 2, 3]
        await state.store("k", b"v", ttl_s=30)
        assert await state.cached("k") is None
        status = await state.redis_status()
        assert status.startswith("unreachable: ")
    finally:
        await state.close()
