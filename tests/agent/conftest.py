"""Fixtures for the agent: the fake NVML library installed under the real pynvml, and its /proc."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pynvml
import pytest

from service.agent.procfs import ProcFs

from .fake_nvml import FakeNvmlLib, build_proc, load_fixture

InstallNvml = Callable[[str], tuple[FakeNvmlLib, ProcFs]]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> InstallNvml:
    """Install a fixture's devices as pynvml's loaded library; returns it and its /proc view."""

    def install(name: str) -> tuple[FakeNvmlLib, ProcFs]:
        spec = load_fixture(name)
        lib = FakeNvmlLib(spec)
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        return lib, ProcFs(build_proc(tmp_path / f"proc-{name}", spec["proc"]))

    return install


METRICS = Path(__file__).parent / "fixtures" / "metrics"
# path on the local server -> (status, body, seconds to wait before answering)
_PAGES: dict[str, tuple[int, bytes, float]] = {
    "/v0/metrics": (200, (METRICS / "vllm_v0_0.6.6.prom").read_bytes(), 0.0),
    "/v1/metrics": (200, (METRICS / "vllm_v1_0.11.0_two_engines.prom").read_bytes(), 0.0),
    "/v1/version": (200, b'{"version": "0.11.0"}', 0.0),  # vLLM's OpenAI server answers GET /version
    "/v1-0.8/metrics": (200, (METRICS / "vllm_v1_0.8.5_old_name.prom").read_bytes(), 0.0),
    "/dcgm/metrics": (200, (METRICS / "dcgm_exporter_h100x2.prom").read_bytes(), 0.0),
    "/broken/metrics": (500, b"Internal Server Error", 0.0),
    "/html/metrics": (200, b"<!doctype html>\n<html><body>login</body></html>\n", 0.0),
    "/not-vllm/metrics": (200, b'# TYPE up gauge\nup{job="node"} 1\n', 0.0),
    "/slow/metrics": (200, b"vllm:num_requests_running 1\n", 1.0),
    "/huge/metrics": (200, b"vllm:num_requests_running 1\n" * 350_000, 0.0),  # about 9.5 MiB
}


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        status, body, delay = _PAGES.get(self.path, (404, b"not found", 0.0))
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


class _QuietServer(ThreadingHTTPServer):
    block_on_close = False
    daemon_threads = True


@pytest.fixture(scope="session")
def metrics_server() -> Iterator[str]:
    """Base URL of a real HTTP server on loopback serving recorded vLLM and DCGM /metrics pages."""
    server = _QuietServer(("127.0.0.1", 0), _MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
