"""Throughput, latency, start-up and memory of `vramdoc serve`, driven over loopback from this process.

Every row is measured against a peer in the same run: `/v1/diagnose` and `/v1/estimate` against a
trivial POST endpoint of the same app (`/v1/bench/trivial`, mounted only because this script sets
VRAMDOC_BENCH_TRIVIAL_POST=1) taking a body of the same size through the same access checks,
middleware and worker count. The load client is pinned to one CPU and the server to the others when
there are two or more (`os.sched_setaffinity`), and the client's own CPU time is printed beside each
row. Each row is 3 rounds (min/median/max req/s), the rows interleaved within each round; ratios
compare medians. Distinct rows never repeat a body, so they miss the response cache; `cached` rows
repeat one body. Start-up: seconds to the first
`/readyz` 200 against `python -c "import litestar, uvicorn"`. Memory: RSS and PSS (smaps_rollup) of a
fresh server and its workers, then after every quarter of `--requests` mixed requests. Last, the
in-process split: the app called as ASGI in this process (no sockets, no uvicorn), CPU time per
request of the trivial POST, `/v1/diagnose` distinct and cached, and `core.diagnose` alone on the
same logs, so the HTTP layer's share of a diagnosis is a difference measured in one run
(`--in-process` prints only that; `--instructions` counts the same rows in instructions per request
under valgrind's cachegrind, which the machine's load does not move). Server and
import peer run with bytecode (as an installed package does), written to a scratch folder
(PYTHONPYCACHEPREFIX) where this environment sets PYTHONDONTWRITEBYTECODE.

    python bench/service.py                      # 1000 per round, 20k for memory
    python bench/service.py --requests 100000    # a longer memory check
    python bench/service.py --in-process         # only the in-process split
    python bench/service.py --instructions --calls 100   # the split in instructions (valgrind)
    python bench/service.py --trace-memory 512 --requests 3000   # where memory grows, traced
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# this file is bench/service.py: keep its folder off the path so `service` is the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from service.api.bench_route import BENCH_TRIVIAL_POST_ENV  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TAIL = REPO / "tests" / "api" / "data" / "kv-capacity-v0.32-qwen.log"
Request = Callable[[int], bytes]
Call = Callable[[int], Awaitable[None]]
WARM_UP = 100
TRIVIAL = "/v1/bench/trivial"
DIAGNOSE_QUERY = "model=Qwen/Qwen2.5-0.5B-Instruct"
# Bytecode for every process this bench starts (see the docstring); removed at exit.
PYCACHE = tempfile.TemporaryDirectory(prefix="vramdoc-bench-pyc-")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE", "VRAMDOC_REDIS_URL"}}
    # compiled packs in the scratch folder too: the user cache folder is shared with every checkout on
    # the machine, whose entries prune this one's (a start would now and then be cold)
    packs = os.path.join(PYCACHE.name, "packs")
    return {**env, "PYTHONPYCACHEPREFIX": PYCACHE.name, "VRAMDOC_PACK_CACHE": packs, **extra}


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


def server_pids(pid: int) -> list[int]:
    """The server process and its uvicorn workers."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [pid] + ([int(p) for p in children.read_text().split()] if children.exists() else [])


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MiB of the server and its workers; PSS shares each shared page out fairly."""
    rss = pss = 0
    for p in server_pids(pid):
        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss / 1024, pss / 1024


def memory_run(port: int, pid: int, rows: dict[str, Request], total: int) -> None:
    """On a fresh server: memory before any request, then after each quarter of a long mixed run (1 in
    8 a distinct 300-line diagnosis, the rest distinct estimates and cached diagnoses, so the response
    cache fills to its cap and keeps evicting)."""
    mix = [rows["POST /v1/diagnose distinct"]] + [rows["POST /v1/estimate distinct"]] * 4
    mix += [rows["POST /v1/diagnose cached"]] * 3

    def make(i: int) -> bytes:
        return mix[i % len(mix)](10**7 + i)

    samples = [memory_mib(pid)]
    started = time.perf_counter()
    quarter = max(1, total // 4)
    for start in range(0, total, quarter):
        count = min(quarter, total - start)
        asyncio.run(drive(port, lambda i, start=start: make(start + i), count, 16))
        samples.append(memory_mib(pid))
    elapsed = time.perf_counter() - started
    print(
        f"memory, fresh server then every {quarter} of {total} mixed requests ({total / elapsed:.0f} req/s):"
    )
    print("  RSS MiB: " + " -> ".join(f"{rss:.1f}" for rss, _ in samples))
    print("  PSS MiB: " + " -> ".join(f"{pss:.1f}" for _, pss in samples))
    print(
        f"  change fresh -> end: RSS {samples[-1][0] - samples[0][0]:+.1f} MiB, "
        f"PSS {samples[-1][1] - samples[0][1]:+.1f} MiB"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workers: int, cpus: set[int]) -> tuple[subprocess.Popen[bytes], float]:
    """`vramdoc serve` on `cpus`, and the seconds from spawn to its first /readyz 200."""
    env = child_env(VRAMDOC_RATE_LIMIT="off", VRAMDOC_CACHE_TTL_S="300", **{BENCH_TRIVIAL_POST_ENV: "1"})
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stderr=subprocess.DEVNULL, preexec_fn=lambda: os.sched_setaffinity(0, cpus)
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(http_request("GET", "/readyz"))
                if b" 200 " in sock.recv(4096):
                    return proc, time.perf_counter() - started
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("the server did not become ready within 60 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def import_web_stack_s() -> float:
    """Seconds for a fresh interpreter to import the web stack the service runs on."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import litestar, uvicorn"], check=True, env=child_env())
    return time.perf_counter() - started


