"""A body that stops arriving gets a 408 problem; a slow but steady upload still gets through."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from service.api.settings import Settings

ServerFactory = Callable[[Settings], httpx.Client]

LOG = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


def _connect(base_url: str) -> socket.socket:
    parts = urlsplit(base_url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=20)
    return sock


def _status_and_body(sock: socket.socket) -> tuple[int, dict[str, object]]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_body_that_stops_arriving_is_answered_408_not_held_open(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None, body_timeout_s=0.3))
    with _connect(str(api.base_url)) as sock:
        sock.sendall(
            b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 1000\r\nConnection: close\r\n\r\n" + LOG[:20]
        )
        status, problem = _status_and_body(sock)
    assert status == 408
    assert problem["type"] == "urn:vramdoc:problem:body-timeout"
    assert problem["detail"] == "The request body stopped arriving for 0.3 s; send it in one go."


def test_a_slow_but_steady_chunked_upload_is_still_diagnosed(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None, body_timeout_s=1.0))
    with _connect(str(api.base_url)) as sock:
        sock.sendall(
            b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        for piece in (LOG[:30], LOG[30:]):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.1)  # pacing the upload, not measuring it
        sock.sendall(b"0\r\n\r\n")
        status, diagnosis = _status_and_body(sock)
    assert status == 200
    assert diagnosis["phase"] != "no_failure"
