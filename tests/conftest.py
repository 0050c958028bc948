"""Shared fixtures: the repository's rule packs, and a real Redis server for tests that share state.

The server is the one named by VRAMDOC_TEST_REDIS_URL, else a private `redis-server` started on a
free port for this test session. Each test gets its own key prefix, so runs never see each other.
"""

from __future__ import annotations

import atexit
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

from service.packs import RulePacks, load_packs

REPO_ROOT = Path(__file__).resolve().parent.parent

# The compiled-pack cache of this test session, never the user's: tests decode many packs of their
# own, and every process they start inherits the folder. A run that names one keeps it.
if "VRAMDOC_PACK_CACHE" not in os.environ:
    os.environ["VRAMDOC_PACK_CACHE"] = tempfile.mkdtemp(prefix="vramdoc-test-packs-")
    atexit.register(shutil.rmtree, os.environ["VRAMDOC_PACK_CACHE"], ignore_errors=True)


@pytest.fixture(scope="session")
def packs() -> RulePacks:
    """The repository's rule packs, loaded once for the whole test session."""
    return load_packs()


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


_HUB_ENV = ("HF_ENDPOINT", "HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "VRAMDOC_MODEL_CACHE_DIR")


@pytest.fixture(scope="session", autouse=True)
def no_real_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Point every test at an empty loopback Hub and a private HF cache: no test reaches huggingface.co.

    A name the catalog does not know is then looked up on a Hub that has no repos, which answers as
    the real one does for a missing repo. Tests of the chain start their own stand-in with repos.
    """
    from hub_standin import HubStandIn, serve_hub

    saved = {key: os.environ.get(key) for key in _HUB_ENV}
    with serve_hub(HubStandIn()) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        os.environ["HF_HUB_CACHE"] = str(tmp_path_factory.mktemp("hf-cache"))
        os.environ["VRAMDOC_MODEL_CACHE_DIR"] = str(tmp_path_factory.mktemp("vramdoc-models"))
        for key in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            os.environ.pop(key, None)
        try:
            yield hub.url
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
