"""Calibration samples in the shared Redis, each kept for the team-memory retention.

One key per sample (`<prefix>calibration:sample:<key>`, SET NX: the same log pasted twice, in two
channels or through the bot and the API, is one sample) plus a sorted index by time for listing.
Numbers and ids only. Redis failing is logged once per outage and answered as "no samples", so a
diagnosis never fails for calibration's sake.
"""

from __future__ import annotations

import logging
import time

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.redis_link import Outage
from service.schemas import CalibrationSample
from service.team_memory import DAY_S

__all__ = ["CalibrationStore"]

log = logging.getLogger("vramdoc.calibration")

# the most samples one listing reads: the retention bounds them, this bounds one request's work
MAX_LISTED = 5000


class CalibrationStore:
    def __init__(
        self, client: aioredis.Redis, *, key_prefix: str = "vramdoc:", retention_days: int = 30
    ) -> None:
        self._redis = client
        self._prefix = f"{key_prefix}calibration:"
        self.retention_s = retention_days * DAY_S
        self._outage = Outage(log, "calibration samples")

    def _sample_key(self, key: str) -> str:
        return f"{self._prefix}sample:{key}"

    async def record(self, sample: CalibrationSample, *, now: float | None = None) -> bool:
        """Keep one sample; False when it was already kept (or Redis cannot say)."""
        now = time.time() if now is None else now
        index = f"{self._prefix}index"
        try:
            added = await self._redis.set(
                self._sample_key(sample.key), msgspec.json.encode(sample), nx=True, ex=self.retention_s
            )
            if added:
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.zadd(index, {sample.key: now})
                    pipe.zremrangebyscore(index, "-inf", now - self.retention_s)
                    pipe.expire(index, self.retention_s)
                    await pipe.execute()
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "samples are not recorded")
            return False
        self._outage.ok()
        return bool(added)

    async def samples(self, *, now: float | None = None) -> list[CalibrationSample]:
        """Every sample within the retention, oldest first; unreadable entries are skipped."""
        now = time.time() if now is None else now
        try:
            keys = await self._redis.zrangebyscore(
                f"{self._prefix}index", now - self.retention_s, "+inf", start=0, num=MAX_LISTED
            )
            names = [self._sample_key(k.decode() if isinstance(k, bytes) else str(k)) for k in keys]
            values = await self._redis.mget(names) if names else []
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "calibration is reported empty")
            return []
        self._outage.ok()
        found = []
        for raw in values:
            if raw is None:
                continue  # expired between the index and the read
            try:
                found.append(msgspec.json.decode(raw, type=CalibrationSample))
            except msgspec.DecodeError:
                log.warning("an unreadable calibration sample was skipped")
        return found

    async def close(self) -> None:
        await self._redis.aclose()
