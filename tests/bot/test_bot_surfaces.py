"""The other Slack surfaces end to end: slash command, message shortcut, buttons, DMs, Socket Mode."""

from __future__ import annotations

import json

import msgspec
import redis.asyncio as aioredis
from agent_standin import AGENT_TOKEN, AgentStandin
from bot_loopback import SIGNING_SECRET, closed_port_url, mention, register_agent
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_standin import APP_TOKEN, BOT_TOKEN, BOT_USER, SlackStandin

from bot.app import build_backends, create_app
from bot.settings import BotSettings


def _slash(text: str) -> dict[str, str]:
    return {
        "token": "legacy",
        "team_id": "T0001",
        "channel_id": "C0CHANNEL",
        "user_id": "U0PERSON",
        "command": "/vramdoc",
        "text": text,
        "response_url": "https://hooks.slack.com/commands/T0001/1/abc",
        "trigger_id": "1.2.3",
        "api_app_id": "A0001",
    }


async def test_slash_help_is_answered_in_the_ack(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url())

    response = await bot.form(_slash("help"))

    assert response.status_code == 200
    assert "Paste a log" in json.dumps(response.json())
    assert slack.replies() == []


async def test_slash_command_with_a_host_posts_the_table_in_the_channel(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())

    response = await bot.form(_slash("gpu-07"))

    assert response.status_code == 200
    await slack.wait_for(lambda: bool(slack.replies()))
    [reply] = slack.replies()
    assert reply["channel"] == "C0CHANNEL"
    assert "thread_ts" not in reply or reply["thread_ts"] is None
    assert "H100 80GB HBM3" in json.dumps(reply["blocks"])


