"""A Slack message as the bot posts it, and Slack's documented limits on one.

Rendering (bot/blocks.py) builds messages within these limits; `limit_violations` checks a
finished message against them, and `recut` applies them again after redaction.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["LIMITS", "Block", "Message", "Upload", "cut", "limit_violations", "recut"]

Block = dict[str, Any]

LIMITS = {
    "blocks": 50,
    "section_text": 3000,
    "header_text": 150,
    "fields": 10,
    "field_text": 2000,
    "context_elements": 10,
    "button_text": 75,
    "button_value": 2000,
    "message_text": 4000,
}


class Upload(msgspec.Struct, frozen=True):
    filename: str
    title: str
    content: str


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One Slack message: fallback text, blocks, an optional report file, and whether it tells a failure."""

    text: str
    blocks: list[Block]
    upload: Upload | None = None
    failed: bool = False


def cut(text: str, limit: int, marker: str = "…") -> str:
    """The text within `limit` characters, its end replaced by `marker` when it was longer."""
    return text if len(text) <= limit else text[: limit - len(marker)] + marker


def recut(block: Block) -> Block:
    """Limits again after redaction, which can lengthen a text (`password=abc` → `password=[REDACTED]`)."""
    kind = block.get("type")
    if kind in {"header", "section"} and "text" in block:
        limit = LIMITS["header_text"] if kind == "header" else LIMITS["section_text"]
        block["text"]["text"] = cut(block["text"]["text"], limit)
    for field in block.get("fields", []):
        field["text"] = cut(field["text"], LIMITS["field_text"])
    for element in block.get("elements", []):
        if isinstance(element.get("text"), str):
            element["text"] = cut(element["text"], 2000)
        elif isinstance(element.get("text"), dict):
            element["text"]["text"] = cut(element["text"]["text"], LIMITS["button_text"])
    return block


def limit_violations(message: Message) -> list[str]:
    """Every way `message` breaks Slack's documented limits (empty when it is safe to post)."""
    problems: list[str] = []
    if len(message.blocks) > LIMITS["blocks"]:
        problems.append(f"{len(message.blocks)} blocks > {LIMITS['blocks']}")
    if len(message.text) > LIMITS["message_text"]:
        problems.append("fallback text too long")
    for i, block in enumerate(message.blocks):
        kind = block.get("type")
        text = block.get("text", {}).get("text", "")
        if kind == "header" and len(text) > LIMITS["header_text"]:
            problems.append(f"block {i}: header of {len(text)} chars")
        if kind == "section":
            if len(text) > LIMITS["section_text"]:
                problems.append(f"block {i}: section text of {len(text)} chars")
            fields = block.get("fields", [])
            if len(fields) > LIMITS["fields"]:
                problems.append(f"block {i}: {len(fields)} fields")
            problems += [
                f"block {i}: field of {len(f['text'])} chars"
                for f in fields
                if len(f["text"]) > LIMITS["field_text"]
            ]
            if not text and not fields:
                problems.append(f"block {i}: empty section")
        if kind == "context" and not 0 < len(block.get("elements", [])) <= LIMITS["context_elements"]:
            problems.append(f"block {i}: context with {len(block.get('elements', []))} elements")
        for element in block.get("elements", []) if kind == "actions" else []:
            if len(element["text"]["text"]) > LIMITS["button_text"]:
                problems.append(f"block {i}: button text too long")
            if len(element.get("value", "")) > LIMITS["button_value"]:
                problems.append(f"block {i}: button value too long")
    return problems