def spread(values: list[float], fmt: str = "{:8.0f}") -> str:
    return " ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


def _scope(path: str, query: bytes, body: bytes, content_type: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


async def _asgi_post(
    app: Any, path: str, query: bytes, body: bytes, content_type: bytes = b"text/plain"
) -> int:
    """One request through the whole app (middleware, hooks, route, encoding); its status."""
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # after the body, only a disconnect would come
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(_scope(path, query, body, content_type), receive, send)
    return status


async def _asgi_started(app: Any) -> tuple[asyncio.Task[None], asyncio.Queue[dict[str, Any]]]:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.ensure_future(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, outbox.put)
    )
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the app did not start: {started}")
    return task, inbox


def _cpu_ms(call: Call, start: int, count: int) -> float:
    async def run() -> float:
        before = time.process_time()
        for i in range(start, start + count):
            await call(i)
        return (time.process_time() - before) * 1000 / count

    return asyncio.get_event_loop().run_until_complete(run())


def _in_process_rows(log: str, query: str) -> tuple[dict[str, Call], Callable[[], None]]:
    """The in-process rows (the app called as ASGI, started in this thread's new event loop) and a
    function that shuts the app down: the trivial POST, `/v1/diagnose` distinct and cached, and
    `core.diagnose` alone on the same logs (redacted as the route does)."""
    os.environ[BENCH_TRIVIAL_POST_ENV] = "1"
    from service import core
    from service.api.app import create_app
    from service.api.settings import Settings
    from service.redacted import redacted_diagnose
    from service.schemas import DiagnoseRequest

    packs = core.load_rules()
    app = create_app(Settings(rate_limit=None, cache_ttl_s=300), packs=packs)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    _, inbox = loop.run_until_complete(_asgi_started(app))

    def body(i: int) -> bytes:
        return f"{log}# bench request {i:08d}\n".encode()

    size, q = len(body(0)), query.encode()
    model = dict(p.split("=", 1) for p in query.split("&") if p).get("model")

    async def trivial(i: int) -> None:
        await _asgi_post(app, "/v1/bench/trivial", b"", b"x" * size)

    async def distinct(i: int) -> None:
        if await _asgi_post(app, "/v1/diagnose", q, body(i)) != 200:
            raise SystemExit("/v1/diagnose did not answer 200")

    async def cached(i: int) -> None:
        await _asgi_post(app, "/v1/diagnose", q, body(0))

    async def alone(i: int) -> None:
        text = body(i).decode()
        core.diagnose(redacted_diagnose(DiagnoseRequest(log=text, model=model)), packs)

    rows: dict[str, Call] = {
        f"POST trivial ({size} B body)": trivial,
        "POST /v1/diagnose distinct": distinct,
        "POST /v1/diagnose cached": cached,
        "core.diagnose alone (same logs)": alone,
    }
    return rows, lambda: loop.run_until_complete(inbox.put({"type": "lifespan.shutdown"}))


