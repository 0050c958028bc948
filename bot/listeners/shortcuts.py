"""The message shortcut "Diagnose with vramdoc": diagnose someone else's message in its thread."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Place, answer
from bot.listeners import backends_of

__all__ = ["CALLBACK_ID", "register"]

CALLBACK_ID = "diagnose_message"


async def on_diagnose_message(
    ack: AsyncAck,
    shortcut: dict[str, Any],
    client: AsyncWebClient,
    context: AsyncBoltContext,
    respond: AsyncRespond,
) -> None:
    await ack()
    message = shortcut.get("message") or {}
    ts = str(message.get("ts") or "")
    channel = str((shortcut.get("channel") or {}).get("id") or "")
    place = Place(channel=channel, thread_ts=str(message.get("thread_ts") or ts), react_ts=ts)
    delivered = await answer(
        backends_of(context), client, place, str(message.get("text") or ""), message.get("files") or []
    )
    if not delivered:
        # A shortcut works in any channel, also where the bot is no member: say so, never stay silent.
        await respond(
            text="I could not post in this channel; invite me (`/invite @vramdoc`) or message me directly.",
            response_type="ephemeral",
        )


def register(app: AsyncApp) -> None:
    app.shortcut(CALLBACK_ID)(on_diagnose_message)
