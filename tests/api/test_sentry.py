"""Errors reach Sentry, but secrets from the request never do (a local HTTP server plays Sentry)."""

from __future__ import annotations

import contextlib
import gzip
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.diagnosis.test_redact import _PLANTED, WRAP_WIDTHS, _pasted_log, hard_wrap, leaked

SECRET = "hf_" + "SeNtRyPlAnTeDsEcReT0123456789ab"
CORPUS_LOG = Path(__file__).parent.parent / "corpus" / "v0.32-kv-capacity-qwen.log"

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

app = create_app(Settings(sentry_dsn=sys.argv[1] or None, rate_limit=None))
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


@contextmanager
def _services(*dsns: str) -> Iterator[list[httpx.Client]]:
    """The SERVER script once per DSN, each in its own process (Sentry is per process), started
    together because loading the packs is slow on a busy machine; one client for each."""
    ports = [_free_port() for _ in dsns]
    procs = [
        subprocess.Popen([sys.executable, "-c", SERVER, dsn, str(port)])
        for dsn, port in zip(dsns, ports, strict=True)
    ]
    try:
        with contextlib.ExitStack() as stack:
            clients = [
                stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30))
                for port in ports
            ]
            deadline = time.monotonic() + 120
            for client, proc in zip(clients, procs, strict=True):
                while True:
                    try:
                        client.get("/healthz")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline or proc.poll() is not None:
                            raise
                        time.sleep(0.1)
            yield clients
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)


def _probes(client: httpx.Client) -> list[tuple[str, int, str]]:
    """Requests that once behaved differently with a DSN set: uploads, bad JSON, 4xx, a good log."""
    log = CORPUS_LOG.read_bytes()
    plain = {"content-type": "text/plain"}
    answers = [
        ("multipart log field", client.post("/v1/diagnose", files={"log": ("vllm.log", log)})),
        ("multipart first file", client.post("/v1/classify", files={"upload": ("a.log", log)})),
        ("multipart text field", client.post("/v1/classify", data={"log": log.decode()})),
        ("multipart without a log", client.post("/v1/classify", files={"model": (None, "x")})),
        ("raw log", client.post("/v1/diagnose", content=log, headers=plain)),
        (
            "raw log sent as JSON",
            client.post("/v1/diagnose", content=log, headers={"content-type": "application/json"}),
        ),
        (
            "truncated JSON",
            client.post(
                "/v1/diagnose", content=b'{"log": "abc', headers={"content-type": "application/json"}
            ),
        ),
        (
            "nested JSON",
            client.post("/v1/diagnose", content=b"[" * 200_000, headers={"content-type": "application/json"}),
        ),
        (
            "nested object",
            client.post(
                "/v1/estimate", content=b'{"config":' * 50_000, headers={"content-type": "application/json"}
            ),
        ),
        (
            "unknown model hint",
            client.post("/v1/diagnose", params={"model": SECRET}, content=log, headers=plain),
        ),
        ("unknown model estimate", client.post("/v1/estimate", json={"model": SECRET, "gpu": "H100"})),
        ("no such endpoint", client.get("/v1/nothing", params={"token": SECRET})),
        ("wrong method", client.get("/v1/diagnose")),
    ]
    return [(name, r.status_code, r.text) for name, r in answers]


def test_sentry_never_changes_an_answer(sentry_endpoint: tuple[str, list[bytes]]) -> None:
    dsn, received = sentry_endpoint
    with _services("", dsn, f"http://publickey@127.0.0.1:{_free_port()}/1") as clients:
        without, with_sink, with_closed_port = (_probes(client) for client in clients)
    assert with_sink == without
    assert with_closed_port == without
    statuses = {name: status for name, status, _ in without}
    assert statuses["multipart log field"] == statuses["multipart first file"] == 200
    assert statuses["multipart text field"] == 200
    assert statuses["multipart without a log"] == 400
    assert statuses["nested JSON"] == statuses["nested object"] == statuses["truncated JSON"] == 400
    assert statuses["unknown model estimate"] == 422
    for name, _, text in without:
        assert SECRET not in text, name
    # None of these is a failure of the service: no event at all, and no secret in what was sent.
    time.sleep(1)
    assert not [
        envelope for envelope in received if b'"type":"event"' in envelope or b"exception" in envelope
    ]
    for envelope in received:
        assert SECRET.encode() not in envelope


def test_error_reaches_sentry_without_the_planted_secret(sentry_endpoint: tuple[str, list[bytes]]) -> None:
    dsn, received = sentry_endpoint
    with _services(dsn) as [client]:
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
        time.sleep(0.5)  # a second event, if one were sent, has arrived too
    events = [envelope for envelope in received if b"RuntimeError" in envelope]
    assert len(events) == 1, f"{len(events)} error events reached the Sentry endpoint, not one"
    assert b"token=" not in events[0] and b"x-hf-token" not in events[0]  # no query string, no header
    assert b"the core failed on" in events[0]
    assert b"[REDACTED]" in events[0]
    for envelope in received:
        assert SECRET.encode() not in envelope


def test_no_wrapped_secret_reaches_sentry(sentry_endpoint: tuple[str, list[bytes]]) -> None:
    """The hostile redaction test's planted secrets, hard-wrapped at the widths the bot test uses:
    failing requests send events, answered ones breadcrumbs; no 8 secret characters in any."""
    dsn, received = sentry_endpoint
    hint = f"vllm serve m --hf-token {_PLANTED['hf']} --api-key {_PLANTED['apikey']}"
    with _services(dsn) as [client]:
        for width in WRAP_WIDTHS:
            log = hard_wrap(_pasted_log(_PLANTED), width)
            failed = client.post("/v1/boom", content=log, params={"command": hint})
            answered = client.post(
                "/v1/diagnose", content=log, params={"command": hint, "gpu": _PLANTED["aws"]}
            )
            assert (failed.status_code, answered.status_code) == (500, 200)
        deadline = time.monotonic() + 15
        while sum(b"RuntimeError" in e for e in received) < len(WRAP_WIDTHS) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert sum(b"RuntimeError" in e for e in received) == len(WRAP_WIDTHS)
    sent = b"\n".join(received).decode("utf-8", "replace")
    for name, secret in _PLANTED.items():
        assert not leaked(secret, sent), name
