"""Buttons on the bot's answers: "Show all fixes" and "Re-check host" rebuild the message in place."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Place, refresh
from bot.blocks import ACTION_RECHECK, ACTION_SHOW_ALL
from bot.listeners import backends_of
from bot.parse import HOST_NAME

__all__ = ["register"]


def _where(body: dict[str, Any]) -> tuple[Place, str]:
    message = body.get("message") or {}
    container = body.get("container") or {}
    ts = str(message.get("ts") or container.get("message_ts") or "")
    channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
    thread = message.get("thread_ts") or container.get("thread_ts")
    return Place(channel=channel, thread_ts=str(thread) if thread else None), ts


async def on_show_all(
    ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
) -> None:
    await ack()
    place, ts = _where(body)
    await refresh(backends_of(context), client, place, ts, all_fixes=True)


async def on_recheck(
    ack: AsyncAck,
    body: dict[str, Any],
    action: dict[str, Any],
    client: AsyncWebClient,
    context: AsyncBoltContext,
) -> None:
    await ack()
    place, ts = _where(body)
    names = tuple(n for n in str(action.get("value") or "").lower().split(",") if HOST_NAME.match(n))
    await refresh(backends_of(context), client, place, ts, hosts=names)


def register(app: AsyncApp) -> None:
    app.action(ACTION_SHOW_ALL)(on_show_all)
    app.action(ACTION_RECHECK)(on_recheck)
