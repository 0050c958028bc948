"""The agent's settings, read once from the environment, with a sentence for every bad value.

VRAMDOC_AGENT_TOKEN / VRAMDOC_AGENT_TOKEN_FILE   bearer token for GET /v1/snapshot (one of them)
VRAMDOC_AGENT_VLLM_URLS      comma list of local vLLM servers (default http://127.0.0.1:8000;
                             empty means scrape none)
VRAMDOC_AGENT_DCGM_URL       dcgm-exporter endpoint to read GPU memory from instead of NVML
VRAMDOC_AGENT_URL            URL the bot should use to reach this agent (default: derived)
VRAMDOC_AGENT_HEARTBEAT_S    registry heartbeat interval, seconds (default 15; TTL is 3x)
VRAMDOC_AGENT_SCRAPE_TIMEOUT_S  per-scrape HTTP timeout, seconds (default 2)
VRAMDOC_AGENT_PROC_ROOT      the host's /proc (default /proc; e.g. /host/proc in a container)
VRAMDOC_REDIS_URL            registry; unset means the agent does not register
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from service.env_settings import MIN_TOKEN_CHARS, EnvVar, convert_env, read_agent_token
from service.errors import SettingsError
from service.redis_link import DEFAULT_REDIS_PREFIX, redis_prefix
from service.registry import HOST_NAME

__all__ = [
    "DEFAULT_VLLM_URL",
    "MIN_TOKEN_CHARS",
    "AgentSettings",
    "host_name",
    "load_settings",
    "load_token",
]

DEFAULT_VLLM_URL = "http://127.0.0.1:8000"
_SECONDS = "a number of seconds more than 0 and less than a day (e.g. 15)"
Seconds = Annotated[float, msgspec.Meta(gt=0, lt=86400)]


class AgentSettings(msgspec.Struct, frozen=True, kw_only=True):
    vllm_urls: tuple[str, ...] = (DEFAULT_VLLM_URL,)
    dcgm_url: str | None = None
    redis_url: str | None = None
    # the installation's Redis namespace, shared with the service and the bot (VRAMDOC_REDIS_PREFIX)
    redis_prefix: str = DEFAULT_REDIS_PREFIX
    url: str | None = None
    heartbeat_s: Seconds = 15.0
    scrape_timeout_s: Seconds = 2.0
    proc_root: Path = Path("/proc")


_VARIABLES = {
    "heartbeat_s": EnvVar("VRAMDOC_AGENT_HEARTBEAT_S", _SECONDS),
    "scrape_timeout_s": EnvVar("VRAMDOC_AGENT_SCRAPE_TIMEOUT_S", _SECONDS),
    "proc_root": EnvVar("VRAMDOC_AGENT_PROC_ROOT", "a directory such as /proc or /host/proc"),
}


def _http_url(name: str, value: str) -> str:
    try:
        parts = urlsplit(value)
        # .port raises ValueError when the port is out of range
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        valid = valid and not any(c.isspace() for c in value)
    except ValueError:
        valid = False
    if not valid:
        raise SettingsError(f"{name} holds {value!r}, which is not an http:// or https:// URL.")
    return value


def _redis_url(url: str | None) -> str | None:
    """Checked here: a malformed URL would otherwise abort startup with a redis-py traceback."""
    schemes = ("redis://", "rediss://", "unix://")
    if url is not None and not url.startswith(schemes):
        raise SettingsError(
            f"VRAMDOC_REDIS_URL must start with {', '.join(schemes)} (it starts with {url.split(':')[0]!r})."
        )
    return url


def load_settings(env: Mapping[str, str]) -> AgentSettings:
    """Settings from the environment; raises SettingsError naming the bad variable."""
    raw_urls = env.get("VRAMDOC_AGENT_VLLM_URLS")
    urls = DEFAULT_VLLM_URL if raw_urls is None else raw_urls
    vllm_urls = tuple(_http_url("VRAMDOC_AGENT_VLLM_URLS", u.strip()) for u in urls.split(",") if u.strip())
    dcgm = env.get("VRAMDOC_AGENT_DCGM_URL", "").strip() or None
    url = env.get("VRAMDOC_AGENT_URL", "").strip() or None
    return convert_env(
        AgentSettings,
        env,
        _VARIABLES,
        vllm_urls=vllm_urls,
        dcgm_url=_http_url("VRAMDOC_AGENT_DCGM_URL", dcgm) if dcgm else None,
        redis_url=_redis_url(env.get("VRAMDOC_REDIS_URL", "").strip() or None),
        redis_prefix=redis_prefix(env),
        url=_http_url("VRAMDOC_AGENT_URL", url) if url else None,
    )


def load_token(env: Mapping[str, str]) -> str:
    """The bearer token the agent demands; an agent without one must not start."""
    token = read_agent_token(env)
    if token is None:
        raise SettingsError(
            "The agent serves process lists, so it needs a bearer token: set VRAMDOC_AGENT_TOKEN "
            "or VRAMDOC_AGENT_TOKEN_FILE (e.g. to the output of `openssl rand -hex 32`)."
        )
    return token


def host_name(name: str | None) -> str:
    """The registry name: the given one or this machine's, lowercased and checked."""
    chosen = (name if name is not None else socket.gethostname().split(".")[0]).strip().lower()
    if not HOST_NAME.match(chosen):
        raise SettingsError(
            f"The host name {chosen!r} cannot be a registry key: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (pass --name)."
        )
    return chosen
