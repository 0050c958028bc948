"""Event de-dup and thread context, in real Redis and in process memory."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.state import MemoryState, RedisState, State, ThreadContext, open_state


@pytest.fixture(params=["redis", "memory"])
async def state(request: pytest.FixtureRequest, redis_url: str, key_prefix: str) -> State:
    if request.param == "memory":
        return MemoryState()
    return RedisState(aioredis.from_url(redis_url), key_prefix=key_prefix)


async def test_an_event_id_is_claimed_once(state: State) -> None:
    assert await state.claim_event("Ev1")
    assert not await state.claim_event("Ev1")
    assert await state.claim_event("Ev2")
    await state.close()


async def test_thread_context_round_trips(state: State) -> None:
    context = ThreadContext(
        log="CUDA out of memory", command="vllm serve x", hosts=("gpu-07",), vllm_version="0.8.5"
    )
    assert await state.load_thread("C1", "1.0") is None
    await state.save_thread("C1", "1.0", context)
    assert await state.load_thread("C1", "1.0") == context
    assert await state.load_thread("C1", "2.0") is None
    await state.close()


async def test_redis_keys_carry_ttls(redis_url: str, key_prefix: str) -> None:
    client = aioredis.from_url(redis_url)
    state = RedisState(client, key_prefix=key_prefix, dedup_ttl_s=60, thread_ttl_s=120)
    await state.claim_event("EvT")
    await state.save_thread("C1", "1.0", ThreadContext(log="x"))
    assert 0 < await client.ttl(f"{key_prefix}bot:event:EvT") <= 60
    assert 60 < await client.ttl(f"{key_prefix}bot:thread:C1:1.0") <= 120
    await state.close()


async def test_redis_down_falls_back_to_memory_and_still_dedups() -> None:
    state = open_state("redis://127.0.0.1:1/0")
    assert await state.claim_event("EvD")
    assert not await state.claim_event("EvD")
    await state.save_thread("C1", "1.0", ThreadContext(hosts=("gpu-07",)))
    assert await state.load_thread("C1", "1.0") == ThreadContext(hosts=("gpu-07",))
    await state.close()


async def test_expired_memory_entries_are_forgotten() -> None:
    state = MemoryState(dedup_ttl_s=0, thread_ttl_s=0)
    assert await state.claim_event("Ev")
    assert await state.claim_event("Ev")
    await state.save_thread("C", "1", ThreadContext(log="x"))
    assert await state.load_thread("C", "1") is None