def in_process_split(log: str, query: str, per_row: int) -> dict[str, list[float]]:
    """CPU ms per request of each row, one value per round (rounds interleave the rows)."""
    rows, shut_down = _in_process_rows(log, query)
    offset = 10**6  # distinct bodies never repeat between rows, rounds or the warm-up
    for call in rows.values():
        _cpu_ms(call, offset, 30)
        offset += 30
    spent: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(3):
        for name, call in rows.items():
            spent[name].append(_cpu_ms(call, offset, per_row))
            offset += per_row
    shut_down()
    return spent


_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions_child(row: int, calls: int) -> None:
    """Run under cachegrind by `instructions_split`: every row warmed up, the cyclic collector
    paused (when its collections fall depends on all that was allocated before, not on the request
    counted), then `calls` requests of row `row` (none for the baseline run)."""
    import gc

    rows, shut_down = _in_process_rows(log_300_lines(), DIAGNOSE_QUERY)
    calls_by_row = list(rows.values())
    offset = 10**6
    for call in calls_by_row:
        _cpu_ms(call, offset, 30)
        offset += 30
    gc.collect()
    gc.freeze()
    gc.disable()
    if calls:
        _cpu_ms(calls_by_row[row], offset, calls)
    shut_down()


def instructions_split(calls: int) -> dict[str, float] | None:
    """Instructions per request of each in-process row (valgrind's cachegrind, immune to the
    machine's load): a run with `calls` requests of the row less a run with none, over `calls`."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed; --instructions needs it.", file=sys.stderr)
        return None
    names = ["baseline", "POST trivial", "POST /v1/diagnose distinct", "POST /v1/diagnose cached"]
    names.append("core.diagnose alone (same logs)")
    counts: list[int] = []
    # this checkout's code (not whichever one is installed), the same dict layouts in every run
    env = {**child_env(), "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)}
    child = [sys.executable, str(Path(__file__).resolve()), "--instructions-child"]
    # a run outside valgrind first writes the bytecode and the compiled packs every counted run reads
    subprocess.run([*child, "-1", "--calls", "0"], capture_output=True, cwd=REPO, check=True, env=env)
    for row in range(-1, 4):
        command = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        command += [*child, str(row), "--calls", str(calls if row >= 0 else 0)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False, env=env)
        found = _REFS.search(done.stderr)
        if done.returncode != 0 or found is None:
            print(f"row {names[row + 1]}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
        counts.append(int(found.group(1).replace(",", "")))
    return {name: (count - counts[0]) / calls for name, count in zip(names[1:], counts[1:], strict=True)}


def print_instructions(per_request: dict[str, float]) -> None:
    trivial, distinct, cached, alone = per_request.values()
    print(f"{'in-process, instructions per request':40} {'count':>12} {'vs trivial':>10}")
    for name, count in per_request.items():
        print(f"{name:40} {count / 1e3:10.1f} k {trivial / count:>10.2f}")
    print(
        f"  HTTP layer's share of a distinct diagnosis: {(distinct - alone) / 1e3:.1f} k "
        f"({(distinct - alone) / distinct:.0%}); a hit over the trivial POST: "
        f"{(cached - trivial) / 1e3:+.1f} k"
    )


def print_split(spent: dict[str, list[float]]) -> None:
    trivial, distinct, cached, alone = (statistics.median(v) for v in spent.values())
    print(f"{'in-process, CPU ms per request':34} {'min':>7} {'median':>7} {'max':>7} {'vs trivial':>10}")
    for name, values in spent.items():
        mid = statistics.median(values)
        print(f"{name:34} {min(values):7.3f} {mid:7.3f} {max(values):7.3f} {trivial / mid:>10.2f}")
    print(
        f"  HTTP layer's share of a distinct diagnosis: {distinct - alone:.3f} ms "
        f"({(distinct - alone) / distinct:.0%}; the trivial POST itself {trivial:.3f} ms), "
        f"classify + fixes {alone:.3f} ms"
    )


def trace_memory(log: str, requests: int, cap: int) -> None:
    """Where memory grows once the response cache is full: the memory run's mix, called as ASGI in
    this process with a response cache of `cap` entries, traced from the first request (so every
    entry the cache evicts was traced too), then tracemalloc snapshots diffed over `requests`."""
    import gc
    import tracemalloc

    from service import core
    from service.api.app import create_app
    from service.api.settings import Settings
    from service.diagnosis import normalize

    packs = core.load_rules()
    app = create_app(Settings(rate_limit=None, cache_max_entries=cap), packs=packs)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(_asgi_started(app))
    query = b"model=Qwen/Qwen2.5-0.5B-Instruct"

    async def mixed(first: int, count: int) -> None:  # 1 in 8 distinct diagnoses, as memory_run
        for i in range(first, first + count):
            if i % 8 == 0:
                await _asgi_post(app, "/v1/diagnose", query, f"{log}# bench request {i:08d}\n".encode())
            elif i % 8 <= 4:
                body = json.dumps(
                    {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "A100-80GB", "max_model_len": i}
                )
                await _asgi_post(app, "/v1/estimate", b"", body.encode(), b"application/json")
            else:
                await _asgi_post(app, "/v1/diagnose", query, f"{log}# bench request {0:08d}\n".encode())

    def memos() -> dict[str, int]:
        sizes = {
            f"{name}.{key}": len(memo)
            for name in ("eager", "lazy")
            for key, memo in getattr(packs.signatures, name).memo.items()
        }
        sizes["split_prefixes"] = normalize._split_once.cache_info().currsize
        return sizes

    tracemalloc.start(6)
    loop.run_until_complete(mixed(0, 2 * cap))  # 5 new cache entries in 8 requests: full
    loop.run_until_complete(mixed(2 * cap, requests))
    gc.collect()
    before, memos_before = tracemalloc.take_snapshot(), memos()
    loop.run_until_complete(mixed(2 * cap + requests, requests))
    gc.collect()
    after, memos_after = tracemalloc.take_snapshot(), memos()
    diff = after.compare_to(before, "traceback")
    print(
        f"traced growth over {requests} mixed requests, cache cap {cap}: "
        f"{sum(d.size_diff for d in diff) / 1024:+.1f} KiB"
    )
    print(
        "memo entries: " + ", ".join(f"{k} {memos_before.get(k, 0)} -> {v}" for k, v in memos_after.items())
    )
    for d in diff[:8]:
        print(
            f"{d.size_diff / 1024:+9.1f} KiB {d.count_diff:+6d} blocks  "
            + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(d.traceback[-3:]))
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-row", type=int, default=1000, help="requests per round of each row")
    parser.add_argument("--requests", type=int, default=20000, help="requests in the memory run")
    parser.add_argument("--workers", type=int, help="server workers (default: one per server CPU)")
    parser.add_argument(
        "--in-process", action="store_true", help="only the in-process split of HTTP layer and diagnosis"
    )
    parser.add_argument(
        "--trace-memory", type=int, metavar="CAP", help="only the in-process tracemalloc diff (cache cap CAP)"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="only the in-process split, in instructions per request (valgrind; --calls requests a row)",
    )
    parser.add_argument("--calls", type=int, default=200, help="requests per row with --instructions")
    parser.add_argument("--instructions-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instructions_child is not None:
        _instructions_child(args.instructions_child, args.calls)
        return
    if args.instructions:
        per_request = instructions_split(args.calls)
        if per_request is None:
            raise SystemExit(1)
        print_instructions(per_request)
        return
    if args.trace_memory:
        trace_memory(log_300_lines(), args.requests, args.trace_memory)
        return
    if args.in_process:
        print_split(in_process_split(log_300_lines(), DIAGNOSE_QUERY, args.per_row))
        return

    cpus = sorted(os.sched_getaffinity(0))
    client_cpus = {cpus[-1]}
    server_cpus = set(cpus[:-1]) or client_cpus
    workers = args.workers or len(server_cpus)
    os.sched_setaffinity(0, client_cpus)

    log = log_300_lines()
    diag_path = "/v1/diagnose?model=Qwen/Qwen2.5-0.5B-Instruct"

    def estimate_body(i: int) -> bytes:
        return json.dumps(
            {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "A100-80GB", "max_model_len": 1024 + i}
        ).encode()

    def log_body(i: int) -> bytes:
        return f"{log}# bench request {i:08d}\n".encode()

    log_size, estimate_size = len(log_body(0)), len(estimate_body(10**6))
    rows: dict[str, Request] = {
        f"POST trivial ({log_size} B body)": lambda i: http_request("POST", TRIVIAL, b"x" * log_size),
        "POST /v1/diagnose distinct": lambda i: http_request("POST", diag_path, log_body(i)),
        "POST /v1/diagnose cached": lambda i: http_request("POST", diag_path, log_body(0)),
        f"POST trivial ({estimate_size} B body)": lambda i: http_request(
            "POST", TRIVIAL, b"x" * estimate_size, "application/json"
        ),
        "POST /v1/estimate distinct": lambda i: http_request(
            "POST", "/v1/estimate", estimate_body(10**6 + i), "application/json"
        ),
        "POST /v1/estimate cached": lambda i: http_request(
            "POST", "/v1/estimate", estimate_body(10**6), "application/json"
        ),
    }
    print(
        f"vramdoc serve, {workers} worker(s) on CPUs {sorted(server_cpus)}, client on CPU {cpus[-1]}; "
        f"{args.per_row} requests per round, 3 rounds"
    )
    ready, imports = [], []
    stop(start_server(free_port(), workers, server_cpus)[0])  # write bytecode and the pack cache once
    import_web_stack_s()
    for _ in range(3):
        imports.append(import_web_stack_s())
        proc, seconds = start_server(free_port(), workers, server_cpus)
        ready.append(seconds)
        stop(proc)
    start_ratio = statistics.median(ready) / statistics.median(imports)
    print(f"start-up ms (min median max): ready {spread([r * 1000 for r in ready])}; ", end="")
    print(f"import litestar+uvicorn {spread([i * 1000 for i in imports])}")
    print(f"  ready / web-stack import: {start_ratio:.1f}x (<= 3x: {verdict(start_ratio <= 3)})")

    port = free_port()
    proc, _ = start_server(port, workers, server_cpus)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the server in `finally`
    offset = 0
    ratios: dict[tuple[str, int], float] = {}
    try:
        print(
            f"{'row':34} {'conc':>4} {'req/s min':>9} {'median':>8} {'max':>8} {'p99 ms':>7} "
            f"{'client CPU ms/req':>17} {'vs trivial':>10}"
        )
        for concurrency in (1, 16):
            for make in rows.values():
                # Warm-up and measured requests use disjoint indices, so distinct rows never hit the cache.
                warm: Request = lambda i, make=make, base=offset: make(base + i)  # noqa: E731
                offset += WARM_UP
                asyncio.run(drive(port, warm, WARM_UP, concurrency))
            rates: dict[str, list[float]] = {name: [] for name in rows}
            latencies: dict[str, list[float]] = {name: [] for name in rows}
            client_cpu = dict.fromkeys(rows, 0.0)
            # Rounds interleave the rows, so a neighbour's burst of load slows every row alike.
            for _ in range(3):
                for name, make in rows.items():
                    measured: Request = lambda i, make=make, base=offset: make(base + i)  # noqa: E731
                    offset += args.per_row
                    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
                    elapsed, lat = asyncio.run(drive(port, measured, args.per_row, concurrency))
                    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
                    client_cpu[name] += (cpu_after.ru_utime + cpu_after.ru_stime) - (
                        cpu_before.ru_utime + cpu_before.ru_stime
                    )
                    rates[name].append(args.per_row / elapsed)
                    latencies[name] += lat
            peer = 0.0
            for name in rows:
                median = statistics.median(rates[name])
                if name.startswith("POST trivial"):
                    peer = median
                ratios[(name, concurrency)] = median / peer
                q = statistics.quantiles(latencies[name], n=100)
                print(
                    f"{name:34} {concurrency:>4} {spread(rates[name], '{:9.0f}')} {q[98] * 1000:>7.2f} "
                    f"{client_cpu[name] * 1000 / (3 * args.per_row):>17.3f} {median / peer:>10.2f}"
                )
    finally:
        stop(proc)
    print("targets (issue 15), at 16 clients:")
    for name, target in (("POST /v1/diagnose distinct", 0.5), ("POST /v1/diagnose cached", 0.9)):
        got = ratios[(name, 16)]
        print(f"  {name} / trivial POST: {got:.2f}x (>= {target}x: {verdict(got >= target)})")
    port = free_port()
    proc, _ = start_server(port, workers, server_cpus)
    try:
        memory_run(port, proc.pid, rows, args.requests)
    finally:
        stop(proc)
    print_split(in_process_split(log, DIAGNOSE_QUERY, min(args.per_row, 300)))


if __name__ == "__main__":
    main()
