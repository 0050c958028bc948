"""The `/vramdoc` slash command: same grammar as a mention; `help` answers privately at once."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Place, answer, help_message
from bot.listeners import backends_of
from bot.memory import render_recent
from bot.parse import parse_ask

__all__ = ["COMMAND", "register"]

COMMAND = "/vramdoc"
# `/vramdoc recent`, `/vramdoc recent 30`: team memory's most frequent failures (7 days unless given).
_RECENT = re.compile(r"^\s*recent(?:\s+(7|30))?\s*$", re.IGNORECASE)


async def on_command(
    ack: AsyncAck,
    command: dict[str, Any],
    client: AsyncWebClient,
    context: AsyncBoltContext,
    respond: AsyncRespond,
) -> None:
    backends = backends_of(context)
    text = str(command.get("text") or "")
    if not text.strip() or parse_ask(text).help:
        message = await help_message(backends, str(command.get("channel_id") or ""))
        await ack(text=message.text, blocks=message.blocks)
        return
    recent = _RECENT.match(text)
    if recent is not None:
        days = int(recent.group(1) or 7)
        rows = await backends.memory.recent(days) if backends.memory is not None else []
        if rows is None:
            await ack(
                text="Team memory's Redis does not answer right now; try `/vramdoc recent` again shortly."
            )
            return
        note = "" if backends.memory is not None else " (team memory needs Redis: VRAMDOC_REDIS_URL)"
        await ack(text=render_recent(rows, days) + note)
        return
    await ack(text="Working on it… the answer will appear in this channel.")
    delivered = await answer(backends, client, Place(channel=str(command["channel_id"])), text)
    if not delivered:
        await respond(
            text="I could not post in this channel; invite me (`/invite @vramdoc`) or message me directly.",
            response_type="ephemeral",
        )


def register(app: AsyncApp) -> None:
    app.command(COMMAND)(on_command)
