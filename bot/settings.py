"""The bot's settings, read once from the environment (DESIGN §3.8).

Every value has a safe default except the Slack credentials; a bad value fails at start with one
sentence naming the variable, never later inside a listener.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec

from service.env_settings import EnvVar, convert_env, read_agent_token
from service.errors import SettingsError
from service.redis_link import DEFAULT_REDIS_PREFIX, redis_prefix

__all__ = ["BotSettings", "SettingsError", "load_settings"]

DEFAULT_MAX_FILE_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024


_HTTP = ("http://", "https://")
_POSITIVE = "a positive number"
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]


class BotSettings(msgspec.Struct, frozen=True, kw_only=True):
    bot_token: str
    signing_secret: str | None = None
    app_token: str | None = None
    service_url: str = "http://127.0.0.1:8080"
    service_token: str | None = None
    redis_url: str | None = None
    # the installation's Redis namespace, shared with the service and the agents (VRAMDOC_REDIS_PREFIX)
    redis_prefix: str = DEFAULT_REDIS_PREFIX
    agent_token: str | None = None
    hosts_file: Path | None = None
    slack_api_url: str | None = None
    max_file_bytes: PositiveInt = DEFAULT_MAX_FILE_BYTES
    max_body_bytes: PositiveInt = DEFAULT_MAX_BODY_BYTES
    service_timeout_s: PositiveFloat = 15.0
    agent_timeout_s: PositiveFloat = 3.0
    thread_ttl_s: PositiveInt = 7 * 24 * 3600
    dedup_ttl_s: PositiveInt = 3600
    # Channels where registered host names may be listed ("*" for every channel); none by default.
    list_hosts_in: tuple[str, ...] = ()
    memory_retention_days: PositiveInt = 30

    def may_list_hosts(self, channel: str) -> bool:
        """Whether a reply in `channel` may name the registered hosts (they reveal the fleet)."""
        return "*" in self.list_hosts_in or channel in self.list_hosts_in


def _channels(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """`off` (or unset): none; `all`: every channel; else comma-separated channel ids (C0123…)."""
    raw = env.get(name, "").strip()
    if raw.lower() in {"", "off", "none", "0"}:
        return ()
    if raw.lower() in {"all", "*"}:
        return ("*",)
    channels = tuple(part.strip() for part in raw.split(",") if part.strip())
    bad = [c for c in channels if not c.isalnum() or not c.isupper()]
    if bad:
        raise SettingsError(
            f"{name} must be off, all, or Slack channel ids such as C0123ABCD (not {bad[0]!r})."
        )
    return channels


_VARIABLES = {
    "max_file_bytes": EnvVar("VRAMDOC_BOT_MAX_FILE_BYTES", f"{_POSITIVE} of bytes"),
    "max_body_bytes": EnvVar("VRAMDOC_MAX_BODY_BYTES", f"{_POSITIVE} of bytes"),
    "service_timeout_s": EnvVar("VRAMDOC_BOT_SERVICE_TIMEOUT_S", f"{_POSITIVE} of seconds"),
    "agent_timeout_s": EnvVar("VRAMDOC_BOT_AGENT_TIMEOUT_S", f"{_POSITIVE} of seconds"),
    "thread_ttl_s": EnvVar("VRAMDOC_BOT_THREAD_TTL_S", f"{_POSITIVE} of whole seconds"),
    "memory_retention_days": EnvVar("VRAMDOC_MEMORY_RETENTION_DAYS", f"{_POSITIVE} of whole days"),
}


def _url(env: Mapping[str, str], name: str, schemes: tuple[str, ...], default: str | None) -> str | None:
    """A URL setting checked at startup, so a typo is one sentence now, not a failure per message."""
    raw = env.get(name, "").strip().rstrip("/")
    if not raw:
        return default
    if not raw.startswith(schemes) or len(raw) <= len(raw.split("://")[0]) + 3:
        scheme = raw.split(":")[0]
        raise SettingsError(f"{name} must start with {' or '.join(schemes)} (it starts with {scheme!r}).")
    return raw


def load_settings(env: Mapping[str, str] | None = None, *, http: bool = False) -> BotSettings:
    """Settings from `env` (default os.environ); HTTP mode needs the signing secret."""
    env = os.environ if env is None else env
    bot_token = env.get("SLACK_BOT_TOKEN", "").strip()
    if not bot_token:
        raise SettingsError("SLACK_BOT_TOKEN is not set: give the bot's xoxb- token.")
    app_token = env.get("SLACK_APP_TOKEN", "").strip() or None
    secret = env.get("SLACK_SIGNING_SECRET", "").strip() or None
    if (http or app_token is None) and secret is None:
        raise SettingsError(
            "SLACK_SIGNING_SECRET is not set: the Events API over HTTP needs it to verify Slack's requests."
        )
    hosts_file = env.get("VRAMDOC_HOSTS_FILE", "").strip()
    return convert_env(
        BotSettings,
        env,
        _VARIABLES,
        bot_token=bot_token,
        signing_secret=secret,
        app_token=None if http else app_token,
        service_url=_url(env, "VRAMDOC_SERVICE_URL", _HTTP, "http://127.0.0.1:8080") or "",
        service_token=env.get("VRAMDOC_SERVICE_TOKEN", "").strip() or None,
        redis_url=_url(env, "VRAMDOC_REDIS_URL", ("redis://", "rediss://", "unix://"), None),
        redis_prefix=redis_prefix(env),
        agent_token=read_agent_token(env),
        hosts_file=Path(hosts_file) if hosts_file else None,
        slack_api_url=_url(env, "VRAMDOC_SLACK_API_URL", _HTTP, None),
        list_hosts_in=_channels(env, "VRAMDOC_BOT_LIST_HOSTS"),
    )
