"""Team memory: which failures the team met before, where, on which hosts, and what fixed them.

Kept in Redis (shared by every bot replica) under the fingerprint's key, for the retention the
operator sets (VRAMDOC_MEMORY_RETENTION_DAYS); only ids, numbers, host names and Slack thread
references are stored, never log text. Without Redis there is no memory and the bot answers as
before; a failing Redis call is logged and the answer goes out without the memory line.
"""

from __future__ import annotations

import logging
import math
import time

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.blocks import Message
from service.schemas import Fingerprint, Fix

__all__ = [
    "Recent",
    "RepliedTo",
    "Sighting",
    "TeamMemory",
    "ThreadRef",
    "memory_note",
    "promote_fix",
    "with_note",
]

log = logging.getLogger(__name__)

_DAY_S = 86400
_THREADS_KEPT = 20
_MAX_BLOCKS = 50  # Slack's limit on blocks in one message


class ThreadRef(msgspec.Struct, frozen=True, kw_only=True):
    """A Slack message where a fingerprint appeared: channel id, message ts, permalink if Slack gave one."""

    channel: str
    ts: str
    permalink: str | None = None


class RepliedTo(msgspec.Struct, frozen=True, kw_only=True):
    """What one of the bot's replies answered: the fingerprint, its top fix, and the reply's thread."""

    key: str
    thread_ts: str
    top_fix: str | None = None


class Recent(msgspec.Struct, frozen=True, kw_only=True):
    fingerprint: Fingerprint
    sighting: Sighting


class Sighting(msgspec.Struct, frozen=True, kw_only=True):
    """What the team memory holds about one fingerprint."""

    key: str
    count: int
    first_seen: float
    last_seen: float
    hosts: list[str]
    first: ThreadRef | None
    fixed_by: str | None = None


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


class TeamMemory:
    """Fingerprint sightings in Redis: HINCRBY/HSETNX on one hash per fingerprint, so replicas never race."""

    def __init__(
        self, client: aioredis.Redis, *, key_prefix: str = "vramdoc:", retention_days: int = 30
    ) -> None:
        self._redis = client
        self._prefix = f"{key_prefix}memory:"
        self.retention_s = retention_days * _DAY_S

    def _key(self, key: str, part: str = "") -> str:
        return f"{self._prefix}fp:{key}{part}"

    async def recall(self, key: str) -> Sighting | None:
        """The sighting of a fingerprint, or None when it is new (or Redis cannot say right now)."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self._key(key))
                pipe.smembers(self._key(key, ":hosts"))
                fields, hosts = await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable for team memory (%s); answering without it", exc)
            return None
        values = {_text(k): _text(v) for k, v in fields.items()}
        if not values.get("count"):
            return None
        first = None
        if values.get("first_channel") and values.get("first_ts"):
            first = ThreadRef(
                channel=str(values["first_channel"]),
                ts=str(values["first_ts"]),
                permalink=values.get("first_permalink") or None,
            )
        return Sighting(
            key=key,
            count=int(str(values["count"])),
            first_seen=float(str(values.get("first_seen") or 0)),
            last_seen=float(str(values.get("last_seen") or 0)),
            hosts=sorted(str(_text(h)) for h in hosts),
            first=first,
            fixed_by=values.get("fixed_by") or None,
        )

    async def record(
        self,
        fingerprint: Fingerprint,
        where: ThreadRef,
        hosts: tuple[str, ...] = (),
        *,
        now: float | None = None,
    ) -> None:
        """Count one more sighting; the first thread and first time are kept, the rest updated."""
        now = time.time() if now is None else now
        main = self._key(fingerprint.key)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hincrby(main, "count", 1)
                pipe.hsetnx(main, "first_seen", repr(now))
                pipe.hset(main, "last_seen", repr(now))
                pipe.hsetnx(main, "first_channel", where.channel)
                pipe.hsetnx(main, "first_ts", where.ts)
                pipe.hsetnx(main, "first_permalink", where.permalink or "")
                pipe.hset(main, "fingerprint", msgspec.json.encode(fingerprint))
                pipe.expire(main, self.retention_s)
                if hosts:
                    pipe.sadd(self._key(fingerprint.key, ":hosts"), *hosts)
                    pipe.expire(self._key(fingerprint.key, ":hosts"), self.retention_s)
                threads = self._key(fingerprint.key, ":threads")
                pipe.rpush(threads, msgspec.json.encode(where))
                pipe.ltrim(threads, -_THREADS_KEPT, -1)
                pipe.expire(threads, self.retention_s)
                pipe.zadd(f"{self._prefix}recent", {fingerprint.key: now})
                pipe.zremrangebyscore(f"{self._prefix}recent", "-inf", now - self.retention_s)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable to record a fingerprint (%s); it is not remembered", exc)

    async def mark_fixed(self, key: str, fix_id: str) -> bool:
        """Record the fix that resolved a fingerprint (the latest mark wins); False if Redis failed."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key(key), "fixed_by", fix_id)
                pipe.expire(self._key(key), self.retention_s)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable to record a fix (%s)", exc)
            return False
        return True

    async def remember_reply(self, where: ThreadRef, replied: RepliedTo) -> None:
        """Which fingerprint (and top fix) a posted reply answered, so a ✅ on it can be attributed."""
        value = msgspec.json.encode(replied)
        try:
            await self._redis.set(
                f"{self._prefix}reply:{where.channel}:{where.ts}", value, ex=self.retention_s
            )
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable to remember a reply (%s)", exc)

    async def reply(self, channel: str, ts: str) -> RepliedTo | None:
        """The fingerprint key and top fix of one of the bot's replies; None for any other message."""
        try:
            raw = await self._redis.get(f"{self._prefix}reply:{channel}:{ts}")
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable for team memory (%s)", exc)
            return None
        if raw is None:
            return None
        try:
            return msgspec.json.decode(raw, type=RepliedTo)
        except msgspec.DecodeError:
            log.warning("the reply record of %s in %s is unreadable; ignoring it", ts, channel)
            return None

    async def claim_thanks(self, channel: str, thread_ts: str) -> bool:
        """True the first time a thread records a fix: the bot thanks once per thread, not per click."""
        try:
            first = await self._redis.set(
                f"{self._prefix}thanked:{channel}:{thread_ts}", "1", nx=True, ex=self.retention_s
            )
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable for team memory (%s)", exc)
            return False
        return bool(first)

    async def recent(self, days: int, *, limit: int = 10, now: float | None = None) -> list[Recent]:
        """The most frequent fingerprints seen in the last `days`, most sightings first."""
        now = time.time() if now is None else now
        try:
            keys = await self._redis.zrangebyscore(f"{self._prefix}recent", now - days * _DAY_S, "+inf")
            rows: list[Recent] = []
            for raw_key in keys:
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                sighting = await self.recall(key)
                raw = await self._redis.hget(self._key(key), "fingerprint")
                if sighting is None or raw is None:
                    continue
                print_ = msgspec.json.decode(raw, type=Fingerprint)
                rows.append(Recent(fingerprint=print_, sighting=sighting))
        except (RedisError, OSError, msgspec.DecodeError) as exc:
            log.warning("team memory cannot list recent failures (%s)", exc)
            return []
        rows.sort(key=lambda row: (-row.sighting.count, -row.sighting.last_seen))
        return rows[:limit]

    async def threads(self, key: str) -> list[ThreadRef]:
        """The threads (most recent last) where a fingerprint appeared."""
        try:
            raw = await self._redis.lrange(self._key(key, ":threads"), 0, -1)
        except (RedisError, OSError) as exc:
            log.warning("Redis is unreachable for team memory (%s)", exc)
            return []
        refs = []
        for item in raw:
            try:
                refs.append(msgspec.json.decode(item, type=ThreadRef))
            except msgspec.DecodeError:
                log.warning("an unreadable thread reference for fingerprint %s was skipped", key)
        return refs

    async def close(self) -> None:
        await self._redis.aclose()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def memory_note(
    sighting: Sighting, *, this_one: bool = True, now: float | None = None, fix_title: str | None = None
) -> str:
    """ "Seen 3 times in 7 days (gpu-07, gpu-08) – first in #infra-llm: <permalink>".

    `this_one`: the answer carrying the line is a sighting not recorded yet, so it is counted too.
    """
    now = time.time() if now is None else now
    days = max(1, math.ceil((now - sighting.first_seen) / _DAY_S))
    count = sighting.count + int(this_one)
    text = f":repeat: Seen {_plural(count, 'time')} in {_plural(days, 'day')}"
    if sighting.hosts:
        text += f" ({', '.join(sighting.hosts)})"
    if sighting.first is not None:
        text += f" – first in <#{sighting.first.channel}>"
        if sighting.first.permalink:
            text += f": <{sighting.first.permalink}>"
    if fix_title:
        text += f"\n:white_check_mark: *{fix_title}* fixed it before, so it is ranked first."
    return text


