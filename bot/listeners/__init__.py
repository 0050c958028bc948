"""Slack surfaces, one module each with `register(app)`: events, the slash command, the shortcut, actions.

Listeners find the process's backends in `context["backends"]` (set by the app's middleware), ack
at once, and hand the work to `bot.answers`.
"""

from __future__ import annotations

from typing import Any

from bot.answers import Backends

__all__ = ["backends_of"]


def backends_of(context: Any) -> Backends:
    """The Backends the app's middleware put into bolt's context."""
    backends = context["backends"]
    if not isinstance(backends, Backends):
        raise TypeError("the bolt context carries no vramdoc Backends; build the app with bot.app.create_app")
    return backends
