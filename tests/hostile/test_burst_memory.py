"""A burst of 2 MB pastes to a real `vramdoc serve`: the answers say when the scan bound was reached,
and the worker's memory comes back to where it was before the burst (a bound on memory, read from
/proc, not a timing)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from service.diagnosis.evidence import SCAN_BOUND_RULE
from service.diagnosis.scan import MAX_EXAMINED_LINES

REPO = Path(__file__).resolve().parents[2]
PASTE_BYTES = 2_000_000
BURST = 16
RSS_GROWTH_ALLOWED = 1.2
OOM = (
    "(EngineCore_DP0 pid=210) ERROR 05-12 10:11:12 [core.py:700] torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate {size} GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is "
    "free. Including non-PyTorch memory, this process has 78.12 GiB memory in use."
)


def _repeated_oom() -> str:
    line = OOM.format(size="2.00") + "\n"
    return line * (PASTE_BYTES // len(line))


def _distinct_ooms() -> str:
    """OOM lines that differ in one number: every one is a matched line of its own."""
    lines: list[str] = []
    total = 0
    while total < PASTE_BYTES - 200:
        line = OOM.format(size=f"{len(lines)}.5") + "\n"
        lines.append(line)
        total += len(line)
    assert len(lines) > MAX_EXAMINED_LINES
    return "".join(lines)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no VmRSS")


def _settled_rss(pid: int) -> int:
    """The worker's RSS once it stops falling (the heap is trimmed after the last answer is sent)."""
    lowest = _rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.1)
        lowest = min(lowest, _rss_bytes(pid))
    return lowest


@pytest.fixture
def served() -> Iterator[tuple[httpx.Client, int]]:
    """A `vramdoc serve` with one worker (the process itself), its cache off, and a client."""
    port = _free_port()
    env = {**os.environ, "VRAMDOC_CACHE_TTL_S": "0", "VRAMDOC_RATE_LIMIT": "off"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            for _ in range(600):
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, proc.stderr and proc.stderr.read()
                time.sleep(0.1)
            yield client, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _diagnose(client: httpx.Client, log: str) -> httpx.Response:
    return client.post("/v1/diagnose", content=log, headers={"content-type": "text/plain"})


def _diagnose_as_new_client(base: httpx.URL, log: str) -> httpx.Response:
    """One person's paste: its own connection, closed after the answer."""
    with httpx.Client(base_url=base, timeout=300) as client:
        return _diagnose(client, log)


def test_sixteen_concurrent_2mb_pastes_leave_the_worker_rss_near_its_start(
    served: tuple[httpx.Client, int],
) -> None:
    client, pid = served
    pastes = [_repeated_oom(), _distinct_ooms()]
    # The start is a warm worker: one that has already answered a few of each kind at once (the
    # allocator's arenas for concurrent large logs exist); the bound is on what the burst keeps.
    with ThreadPoolExecutor(4) as pool:
        warm = list(pool.map(lambda i: _diagnose_as_new_client(client.base_url, pastes[i % 2]), range(4)))
    assert [a.status_code for a in warm] == [200] * 4
    start = _rss_bytes(pid)
    with ThreadPoolExecutor(BURST) as pool:
        answers = list(
            pool.map(lambda i: _diagnose_as_new_client(client.base_url, pastes[i % 2]), range(BURST))
        )
    assert [a.status_code for a in answers] == [200] * BURST
    bounded = [a.json() for a in answers[1::2]]
    for answer in bounded:
        bound = [f for f in answer["findings"] if f["rule"] == SCAN_BOUND_RULE]
        assert len(bound) == 1
        assert f"Examined the first {MAX_EXAMINED_LINES} matching lines" in bound[0]["message"]
    repeated = answers[0].json()
    assert all(f["rule"] != SCAN_BOUND_RULE for f in repeated["findings"])
    assert max(e["repeats"] for e in repeated["evidence"]) == PASTE_BYTES // len(
        OOM.format(size="2.00") + "\n"
    )
    after = _settled_rss(pid)
    print(f"worker RSS: {start / 2**20:.1f} MiB before the burst, {after / 2**20:.1f} MiB after")
    assert after <= start * RSS_GROWTH_ALLOWED, (
        f"RSS {start / 2**20:.0f} MiB before, {after / 2**20:.0f} after"
    )
