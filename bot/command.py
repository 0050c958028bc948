"""`vramdoc bot`: Socket Mode when SLACK_APP_TOKEN is set, else the Events API over HTTP (`--http`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import uvicorn
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from bot.app import build_backends, create_app
from bot.gateway import create_gateway
from bot.settings import BotSettings, SettingsError, load_settings
from service.serving import server_options

__all__ = ["run"]

EXIT_USAGE = 2


async def _socket_mode(settings: BotSettings) -> None:
    """Hold the websocket to Slack until SIGINT/SIGTERM, then close it and the backends cleanly."""
    backends = build_backends(settings)
    app = create_app(settings, backends)
    handler = AsyncSocketModeHandler(app, settings.app_token)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await handler.connect_async()  # type: ignore[no-untyped-call]
        logging.getLogger(__name__).info("vramdoc bot connected to Slack in Socket Mode")
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await backends.close()


def _http(settings: BotSettings, host: str, port: int) -> None:
    backends = build_backends(settings)
    app = create_app(settings, backends)
    gateway = create_gateway(
        app,
        signing_secret=settings.signing_secret or "",
        max_body_bytes=settings.max_body_bytes,
        claim=backends.state.claim_event,
        on_shutdown=[backends.close],
    )
    uvicorn.run(gateway, host=host, port=port, log_level="info", **server_options())


def run(args: argparse.Namespace) -> int:
    """Start the bot; a missing or bad setting is one sentence on stderr and exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if not 0 <= args.port <= 65535:
            raise SettingsError(f"--port must be between 0 and 65535, not {args.port}.")
        settings = load_settings(http=bool(args.http))
        if settings.app_token is not None:
            asyncio.run(_socket_mode(settings))
        else:
            _http(settings, args.host, args.port)
    except SettingsError as exc:
        print(f"vramdoc bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
