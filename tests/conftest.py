"""Shared fixtures: a real Redis server for every test that needs shared state.

The server is the one named by VRAMDOC_TEST_REDIS_URL, else a private `redis-server` started on a
free port for this test session. Each test gets its own key prefix, so runs never see each other.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not listen on 127.0.0.1:{port} within {timeout_s} s")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis server for this test session."""
    given = os.environ.get("VRAMDOC_TEST_REDIS_URL")
    if given:
        yield given
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed: install it (apt-get install redis-server) "
            "or set VRAMDOC_TEST_REDIS_URL to a running server"
        )
    port = _free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for_port(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def key_prefix() -> str:
    """A key prefix no other test or run shares."""
    return f"vramdoc-test:{uuid.uuid4().hex[:12]}:"
