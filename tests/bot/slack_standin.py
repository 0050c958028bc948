"""A local stand-in of Slack's Web API and Socket Mode websocket, answering like Slack does.

It records every call (method, arguments) so tests can assert what the bot did, serves uploaded
and pre-registered files, can answer 429 with Retry-After for a chosen method, and pushes Socket
Mode envelopes to a connected client, recording the client's acknowledgements.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-1-standin-bot-token"
APP_TOKEN = "xapp-1-A1-standin-app-token"
BOT_USER = "UBOT0001"


@dataclass
class Call:
    method: str
    args: dict[str, Any]


@dataclass
class SlackStandin:
    """Slack's Web API on 127.0.0.1; `base_url` is what VRAMDOC_SLACK_API_URL would be."""

    base_url: str = ""
    calls: list[Call] = field(default_factory=list)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    uploads: dict[str, bytes] = field(default_factory=dict)
    rate_limited: dict[str, int] = field(default_factory=dict)
    failing: dict[str, str] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    socket_acks: list[dict[str, Any]] = field(default_factory=list)
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    # --- what tests look at --------------------------------------------------------------------

    def called(self, method: str) -> list[dict[str, Any]]:
        return [c.args for c in self.calls if c.method == method]

    def replies(self) -> list[dict[str, Any]]:
        return self.called("chat.postMessage")

    async def wait_for(self, predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
        """Wait until `predicate()` holds (the bot works after acking); fail with what was recorded."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met; Slack saw: {[c.method for c in self.calls]}")
            await asyncio.sleep(0.01)

    def add_file(self, file_id: str, name: str, content: bytes) -> dict[str, Any]:
        """Register a file as if a person uploaded it; returns the event's `files[]` entry."""
        self.files[file_id] = (name, content)
        return {"id": file_id, "name": name, "size": len(content), "mode": "hosted"}

    # --- server ----------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/link", self._socket)
        app.router.add_post("/respond/{id}", self._respond)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/api/"

    async def stop(self) -> None:
        for ws in self._sockets:
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("api/")

    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        return args

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        if self.rate_limited.get(method, 0) > 0:
            self.rate_limited[method] -= 1
            self.calls.append(Call(f"{method}:429", args))
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        auth = request.headers.get("Authorization", "")
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if auth != f"Bearer {expected}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        self.calls.append(Call(method, args))
        if method in self.failing:
            return web.json_response({"ok": False, "error": self.failing[method]})
        return web.json_response(self._answer(method, args))

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://standin.slack.com/",
                "team": "Standin",
                "user": "vramdoc",
                "team_id": "T0001",
                "user_id": BOT_USER,
                "bot_id": "B0001",
                "is_enterprise_install": False,
            }
        if method in {"chat.postMessage", "chat.update"}:
            ts = args.get("ts") or f"1700000000.{next(self._ts):06d}"
            return {
                "ok": True,
                "channel": args.get("channel"),
                "ts": ts,
                "message": {"text": args.get("text"), "ts": ts, "blocks": args.get("blocks")},
            }
        if method == "chat.getPermalink":
            channel, ts = str(args.get("channel")), str(args.get("message_ts"))
            link = f"https://standin.slack.com/archives/{channel}/p{ts.replace('.', '')}"
            return {"ok": True, "channel": channel, "permalink": link}
        if method in {"reactions.add", "reactions.remove", "files.completeUploadExternal"}:
            files = json.loads(args["files"]) if method == "files.completeUploadExternal" else []
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title")} for f in files]}
        if method == "files.getUploadURLExternal":
            file_id = f"FUP{next(self._ts):05d}"
            return {"ok": True, "file_id": file_id, "upload_url": f"{self.root}upload/{file_id}"}
        if method == "files.info":
            file_id = str(args.get("file"))
            if file_id not in self.files:
                return {"ok": False, "error": "file_not_found"}
            name, content = self.files[file_id]
            return {
                "ok": True,
                "file": {
                    "id": file_id,
                    "name": name,
                    "size": len(content),
                    "url_private_download": f"{self.root}files/{file_id}/{name}",
                },
            }
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://{self.root.removeprefix('http://').rstrip('/')}/link"}
        return {"ok": False, "error": "unknown_method"}

    async def _respond(self, request: web.Request) -> web.Response:
        """A slash command's response_url: Slack answers plain "ok"."""
        self.responses.append(await request.json())
        return web.Response(text="ok")

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        return web.Response(text="OK")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        self.downloads.append(file_id)
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}" or file_id not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[file_id][1])

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A1"}})
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                self.socket_acks.append(json.loads(msg.data))
        return ws

    async def wait_for_socket(self) -> None:
        await self.wait_for(lambda: bool(self._sockets))

    async def send_envelope(self, envelope: dict[str, Any]) -> None:
        """Push one Socket Mode envelope to every connected client."""
        for ws in self._sockets:
            await ws.send_json(envelope)