async def test_message_shortcut_answers_in_the_thread_of_that_message(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    payload = {
        "type": "message_action",
        "callback_id": "diagnose_message",
        "trigger_id": "1.2.3",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0OTHER", "team_id": "T0001"},
        "channel": {"id": "C0CHANNEL", "name": "ops"},
        "message": {
            "type": "message",
            "user": "U0PERSON",
            "text": "gpu-07 looks stuck",
            "ts": "1700000000.000500",
        },
        "response_url": "https://hooks.slack.com/app/T0001/1/abc",
        "action_ts": "1700000001.000000",
        "message_ts": "1700000000.000500",
    }

    response = await bot.interaction(payload)

    assert response.status_code == 200
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert reply["thread_ts"] == "1700000000.000500"
    assert slack.called("reactions.add")[0]["timestamp"] == "1700000000.000500"


async def test_message_shortcut_where_the_bot_cannot_post_says_so_privately(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    slack.failing["chat.postMessage"] = "not_in_channel"
    payload = {
        "type": "message_action",
        "callback_id": "diagnose_message",
        "trigger_id": "1.2.3",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0OTHER", "team_id": "T0001"},
        "channel": {"id": "C0CHANNEL", "name": "ops"},
        "message": {"type": "message", "user": "U0PERSON", "text": "gpu-07", "ts": "1700000000.000500"},
        "response_url": f"{slack.root}respond/2",
        "action_ts": "1700000001.000000",
        "message_ts": "1700000000.000500",
    }

    await bot.interaction(payload)

    await slack.wait_for(lambda: bool(slack.responses))
    [response] = slack.responses
    assert response["response_type"] == "ephemeral"
    assert response["text"].startswith("I could not post in this channel")


async def test_recheck_button_updates_the_answer_in_place(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    await bot.event(mention("gpu-07"))
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    posted_ts = "1700000000.000001"
    payload = {
        "type": "block_actions",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0PERSON", "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": "1.2.3",
        "channel": {"id": "C0CHANNEL", "name": "ops"},
        "container": {"type": "message", "message_ts": posted_ts, "channel_id": "C0CHANNEL"},
        "message": {
            "type": "message",
            "ts": posted_ts,
            "thread_ts": reply["thread_ts"],
            "text": reply["text"],
        },
        "response_url": "https://hooks.slack.com/actions/T0001/1/abc",
        "actions": [
            {
                "action_id": "recheck_host",
                "block_id": "b1",
                "type": "button",
                "value": "gpu-07",
                "action_ts": "1.0",
            }
        ],
    }

    response = await bot.interaction(payload)

    assert response.status_code == 200
    await slack.wait_for(lambda: bool(slack.called("chat.update")))
    [update] = slack.called("chat.update")
    assert update["ts"] == posted_ts
    assert "H100 80GB HBM3" in json.dumps(update["blocks"])
    assert len(agent.requests) == 2


async def test_direct_message_is_answered_and_bot_echoes_are_not(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    dm = {
        "type": "message",
        "channel_type": "im",
        "channel": "D0DM",
        "user": "U0PERSON",
        "text": "gpu-07",
        "ts": "1700000000.000900",
    }
    echo = {**dm, "bot_id": "B0001", "user": BOT_USER, "ts": "1700000000.000901"}
    edit = {**dm, "subtype": "message_changed", "ts": "1700000000.000902"}

    await bot.event(echo, event_id="EvECHO")
    await bot.event(edit, event_id="EvEDIT")
    await bot.event(dm, event_id="EvDM")

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert reply["channel"] == "D0DM" and reply["thread_ts"] == "1700000000.000900"


async def test_uploaded_log_file_is_downloaded_with_the_bot_token(start_bot, slack: SlackStandin) -> None:
    down = closed_port_url()
    bot = await start_bot(down)
    entry = slack.add_file("F0LOG", "vllm.log", b"INFO 11-29 10:00:00 starting\nCUDA out of memory\n")

    await bot.event(mention("see file", files=[entry]))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    assert slack.downloads == ["F0LOG"]
    assert slack.replies()[0]["text"].startswith(f"The vramdoc service at {down}")


async def test_socket_mode_acks_envelopes_and_a_retry_gets_no_second_reply(
    slack: SlackStandin, agent: AgentStandin, redis_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    settings = BotSettings(
        bot_token=BOT_TOKEN,
        app_token=APP_TOKEN,
        signing_secret=SIGNING_SECRET,
        service_url=closed_port_url(),
        redis_url=redis_url,
        agent_token=AGENT_TOKEN,
        slack_api_url=slack.base_url,
    )
    backends = build_backends(settings, key_prefix=key_prefix)
    handler = AsyncSocketModeHandler(create_app(settings, backends), APP_TOKEN)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await slack.wait_for_socket()
        payload = {
            "type": "event_callback",
            "team_id": "T0001",
            "api_app_id": "A0001",
            "event_id": "EvSOCK",
            "event_time": 1700000000,
            "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": True}],
            "event": mention("gpu-07"),
        }
        envelope = {
            "envelope_id": "env-1",
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": payload,
        }
        await slack.send_envelope(envelope)
        await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
        await slack.send_envelope(
            {**envelope, "envelope_id": "env-2", "retry_attempt": 1, "retry_reason": "timeout"}
        )
        await slack.wait_for(lambda: len(slack.socket_acks) == 2)
        command = {
            "envelope_id": "env-3",
            "type": "slash_commands",
            "accepts_response_payload": True,
            "payload": _slash("help"),
        }
        await slack.send_envelope(command)
        await slack.wait_for(lambda: len(slack.socket_acks) == 3)
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await backends.close()
    assert [ack["envelope_id"] for ack in slack.socket_acks] == ["env-1", "env-2", "env-3"]
    assert "Paste a log" in json.dumps(slack.socket_acks[2]["payload"])
    assert len(slack.replies()) == 1
    assert slack.called("apps.connections.open")


async def test_report_file_is_uploaded_into_the_thread(slack: SlackStandin) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.answers import Place, post
    from bot.blocks import Upload, render_error

    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url)
    message = msgspec.structs.replace(
        render_error("long"),
        upload=Upload("vramdoc-report.txt", "report", "token hf_AbCdEfGhIjKlMnOpQrStUvWx full"),
    )

    ts = await post(client, Place(channel="C0CHANNEL", thread_ts="1700000000.000100"), message)

    assert ts
    [complete] = slack.called("files.completeUploadExternal")
    assert complete["channel_id"] == "C0CHANNEL" and complete["thread_ts"] == "1700000000.000100"
    [uploaded] = slack.uploads.values()
    assert b"hf_AbCd" not in uploaded and b"[REDACTED]" in uploaded


async def test_failed_report_upload_is_told_in_the_thread(slack: SlackStandin) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.answers import Place, post
    from bot.blocks import Upload, render_error

    slack.failing["files.getUploadURLExternal"] = "not_allowed_token_type"
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url)
    message = msgspec.structs.replace(render_error("long"), upload=Upload("r.txt", "report", "full"))

    await post(client, Place(channel="C0CHANNEL", thread_ts="1700000000.000100"), message)

    first, note = slack.replies()
    assert (
        note["text"]
        == "I could not attach the full report (not_allowed_token_type); the answer above is shortened."
    )
    assert note["thread_ts"] == "1700000000.000100"


async def test_slash_command_where_the_bot_cannot_post_says_so_privately(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    slack.failing["chat.postMessage"] = "not_in_channel"

    await bot.form({**_slash("gpu-07"), "response_url": f"{slack.root}respond/1"})

    await slack.wait_for(lambda: bool(slack.responses))
    [response] = slack.responses
    assert response["response_type"] == "ephemeral"
    assert response["text"].startswith("I could not post in this channel")
