"""Settings, the app manifest and the `vramdoc bot` command line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_standin import APP_TOKEN, BOT_TOKEN, SlackStandin

from bot.listeners.commands import COMMAND
from bot.listeners.shortcuts import CALLBACK_ID
from bot.settings import SettingsError, load_settings
from service.cli import main

MANIFEST = Path(__file__).resolve().parents[2] / "bot" / "manifest.yaml"


def test_manifest_declares_exactly_what_the_bot_uses() -> None:
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == {
        "app_mentions:read",  # app_mention events
        "chat:write",  # chat.postMessage, chat.update
        "commands",  # /vramdoc and the message shortcut
        "files:read",  # files.info and downloading uploaded logs
        "files:write",  # files.getUploadURLExternal / completeUploadExternal for long reports
        "im:history",  # message.im events
        "reactions:read",  # reaction_added: a ✅ on an answer records the fix that worked
        "reactions:write",  # reactions.add / reactions.remove
    }
    assert manifest["settings"]["event_subscriptions"]["bot_events"] == [
        "app_mention",
        "message.im",
        "reaction_added",
    ]
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == COMMAND
    [shortcut] = manifest["features"]["shortcuts"]
    assert (shortcut["type"], shortcut["callback_id"], shortcut["name"]) == (
        "message",
        CALLBACK_ID,
        "Diagnose with vramdoc",
    )
    assert manifest["settings"]["interactivity"]["is_enabled"] is True


def test_settings_read_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "agent-token"
    token_file.write_text("from-file-" + "t" * 32 + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    settings = load_settings(
        {
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "s",
            "SLACK_APP_TOKEN": "xapp-1",
            "VRAMDOC_SERVICE_URL": "http://svc:8080/",
            "VRAMDOC_AGENT_TOKEN_FILE": str(token_file),
            "VRAMDOC_BOT_MAX_FILE_BYTES": "1048576",
            "VRAMDOC_BOT_AGENT_TIMEOUT_S": "1.5",
        }
    )
    assert settings.service_url == "http://svc:8080"
    assert settings.agent_token == "from-file-" + "t" * 32
    assert settings.app_token == "xapp-1"
    assert settings.max_file_bytes == 1048576
    assert settings.agent_timeout_s == 1.5
    assert (
        load_settings(
            {"SLACK_BOT_TOKEN": "x", "SLACK_SIGNING_SECRET": "s", "SLACK_APP_TOKEN": "a"}, http=True
        ).app_token
        is None
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SLACK_BOT_TOKEN is not set"),
        ({"SLACK_BOT_TOKEN": "x"}, "SLACK_SIGNING_SECRET is not set"),
        (
            {"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", "VRAMDOC_BOT_MAX_FILE_BYTES": "-1"},
            "positive number",
        ),
        (
            {"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", "VRAMDOC_BOT_AGENT_TIMEOUT_S": "soon"},
            "positive number",
        ),
        (
            {"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", "VRAMDOC_AGENT_TOKEN_FILE": "/nonexistent/t"},
            "cannot be read",
        ),
    ],
)
def test_bad_settings_fail_with_one_sentence(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(env)


def test_bot_command_without_tokens_exits_2_with_a_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        monkeypatch.delenv(name, raising=False)
    assert main(["bot", "--http", "--port", "0"]) == 2
    assert "SLACK_BOT_TOKEN is not set" in capsys.readouterr().err


def test_bot_command_with_a_bad_hosts_file_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("gpu-07: ftp://x\n", encoding="utf-8")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s")
    monkeypatch.setenv("VRAMDOC_HOSTS_FILE", str(hosts))
    assert main(["bot", "--http", "--port", "0"]) == 2
    assert "needs an http(s) URL" in capsys.readouterr().err


async def test_vramdoc_bot_connects_in_socket_mode_and_stops_cleanly_on_sigterm(slack: SlackStandin) -> None:
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": APP_TOKEN,
        "VRAMDOC_SLACK_API_URL": slack.base_url,
    }
    env.pop("SLACK_SIGNING_SECRET", None)
    env.pop("VRAMDOC_REDIS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.cli", "bot", env=env, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await slack.wait_for_socket()
    finally:
        proc.terminate()
        code = await proc.wait()
    assert code == 0
    assert slack.called("apps.connections.open")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("VRAMDOC_SERVICE_URL", "nope", "VRAMDOC_SERVICE_URL must start with http:// or https://"),
        ("VRAMDOC_SERVICE_URL", "http://", "VRAMDOC_SERVICE_URL must start with http://"),
        ("VRAMDOC_REDIS_URL", "localhost:6379", "VRAMDOC_REDIS_URL must start with redis://"),
        ("VRAMDOC_SLACK_API_URL", "ftp://x/api/", "VRAMDOC_SLACK_API_URL must start with http://"),
    ],
)
def test_malformed_urls_are_one_sentence_at_startup_not_a_traceback_or_a_failure_per_message(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", name: value})


def test_bot_port_out_of_range_exits_2_with_a_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "x")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s")
    assert main(["bot", "--http", "--port", "99999"]) == 2
    assert capsys.readouterr().err == "vramdoc bot: --port must be between 0 and 65535, not 99999.\n"


def test_the_bot_applies_the_agents_token_rules(tmp_path: Path) -> None:
    """The bot sends the token the agent demands, so a file the agent would refuse fails here too."""
    token_file = tmp_path / "agent-token"
    token_file.write_text("t" * 40 + "\n", encoding="utf-8")
    token_file.chmod(0o644)
    env = {"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", "VRAMDOC_AGENT_TOKEN_FILE": str(token_file)}
    with pytest.raises(SettingsError, match="readable by other users"):
        load_settings(env)
    with pytest.raises(SettingsError, match="has 5 characters"):
        load_settings({"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a", "VRAMDOC_AGENT_TOKEN": "short"})


def test_the_bot_shares_the_installations_redis_prefix() -> None:
    base = {"SLACK_BOT_TOKEN": "x", "SLACK_APP_TOKEN": "a"}
    assert load_settings(base).redis_prefix == "vramdoc"
    assert load_settings({**base, "VRAMDOC_REDIS_PREFIX": "team-b"}).redis_prefix == "team-b"
