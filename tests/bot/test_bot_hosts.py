"""Host lookup: the registry and the hosts file are the only sources of agent URLs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from bot_loopback import register_agent

from bot.hosts import HostDirectory, load_hosts_file
from service.errors import SettingsError


async def test_registry_and_file_hosts_resolve_and_unknown_names_are_listed(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", "http://10.0.0.7:9400")
    await redis_client.set(f"{key_prefix}agent:broken", b"{not json")
    directory = HostDirectory(redis_client, {"gpu-08": "http://10.0.0.8:9400"}, key_prefix=key_prefix)

    found = await directory.resolve(("GPU-07", "gpu-08", "gpu-99"))

    assert found.found == {"gpu-07": "http://10.0.0.7:9400", "gpu-08": "http://10.0.0.8:9400"}
    assert found.unknown == ("gpu-99",)
    assert found.known == ("gpu-07", "gpu-08")
    assert not found.registry_down


async def test_registry_wins_over_the_file_for_the_same_name(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", "http://10.0.0.70:9400")
    directory = HostDirectory(redis_client, {"gpu-07": "http://10.0.0.7:9400"}, key_prefix=key_prefix)
    assert (await directory.resolve(("gpu-07",))).found == {"gpu-07": "http://10.0.0.70:9400"}


async def test_registry_down_uses_the_file_and_says_so() -> None:
    directory = HostDirectory(aioredis.from_url("redis://127.0.0.1:1/0"), {"gpu-08": "http://10.0.0.8:9400"})
    found = await directory.resolve(("gpu-08", "gpu-07"))
    assert found.found == {"gpu-08": "http://10.0.0.8:9400"}
    assert found.unknown == ("gpu-07",)
    assert found.registry_down
    await directory.close()


def test_hosts_file_is_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "hosts.yaml"
    good.write_text("GPU-07: http://10.0.0.7:9400/\ngpu-08: https://gpu-08.lab:9400\n", encoding="utf-8")
    assert load_hosts_file(good) == {"gpu-07": "http://10.0.0.7:9400", "gpu-08": "https://gpu-08.lab:9400"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("gpu-07: file:///etc/passwd\n", "needs an http(s) URL"),
        ("'bad host!': http://x:1\n", "must match"),
        ("gpu-07: [1, 2]\n", "Expected `str`"),
        ("gpu-07: http://x:1\n  bad: indent\n", "is not valid YAML"),
    ],
)
def test_bad_hosts_file_fails_with_the_entry_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_hosts_file(path)
