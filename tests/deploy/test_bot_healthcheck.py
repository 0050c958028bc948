"""docker/bot-healthcheck.py against the real kernel's TCP table and a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Dockerfile, parse_healthcheck

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "bot-healthcheck.py"
IMAGE_PATH = "/opt/vramdoc/bot-healthcheck.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check(*args: str) -> int:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, timeout=30).returncode


@pytest.fixture
def connected_port() -> Iterator[int]:
    """A port on loopback that this process holds an established TCP connection to."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = int(server.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"x")
                yield port


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture
def healthz_url() -> Iterator[str]:
    """URL of a real HTTP server on loopback whose /healthz answers 200."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    finally:
        server.shutdown()
        server.server_close()


def test_healthy_while_a_connection_to_the_slack_port_is_established(connected_port: int) -> None:
    dead_url = f"http://127.0.0.1:{_free_port()}/healthz"
    assert _check("--remote-port", str(connected_port), "--health-url", dead_url) == 0


def test_unhealthy_with_no_connection_and_no_http_health(connected_port: int) -> None:
    unused = _free_port()
    assert unused != connected_port
    assert _check("--remote-port", str(unused), "--health-url", f"http://127.0.0.1:{unused}/healthz") == 1


def test_healthy_in_events_api_mode_when_healthz_answers(healthz_url: str) -> None:
    assert _check("--remote-port", str(_free_port()), "--health-url", healthz_url) == 0


def test_listening_sockets_do_not_count_as_connected() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = str(server.getsockname()[1])
        dead_url = f"http://127.0.0.1:{_free_port()}/healthz"
        assert _check("--remote-port", port, "--health-url", dead_url) == 1


def test_bot_image_and_pod_run_the_check_the_image_ships(
    dockerfiles: dict[str, Dockerfile], manifests: list[dict[str, Any]]
) -> None:
    runtime = dockerfiles["bot"].runtime
    assert any(i.value == f"docker/bot-healthcheck.py {IMAGE_PATH}" for i in runtime.all("COPY"))
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    assert parse_healthcheck(healthcheck)[1] == ["python", IMAGE_PATH]
    bot = next(o for o in manifests if o["kind"] == "Deployment" and o["metadata"]["name"] == "vramdoc-bot")
    container = bot["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["python", IMAGE_PATH]
