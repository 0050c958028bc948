"""The agent registry's key scheme and its reader, shared by the agent (which writes) and the bot
(which reads): `vramdoc:agent:<host>` holds a JSON `AgentRegistration`.

Readers list agents with SCAN, never KEYS, and skip entries they cannot decode instead of failing.
"""

from __future__ import annotations

import logging
import re

import msgspec
from redis.asyncio import Redis

from service.errors import InputError
from service.schemas import AgentRegistration

__all__ = [
    "AGENT_KEY_PREFIX",
    "HOST_NAME",
    "InvalidHostError",
    "agent_key",
    "get_agent",
    "list_agents",
]

AGENT_KEY_PREFIX = "vramdoc:agent:"
# The names an agent may register under: they become Redis keys and words in a Slack reply.
HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")

log = logging.getLogger("vramdoc.registry")
_decoder = msgspec.json.Decoder(AgentRegistration)


class InvalidHostError(InputError):
    problem_type = "invalid-host"

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(
            f"{host!r} is not a host name an agent can register under "
            "(1-63 lowercase letters, digits, '.', '_' or '-')."
        )


def agent_key(host: str, prefix: str = AGENT_KEY_PREFIX) -> str:
    """The registry key for a host; raises InvalidHostError for names an agent cannot have."""
    name = host.strip().lower()
    if not HOST_NAME.match(name):
        raise InvalidHostError(host)
    return f"{prefix}{name}"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


async def get_agent(redis: Redis, host: str, prefix: str = AGENT_KEY_PREFIX) -> AgentRegistration | None:
    """The live registration of one host, or None when it is not registered (or expired)."""
    raw = await redis.get(agent_key(host, prefix))
    return _decode(raw, host) if raw is not None else None


async def list_agents(redis: Redis, prefix: str = AGENT_KEY_PREFIX) -> list[AgentRegistration]:
    """Every live registration, sorted by host; undecodable entries are logged and skipped."""
    keys = [key async for key in redis.scan_iter(match=f"{_glob_escape(prefix)}*", count=200)]
    if not keys:
        return []
    values = await redis.mget(keys)
    found = []
    for key, raw in zip(keys, values, strict=True):
        if raw is None:
            continue  # expired between SCAN and MGET
        registration = _decode(raw, key.decode() if isinstance(key, bytes) else str(key))
        if registration is not None:
            found.append(registration)
    return sorted(found, key=lambda r: r.host)


def _decode(raw: bytes | str, where: str) -> AgentRegistration | None:
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as err:
        log.warning("skipping the registry entry for %s: %s", where, err)
        return None
    except msgspec.DecodeError:
        log.warning("skipping the registry entry for %s: it is not JSON", where)
        return None
