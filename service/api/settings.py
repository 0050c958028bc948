"""Service settings, read once from `VRAMDOC_*` environment variables.

A bad value stops startup with a sentence naming the variable, so a typo never runs as a default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec

from service.env_settings import EnvVar, convert_env
from service.errors import SettingsError
from service.redis_link import DEFAULT_REDIS_PREFIX

__all__ = ["RateLimit", "Settings", "SettingsError"]

_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_UNIT_ALIASES = {"s": "second", "sec": "second", "m": "minute", "min": "minute", "h": "hour", "d": "day"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+?)s?\s*$")
_OFF = {"", "0", "off", "none", "unlimited"}
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
DEFAULT_CACHE_TTL_S = 300
DEFAULT_CACHE_MAX_ENTRIES = 4096
DEFAULT_BODY_TIMEOUT_S = 30.0


class RateLimit(msgspec.Struct, frozen=True):
    """At most `requests` per client in each fixed window of `window_s` seconds."""

    requests: int
    window_s: int

    @classmethod
    def parse(cls, text: str) -> RateLimit | None:
        """`600/minute`, `10/s`, `5000/hour`; `off` or `0` disables limiting."""
        if text.strip().lower() in _OFF:
            return None
        match = _RATE.match(text.lower())
        unit = _UNIT_ALIASES.get(match.group(2), match.group(2)) if match else ""
        if match is None or unit not in _UNIT_SECONDS or int(match.group(1)) < 1:
            raise SettingsError(
                f"VRAMDOC_RATE_LIMIT={text!r} is not a rate: use a count per unit such as 600/minute, or off."
            )
        return cls(int(match.group(1)), _UNIT_SECONDS[unit])


DEFAULT_RATE_LIMIT = RateLimit(600, 60)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the HTTP service reads from its environment (defaults suit `make run`)."""

    redis_url: str | None = None
    redis_prefix: str = DEFAULT_REDIS_PREFIX
    sentry_dsn: str | None = None
    sentry_environment: str | None = None
    rules_dir: Path | None = None
    api_tokens: tuple[str, ...] = ()
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_MAX_BODY_BYTES
    rate_limit: RateLimit | None = DEFAULT_RATE_LIMIT
    cache_ttl_s: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_CACHE_TTL_S
    cache_max_entries: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_CACHE_MAX_ENTRIES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    # team memory and calibration samples in Redis: how long they are kept
    memory_retention_days: Annotated[int, msgspec.Meta(ge=1)] = 30
    # pasted profiles of one model family, GPU and vLLM minor before the estimator's note cites them
    calibration_min_samples: Annotated[int, msgspec.Meta(ge=1)] = 5

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the `VRAMDOC_*` variables; unset or empty means the default."""
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        rate = text("VRAMDOC_RATE_LIMIT")
        rules_dir = text("VRAMDOC_RULES_DIR")
        raw_tokens = text("VRAMDOC_API_TOKENS")
        tokens = tuple(t.strip() for t in (raw_tokens or "").split(",") if t.strip())
        if raw_tokens is not None and not tokens:
            # Set but naming no token would silently leave the service open to everyone.
            raise SettingsError("VRAMDOC_API_TOKENS is set but names no token; give comma-separated tokens.")
        redis_url = text("VRAMDOC_REDIS_URL")
        if redis_url is not None and not redis_url.startswith(_REDIS_SCHEMES):
            raise SettingsError(
                f"VRAMDOC_REDIS_URL must start with {', '.join(_REDIS_SCHEMES)} "
                f"(it starts with {redis_url.split(':')[0]!r})."
            )
        return convert_env(
            cls,
            env,
            _VARIABLES,
            redis_url=redis_url,
            redis_prefix=text("VRAMDOC_REDIS_PREFIX") or DEFAULT_REDIS_PREFIX,
            sentry_dsn=text("VRAMDOC_SENTRY_DSN"),
            sentry_environment=text("VRAMDOC_SENTRY_ENVIRONMENT"),
            rules_dir=Path(rules_dir) if rules_dir else None,
            api_tokens=tokens,
            rate_limit=RateLimit.parse(rate) if rate is not None else DEFAULT_RATE_LIMIT,
        )


_VARIABLES = {
    "max_body_bytes": EnvVar("VRAMDOC_MAX_BODY_BYTES", "a whole number of bytes, at least 1"),
    "cache_ttl_s": EnvVar("VRAMDOC_CACHE_TTL_S", "a whole number of seconds, at least 0"),
    "cache_max_entries": EnvVar("VRAMDOC_CACHE_MAX_ENTRIES", "a whole number of at least 1"),
    "memory_retention_days": EnvVar("VRAMDOC_MEMORY_RETENTION_DAYS", "a whole number of days, at least 1"),
    "calibration_min_samples": EnvVar("VRAMDOC_CALIBRATION_MIN_SAMPLES", "a whole number of at least 1"),
}
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
