"""Team memory in Slack: the "Seen N times" line, the fix that worked ranked first, `/vramdoc recent`.

The store itself (Redis, shared with the service's `GET /v1/fingerprints`) is service.team_memory;
this module renders what it holds. Without Redis there is no memory and the bot answers as before.
"""

from __future__ import annotations

import math
import time

import msgspec

from bot.blocks import Message
from service.schemas import Fix
from service.team_memory import DAY_S, Recent, RepliedTo, Sighting, TeamMemory, ThreadRef

__all__ = [
    "Recent",
    "RepliedTo",
    "Sighting",
    "TeamMemory",
    "ThreadRef",
    "memory_note",
    "promote_fix",
    "render_recent",
    "with_note",
]

_MAX_BLOCKS = 50  # Slack's limit on blocks in one message


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def memory_note(
    sighting: Sighting, *, this_one: bool = True, now: float | None = None, fix_title: str | None = None
) -> str:
    """ "Seen 3 times in 7 days (gpu-07, gpu-08) – first in #infra-llm: <permalink>".

    `this_one`: the answer carrying the line is a sighting not recorded yet, so it is counted too.
    """
    now = time.time() if now is None else now
    days = max(1, math.ceil((now - sighting.first_seen) / DAY_S))
    count = sighting.count + int(this_one)
    text = f":repeat: Seen {_plural(count, 'time')} in {_plural(days, 'day')}"
    if sighting.hosts:
        text += f" ({', '.join(sighting.hosts)})"
    if sighting.first is not None:
        text += f" – first in <#{sighting.first.channel}>"
        if sighting.first.permalink:
            text += f": <{sighting.first.permalink}>"
    if fix_title:
        text += f"\n:white_check_mark: *{fix_title}* fixed it before, so it is ranked first."
    return text


def with_note(message: Message, note: str) -> Message:
    """The message with the memory line as its first block (and first line of its fallback text)."""
    note_block = {"type": "section", "text": {"type": "mrkdwn", "text": note}}
    blocks = [note_block, *message.blocks]
    if len(blocks) > _MAX_BLOCKS:
        # Drop the block before the last (the engine line stays last), keeping Slack's limit.
        del blocks[-2]
    return msgspec.structs.replace(message, text=f"{note}\n{message.text}", blocks=blocks)


def promote_fix(fixes: list[Fix], fix_id: str) -> list[Fix]:
    """The fixes with `fix_id` (the one that worked before) ranked first; the same list if it is absent."""
    chosen = [fix for fix in fixes if fix.id == fix_id]
    if not chosen:
        return fixes
    ordered = chosen + [fix for fix in fixes if fix.id != fix_id]
    return [msgspec.structs.replace(fix, rank=rank) for rank, fix in enumerate(ordered, start=1)]


def render_recent(rows: list[Recent], days: int) -> str:
    """The `/vramdoc recent` answer: one line per failure with count, hosts and the fix that worked."""
    if not rows:
        return f"No failures were recorded in the last {_plural(days, 'day')}."
    lines = [f"*Most frequent failures, last {_plural(days, 'day')}*"]
    for row in rows:
        print_, seen = row.fingerprint, row.sighting
        what = " · ".join(
            p
            for p in (print_.model, print_.gpu, f"vLLM {print_.vllm_minor}" if print_.vllm_minor else None)
            if p
        )
        line = f"• *{print_.phase}* ({what or 'unknown model'}): {_plural(seen.count, 'time')}"
        if seen.hosts:
            line += f" on {', '.join(seen.hosts)}"
        if seen.first is not None:
            line += f", first in <#{seen.first.channel}>"
        if seen.fixed_by:
            line += f"; fixed by `{seen.fixed_by}`"
        lines.append(line)
    return "\n".join(lines)
