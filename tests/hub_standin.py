"""A loopback stand-in of the Hugging Face Hub's HTTP API, for a real `huggingface_hub` client.

It answers what the client asks the Hub for a model: `GET /api/models/{repo}` (model info with the
`safetensors` summary), `HEAD`/`GET /{repo}/resolve/{revision}/{file}` (with `X-Repo-Commit`, `ETag`,
ranged reads for safetensors headers), and the Hub's error answers: 401 `RepoNotFound` for a repo it
does not have, 401 `GatedRepo` for a gated repo without a token it accepts, 404 `EntryNotFound` for a
missing file. A repo marked slow sleeps before answering (or only before its model info), to exercise the
client's timeouts. Every
request is recorded so tests can assert what crossed the wire.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["HubRepo", "HubStandIn", "safetensors_header_file", "serve_hub"]

_COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")


def safetensors_header_file(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """The header part of a safetensors file (8-byte length + JSON); the data part is left out."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset]}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


@dataclass
class HubRepo:
    """One model repo: its files, the model info's parameter summary, and how it answers."""

    files: dict[str, bytes]
    parameters: dict[str, int] | None = None
    gated_token: str | None = None
    delay_s: float = 0.0
    info_delay_s: float = 0.0


@dataclass
class HubStandIn:
    repos: dict[str, HubRepo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""

    def count(self, method: str, fragment: str) -> int:
        return sum(1 for m, path, _ in self.requests if m == method and fragment in path)


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        return

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        self._send(status, body, {"X-Error-Code": code, "Content-Type": "application/json"})

    def _repo(self, repo_id: str) -> HubRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound")
            return None
        if repo.delay_s:
            time.sleep(repo.delay_s)
        auth = self.headers.get("Authorization")
        if repo.gated_token is not None and auth != f"Bearer {repo.gated_token}":
            self._error(401 if auth is None else 403, "GatedRepo")
            return None
        return repo

    def _handle(self) -> None:
        path = self.path.split("?", 1)[0]
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        info = _INFO.match(path)
        if info and self.command == "GET":
            repo = self._repo(info["repo"])
            if repo is None:
                return
            if repo.info_delay_s:
                time.sleep(repo.info_delay_s)
            body: dict[str, object] = {
                "id": info["repo"],
                "modelId": info["repo"],
                "sha": _COMMIT,
                "private": False,
                "gated": repo.gated_token is not None and "auto",
                "siblings": [{"rfilename": name} for name in sorted(repo.files)],
            }
            if repo.parameters is not None:
                body["safetensors"] = {"parameters": repo.parameters, "total": sum(repo.parameters.values())}
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            return
        resolve = _RESOLVE.match(path)
        if resolve is None:
            self._error(404, "NotFound")
            return
        repo = self._repo(resolve["repo"])
        if repo is None:
            return
        content = repo.files.get(resolve["file"])
        if content is None:
            self._send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": _COMMIT})
            return
        headers = {"X-Repo-Commit": _COMMIT, "ETag": f'"{hashlib.sha1(content).hexdigest()}"'}
        ranged = re.match(r"bytes=(\d+)-(\d+)?", self.headers.get("Range") or "")
        if ranged and self.command == "GET":
            start = int(ranged[1])
            stop = int(ranged[2]) + 1 if ranged[2] else len(content)
            headers["Content-Range"] = f"bytes {start}-{min(stop, len(content)) - 1}/{len(content)}"
            self._send(206, content[start:stop], headers)
            return
        self._send(200, content, headers)

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()


@contextmanager
def serve_hub(hub: HubStandIn) -> Iterator[HubStandIn]:
    """Serve `hub` on a free loopback port for the duration of the block; `hub.url` is its endpoint."""
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
