"""Mentions in channels and direct messages: the bot's main door.

Slack retries an event it thinks went unanswered (HTTP `X-Slack-Retry-Num`, Socket Mode
`retry_attempt`); the event id is claimed once (`SET NX`), so a retry never makes a second reply.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Backends, Place, answer
from bot.listeners import backends_of

__all__ = ["register"]

_ANSWERED_SUBTYPES = frozenset({"file_share"})


async def _first_delivery(backends: Backends, body: dict[str, Any]) -> bool:
    event_id = body.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        return True
    return await backends.state.claim_event(event_id)


def _place(event: dict[str, Any]) -> Place:
    ts = str(event["ts"])
    return Place(channel=str(event["channel"]), thread_ts=str(event.get("thread_ts") or ts), react_ts=ts)


async def on_mention(
    body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
) -> None:
    backends = backends_of(context)
    if not await _first_delivery(backends, body):
        return
    await answer(backends, client, _place(event), str(event.get("text") or ""), event.get("files") or [])


async def on_message(
    body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext
) -> None:
    """Direct messages only; edits, bot posts and channel chatter are not questions to the bot."""
    subtype = event.get("subtype")
    if (
        event.get("channel_type") != "im"
        or event.get("bot_id")
        or (subtype and subtype not in _ANSWERED_SUBTYPES)
    ):
        return
    backends = backends_of(context)
    if not await _first_delivery(backends, body):
        return
    await answer(backends, client, _place(event), str(event.get("text") or ""), event.get("files") or [])


def register(app: AsyncApp) -> None:
    app.event("app_mention")(on_mention)
    app.event("message")(on_message)
