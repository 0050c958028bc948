"""Throughput, latency and memory of `vramdoc serve`, driven over loopback from this second process.

Starts the server as a subprocess (rate limit off; cache on, as deployed), then for each endpoint
and each concurrency level sends a fixed number of requests over keep-alive connections with a
minimal HTTP/1.1 client (so the client costs little of the shared CPUs), and prints requests/s and
p50/p99 latency next to the trivial `/healthz` of the same app in the same run. Diagnose and
estimate requests are all distinct (cache misses) unless the row says `cached`. Finally it sends
`--requests` more mixed requests and prints the server's RSS every quarter of them.

    python bench/service.py                      # quick: 2000 per row, 20k for memory
    python bench/service.py --requests 100000    # the full memory check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TAIL = REPO / "tests" / "api" / "data" / "kv-capacity-v0.32-qwen.log"
Request = Callable[[int], bytes]
WARM_UP = 100


def log_300_lines() -> str:
    """A 300-line vLLM log: startup, a long stretch of serving lines, then the failure and traceback."""
    lines = TAIL.read_text().splitlines()
    head, tail = lines[:10], lines[10:]
    filler = []
    for i in range(300 - len(lines)):
        if i % 3:
            filler.append(
                f'INFO:     10.0.{i % 7}.5:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
        else:
            filler.append(
                f"INFO 11-20 09:{15 + i // 60:02d}:{i % 60:02d} [loggers.py:123] Engine 000: Avg prompt "
                f"throughput: {400 + i % 97}.3 tokens/s, Avg generation throughput: {80 + i % 13}.1 "
                f"tokens/s, Running: {i % 5} reqs, Waiting: 0 reqs, GPU KV cache usage: {i % 90}.2%, "
                "Prefix cache hit rate: 12.0%"
            )
    return "\n".join(head + filler + tail) + "\n"


def http_request(method: str, path: str, body: bytes = b"", content_type: str = "text/plain") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
    if body or method == "POST":
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def one_connection(port: int, make: Request, indices: list[int], latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in indices:
            started = time.perf_counter()
            writer.write(make(i))
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"request {i} answered {status}")
    finally:
        writer.close()


async def drive(port: int, make: Request, count: int, concurrency: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    shares = [list(range(c, count, concurrency)) for c in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(one_connection(port, make, share, latencies) for share in shares))
    return time.perf_counter() - started, latencies


def rss_mib(pid: int) -> float:
    """Resident memory of the server and its worker processes."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def memory_run(port: int, pid: int, rows: dict[str, Request], offset: int, total: int) -> None:
    """A long mixed run (1 in 8 a distinct 300-line diagnosis, the rest distinct estimates and cached
    diagnoses, so the response cache fills to its cap and keeps evicting); RSS printed every quarter."""
    mix = [rows["POST /v1/diagnose (300 lines)"]] + [rows["POST /v1/estimate"]] * 4
    mix += [rows["POST /v1/diagnose (cached)"]] * 3

    def make(i: int) -> bytes:
        return mix[i % len(mix)](offset + i)

    samples = [rss_mib(pid)]
    started = time.perf_counter()
    quarter = max(1, total // 4)
    for start in range(0, total, quarter):
        count = min(quarter, total - start)
        asyncio.run(drive(port, lambda i, start=start: make(start + i), count, 16))
        samples.append(rss_mib(pid))
    elapsed = time.perf_counter() - started
    trail = " -> ".join(f"{s:.1f}" for s in samples)
    print(f"memory: RSS MiB every {quarter} of {total} mixed requests ({total / elapsed:.0f} req/s): {trail}")
    print(f"memory: change over the last three quarters {samples[-1] - samples[1]:+.1f} MiB")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VRAMDOC_RATE_LIMIT": "off", "VRAMDOC_CACHE_TTL_S": "300"}
    env.pop("VRAMDOC_REDIS_URL", None)
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(http_request("GET", "/readyz"))
                if b" 200 " in sock.recv(4096):
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not become ready within 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-row", type=int, default=2000, help="requests per endpoint and concurrency")
    parser.add_argument("--requests", type=int, default=20000, help="requests in the memory run")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="server workers (default: one per CPU, as `vramdoc serve --workers $(nproc)` is deployed)",
    )
    args = parser.parse_args()

    log = log_300_lines()
    diag_path = "/v1/diagnose?model=Qwen/Qwen2.5-0.5B-Instruct"
    rows: dict[str, Request] = {
        "GET /healthz (trivial)": lambda i: http_request("GET", "/healthz"),
        "POST /v1/diagnose (300 lines)": lambda i: http_request(
            "POST", diag_path, f"{log}# bench request {i}\n".encode()
        ),
        "POST /v1/diagnose (cached)": lambda i: http_request("POST", diag_path, log.encode()),
        "POST /v1/estimate": lambda i: http_request(
            "POST",
            "/v1/estimate",
            json.dumps(
                {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "A100-80GB", "max_model_len": 1024 + i}
            ).encode(),
            "application/json",
        ),
    }
    port = free_port()
    proc = start_server(port, args.workers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the server in `finally`
    offset = 0
    try:
        print(
            f"vramdoc serve, {args.workers} worker(s), {os.cpu_count()} CPUs; {args.per_row} requests per row"
        )
        print(f"{'endpoint':32} {'conc':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs trivial':>10}")
        for concurrency in (1, 4, 16):
            trivial_rps = 0.0
            for name, make in rows.items():
                # Warm-up and measured requests use disjoint indices, so distinct rows never hit the cache.
                warm: Request = lambda i, make=make, base=offset: make(base + i)  # noqa: E731
                offset += WARM_UP
                measured: Request = lambda i, make=make, base=offset: make(base + i)  # noqa: E731
                offset += args.per_row
                asyncio.run(drive(port, warm, WARM_UP, concurrency))
                elapsed, lat = asyncio.run(drive(port, measured, args.per_row, concurrency))
                rps = args.per_row / elapsed
                trivial_rps = trivial_rps or rps
                q = statistics.quantiles(lat, n=100)
                print(
                    f"{name:32} {concurrency:>4} {rps:>8.0f} {q[49] * 1000:>8.2f} {q[98] * 1000:>8.2f} "
                    f"{rps / trivial_rps:>10.2f}"
                )
        memory_run(port, proc.pid, rows, offset, args.requests)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