def with_note(message: Message, note: str) -> Message:
    """The message with the memory line as its first block (and first line of its fallback text)."""
    note_block = {"type": "section", "text": {"type": "mrkdwn", "text": note}}
    blocks = [note_block, *message.blocks]
    if len(blocks) > _MAX_BLOCKS:
        # Drop the block before the last (the engine line stays last), keeping Slack's limit.
        del blocks[-2]
    return msgspec.structs.replace(message, text=f"{note}\n{message.text}", blocks=blocks)


def promote_fix(fixes: list[Fix], fix_id: str) -> list[Fix]:
    """The fixes with `fix_id` (the one that worked before) ranked first; the same list if it is absent."""
    chosen = [fix for fix in fixes if fix.id == fix_id]
    if not chosen:
        return fixes
    ordered = chosen + [fix for fix in fixes if fix.id != fix_id]
    return [msgspec.structs.replace(fix, rank=rank) for rank, fix in enumerate(ordered, start=1)]


def render_recent(rows: list[Recent], days: int) -> str:
    """The `/vramdoc recent` answer: one line per failure with count, hosts and the fix that worked."""
    if not rows:
        return f"No failures were recorded in the last {_plural(days, 'day')}."
    lines = [f"*Most frequent failures, last {_plural(days, 'day')}*"]
    for row in rows:
        print_, seen = row.fingerprint, row.sighting
        what = " · ".join(
            p
            for p in (print_.model, print_.gpu, f"vLLM {print_.vllm_minor}" if print_.vllm_minor else None)
            if p
        )
        line = f"• *{print_.phase}* ({what or 'unknown model'}): {_plural(seen.count, 'time')}"
        if seen.hosts:
            line += f" on {', '.join(seen.hosts)}"
        if seen.first is not None:
            line += f", first in <#{seen.first.channel}>"
        if seen.fixed_by:
            line += f"; fixed by `{seen.fixed_by}`"
        lines.append(line)
    return "\n".join(lines)
