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

import re
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from service.errors import InputError

__all__ = [
    "DEFAULT_VLLM_URL",
    "MIN_TOKEN_CHARS",
    "AgentConfigError",
    "AgentSettings",
    "host_name",
    "load_settings",
    "load_token",
]

DEFAULT_VLLM_URL = "http://127.0.0.1:8000"
# A bearer token shorter than this can be guessed or brute-forced over the network.
MIN_TOKEN_CHARS = 32
HOST_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class AgentConfigError(InputError):
    """A setting of the agent cannot be used; the message names it and what would work."""

    problem_type = "invalid-agent-config"


@dataclass(frozen=True, slots=True)
class AgentSettings:
    vllm_urls: tuple[str, ...] = (DEFAULT_VLLM_URL,)
    dcgm_url: str | None = None
    redis_url: str | None = None
    url: str | None = None
    heartbeat_s: float = 15.0
    scrape_timeout_s: float = 2.0
    proc_root: Path = Path("/proc")


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise AgentConfigError(f"{name}={raw!r} is not a number of seconds (e.g. {default:g}).") from None
    if not 0 < value < 86400:
        raise AgentConfigError(f"{name}={raw!r} must be more than 0 and less than a day, in seconds.")
    return value


def _http_url(name: str, value: str) -> str:
    try:
        parts = urlsplit(value)
        # .port raises ValueError when the port is out of range
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        valid = valid and not any(c.isspace() for c in value)
    except ValueError:
        valid = False
    if not valid:
        raise AgentConfigError(f"{name} holds {value!r}, which is not an http:// or https:// URL.")
    return value


def _redis_url(url: str | None) -> str | None:
    """Checked here: a malformed URL would otherwise abort startup with a redis-py traceback."""
    schemes = ("redis://", "rediss://", "unix://")
    if url is not None and not url.startswith(schemes):
        raise AgentConfigError(
            f"VRAMDOC_REDIS_URL must start with {', '.join(schemes)} (it starts with {url.split(':')[0]!r})."
        )
    return url


def load_settings(env: Mapping[str, str]) -> AgentSettings:
    """Settings from the environment; raises AgentConfigError naming the bad variable."""
    raw_urls = env.get("VRAMDOC_AGENT_VLLM_URLS")
    urls = DEFAULT_VLLM_URL if raw_urls is None else raw_urls
    vllm_urls = tuple(_http_url("VRAMDOC_AGENT_VLLM_URLS", u.strip()) for u in urls.split(",") if u.strip())
    dcgm = env.get("VRAMDOC_AGENT_DCGM_URL", "").strip() or None
    url = env.get("VRAMDOC_AGENT_URL", "").strip() or None
    return AgentSettings(
        vllm_urls=vllm_urls,
        dcgm_url=_http_url("VRAMDOC_AGENT_DCGM_URL", dcgm) if dcgm else None,
        redis_url=_redis_url(env.get("VRAMDOC_REDIS_URL", "").strip() or None),
        url=_http_url("VRAMDOC_AGENT_URL", url) if url else None,
        heartbeat_s=_positive(env, "VRAMDOC_AGENT_HEARTBEAT_S", 15.0),
        scrape_timeout_s=_positive(env, "VRAMDOC_AGENT_SCRAPE_TIMEOUT_S", 2.0),
        proc_root=Path(env.get("VRAMDOC_AGENT_PROC_ROOT", "").strip() or "/proc"),
    )


def _check_token_file_mode(path: Path) -> None:
    """A token file other users can read, or anyone but its owner can rewrite, protects nothing."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading it next reports the reason in one sentence
    if mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
        raise AgentConfigError(
            f"The token file named by VRAMDOC_AGENT_TOKEN_FILE is readable by other users or writable by "
            f"more than its owner (mode {stat.S_IMODE(mode):04o}): run `chmod 600 {path}` "
            "(or `chmod 640` to share it with a group)."
        )


def load_token(env: Mapping[str, str]) -> str:
    """The bearer token the agent demands; an agent without one must not start."""
    direct = env.get("VRAMDOC_AGENT_TOKEN", "").strip()
    path = env.get("VRAMDOC_AGENT_TOKEN_FILE", "").strip()
    if direct and path:
        raise AgentConfigError("Set only one of VRAMDOC_AGENT_TOKEN and VRAMDOC_AGENT_TOKEN_FILE, not both.")
    if path:
        _check_token_file_mode(Path(path))
        try:
            direct = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise AgentConfigError(
                f"The token file named by VRAMDOC_AGENT_TOKEN_FILE cannot be read ({err.__class__.__name__})."
            ) from None
        if not direct:
            raise AgentConfigError("The token file named by VRAMDOC_AGENT_TOKEN_FILE is empty.")
    if not direct:
        raise AgentConfigError(
            "The agent serves process lists, so it needs a bearer token: set VRAMDOC_AGENT_TOKEN "
            "or VRAMDOC_AGENT_TOKEN_FILE (e.g. to the output of `openssl rand -hex 32`)."
        )
    if any(c.isspace() for c in direct):
        raise AgentConfigError("The agent token must not contain whitespace.")
    if len(direct) < MIN_TOKEN_CHARS:
        raise AgentConfigError(
            f"The agent token has {len(direct)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. the output of `openssl rand -hex 32`)."
        )
    return direct


def host_name(name: str | None) -> str:
    """The registry name: the given one or this machine's, lowercased and checked."""
    chosen = (name if name is not None else socket.gethostname().split(".")[0]).strip().lower()
    if not HOST_RE.match(chosen):
        raise AgentConfigError(
            f"The host name {chosen!r} cannot be a registry key: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (pass --name)."
        )
    return chosen
