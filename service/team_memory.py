"""Team memory's store: which failures the team met before, where, on which hosts, what fixed them.

One home shared by the bot (which records sightings and fixes) and the service (which lists them at
`GET /v1/fingerprints`). Kept in Redis under `<prefix>memory:` for the retention the operator sets
(VRAMDOC_MEMORY_RETENTION_DAYS); only ids, numbers, host names and Slack thread references are
stored, never log text. A failing Redis call is logged and answered as "nothing known".
"""

from __future__ import annotations

import logging
import time

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.schemas import Fingerprint

__all__ = ["DAY_S", "Recent", "RepliedTo", "Sighting", "TeamMemory", "ThreadRef"]

log = logging.getLogger("vramdoc.team_memory")

DAY_S = 86400
MAX_RANKED = 1000  # the most recently seen fingerprints a listing ranks (its Redis work per request)
_THREADS_KEPT = 20


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
    """One recurring failure: its fingerprint and what team memory holds about it."""

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
        self.retention_s = retention_days * DAY_S

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
        if not str(values.get("count") or "").isdigit():
            return None  # new, or an entry this version cannot read
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

    async def recent(self, days: int, *, limit: int = 10, now: float | None = None) -> list[Recent] | None:
        """The most frequent fingerprints seen in the last `days`, most sightings first; None when
        Redis cannot say right now (an empty list would claim the team met no failure).

        Only the `MAX_RANKED` most recently seen are ranked, so a listing's Redis work is bounded
        however many distinct failures the window holds; an unreadable entry is skipped, not fatal.
        """
        now = time.time() if now is None else now
        try:
            keys = await self._redis.zrevrangebyscore(
                f"{self._prefix}recent", "+inf", now - days * DAY_S, start=0, num=MAX_RANKED
            )
            rows: list[Recent] = []
            for raw_key in keys:
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                sighting = await self.recall(key)
                raw = await self._redis.hget(self._key(key), "fingerprint")
                if sighting is None or raw is None:
                    continue
                try:
                    rows.append(
                        Recent(fingerprint=msgspec.json.decode(raw, type=Fingerprint), sighting=sighting)
                    )
                except msgspec.DecodeError:
                    log.warning("the team-memory entry %s is unreadable; it is left out of the listing", key)
        except (RedisError, OSError) as exc:
            log.warning("team memory cannot list recent failures (%s)", exc)
            return None
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
