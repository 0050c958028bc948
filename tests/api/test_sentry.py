"""Errors reach Sentry, but secrets from the request never do (a local HTTP server plays Sentry)."""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

SECRET = "hf_" + "SeNtRyPlAnTeDsEcReT0123456789ab"

# A server built by create_app with a Sentry DSN, plus one route that fails the way a core bug
# would: after logging (a breadcrumb) and with the request's text in the exception message.
SERVER = """
import logging, sys
import uvicorn
from litestar import Request, post
from service.api.app import create_app
from service.api.settings import Settings

@post("/v1/boom")
async def boom(request: Request) -> None:
    body = (await request.body()).decode()
    logging.getLogger("vramdoc.service").warning("about to fail on %s", body)
    raise RuntimeError(f"the core failed on: {body}")

app = create_app(Settings(sentry_dsn=sys.argv[1], rate_limit=None))
app.register(boom)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), ws="none", log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Envelopes(BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        encoding = self.headers.get("content-encoding", "")
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding == "br":
            import brotli  # type: ignore[import-not-found]  # only when sentry-sdk found it too

            raw = brotli.decompress(raw)
        type(self).received.append(raw)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sentry_endpoint() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []
    handler = type("Envelopes", (_Envelopes,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://publickey@127.0.0.1:{server.server_port}/1", received
    finally:
        server.shutdown()
        server.server_close()


def test_error_reaches_sentry_without_the_planted_secret(sentry_endpoint: tuple[str, list[bytes]]) -> None:
    dsn, received = sentry_endpoint
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, dsn, str(port)])
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            response = client.post(
                "/v1/boom",
                params={"token": SECRET},
                json={"log": f"OOM while loading; HF_TOKEN={SECRET}"},
                headers={"authorization": f"Bearer {SECRET}", "x-hf-token": SECRET},
            )
        assert response.status_code == 500
        assert SECRET not in response.text
        deadline = time.monotonic() + 15
        while not any(b"RuntimeError" in envelope for envelope in received) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    events = [envelope for envelope in received if b"RuntimeError" in envelope]
    assert events, f"no error event reached the Sentry endpoint ({len(received)} envelopes)"
    assert b"the core failed on" in events[0]
    assert b"[REDACTED]" in events[0]
    for envelope in received:
        assert SECRET.encode() not in envelope
