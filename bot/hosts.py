"""Which GPU hosts the bot may contact: the agents' Redis registry plus a static hosts file.

A host name typed in Slack is only a key into these two tables; the URL always comes from an agent's
own registration or from the operator's file, never from the message (DESIGN §6: no SSRF).
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.errors import SettingsError
from service.redis_link import Outage
from service.registry import HOST_NAME, list_agents

__all__ = ["HostDirectory", "Resolution", "load_hosts_file"]

log = logging.getLogger(__name__)


class Resolution(msgspec.Struct, frozen=True, kw_only=True):
    """Names split into those with an agent URL and those nobody registered."""

    found: dict[str, str]
    unknown: tuple[str, ...]
    known: tuple[str, ...]
    registry_down: bool = False


def _hosts_table(path: Path) -> dict[str, str]:
    """The file decoded by msgspec's YAML reader (not the rule-pack loader: the bot loads no packs)."""
    where = f"The hosts file {path} (VRAMDOC_HOSTS_FILE)"
    try:
        return msgspec.yaml.decode(path.read_bytes(), type=dict[str, str])
    except OSError as exc:
        raise SettingsError(f"{where} cannot be read ({exc.strerror}).") from None
    except msgspec.ValidationError as exc:
        raise SettingsError(f"{where} must map host names to URLs: {exc}.") from None
    except msgspec.DecodeError:
        raise SettingsError(f"{where} is not valid YAML.") from None


def load_hosts_file(path: Path) -> dict[str, str]:
    """The operator's `name: url` table; raises SettingsError naming the bad entry."""
    hosts: dict[str, str] = {}
    for name, url in _hosts_table(path).items():
        key = name.strip().lower()
        if not HOST_NAME.match(key):
            raise SettingsError(
                f"In the hosts file {path}, the host name {name!r} must match {HOST_NAME.pattern}."
            )
        if urlsplit(url).scheme not in {"http", "https"} or not urlsplit(url).netloc:
            raise SettingsError(f"In the hosts file {path}, host {name!r} needs an http(s) URL, not {url!r}.")
        hosts[key] = url.rstrip("/")
    return hosts


class HostDirectory:
    """Looks host names up in the registry (live agents) first, then in the static file."""

    def __init__(
        self,
        redis: aioredis.Redis | None,
        static: dict[str, str] | None = None,
        *,
        key_prefix: str = "vramdoc:",
    ) -> None:
        self._redis = redis
        self._static = dict(static or {})
        self._prefix = f"{key_prefix}agent:"
        self._outage = Outage(log, "the agent registry")

    async def _registered(self) -> dict[str, str]:
        if self._redis is None:
            return {}
        return {
            entry.host: entry.url.rstrip("/")
            for entry in await list_agents(self._redis, self._prefix)
            if HOST_NAME.match(entry.host) and urlsplit(entry.url).scheme in {"http", "https"}
        }

    async def known(self) -> tuple[dict[str, str], bool]:
        """All hosts by name, and whether the registry could not be read."""
        try:
            registered = await self._registered()
        except (RedisError, OSError) as exc:
            self._outage.failed(exc, "using the hosts file only")
            return dict(self._static), True
        self._outage.ok()
        return {**self._static, **registered}, False

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()

    async def resolve(self, names: tuple[str, ...]) -> Resolution:
        table, down = await self.known()
        wanted = [name.lower() for name in names]
        return Resolution(
            found={name: table[name] for name in wanted if name in table},
            unknown=tuple(name for name in wanted if name not in table),
            known=tuple(sorted(table)),
            registry_down=down,
        )
