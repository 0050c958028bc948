"""Team memory's Slack surfaces: "This fixed it" on a fix, and a ✅ reaction on one of the bot's answers.

Either records which fix resolved the answer's fingerprint; the bot thanks once per thread. Without
team memory (no Redis) the button is never shown and reactions are ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Backends
from bot.blocks import ACTION_FIXED_IT
from bot.listeners import backends_of

__all__ = ["FIXED_REACTIONS", "register"]

log = logging.getLogger(__name__)

# The reactions that mean "this worked" (Slack names; the first is ✅).
FIXED_REACTIONS = frozenset({"white_check_mark", "heavy_check_mark"})


async def _recorded(
    backends: Backends,
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    user: str,
    key: str,
    fix_id: str,
) -> None:
    """Record the fix, then thank in the thread the first time this thread records one."""
    memory = backends.memory
    if memory is None:
        return
    if not await memory.mark_fixed(key, fix_id):
        text = "I could not record that fix right now (team memory is unreachable); please try again later."
    elif await memory.claim_thanks(channel, thread_ts):
        text = (
            f"Thanks <@{user}>: I recorded `{fix_id}` as the fix that resolved this failure. "
            "When it appears again, that fix is ranked first."
        )
    else:
        return
    try:
        await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text)
    except SlackApiError as exc:
        log.error("thanking in %s failed: %s", channel, exc.response.get("error"))


async def on_fixed_it(
    ack: AsyncAck,
    body: dict[str, Any],
    action: dict[str, Any],
    client: AsyncWebClient,
    context: AsyncBoltContext,
) -> None:
    await ack()
    key, _, fix_id = str(action.get("value") or "").partition("|")
    message = body.get("message") or {}
    container = body.get("container") or {}
    channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
    ts = str(message.get("ts") or container.get("message_ts") or "")
    thread_ts = str(message.get("thread_ts") or container.get("thread_ts") or ts)
    user = str((body.get("user") or {}).get("id") or "")
    if not (key and fix_id and channel and thread_ts):
        log.warning("a 'This fixed it' click without fingerprint, fix or place was ignored")
        return
    await _recorded(
        backends_of(context), client, channel=channel, thread_ts=thread_ts, user=user, key=key, fix_id=fix_id
    )


async def on_reaction(event: dict[str, Any], client: AsyncWebClient, context: AsyncBoltContext) -> None:
    """A ✅ on one of the bot's diagnosis replies credits that reply's top fix."""
    backends = backends_of(context)
    item = event.get("item") or {}
    user = str(event.get("user") or "")
    if (
        backends.memory is None
        or event.get("reaction") not in FIXED_REACTIONS
        or item.get("type") != "message"
        or user == context.bot_user_id
    ):
        return
    channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
    replied = await backends.memory.reply(channel, ts)
    if replied is None or replied.top_fix is None:
        return
    await _recorded(
        backends,
        client,
        channel=channel,
        thread_ts=replied.thread_ts,
        user=user,
        key=replied.key,
        fix_id=replied.top_fix,
    )


def register(app: AsyncApp) -> None:
    app.action(ACTION_FIXED_IT)(on_fixed_it)
    app.event("reaction_added")(on_reaction)
