"""Slack bot latency over loopback: ack time of signed events, idle and under load, and time to reply.

Runs the real service (`vramdoc serve` in a subprocess, response cache off so every mention is
diagnosed), the bot's HTTP gateway (uvicorn, as `vramdoc bot --http` runs it) and the tests' stand-in
of Slack's Web API, all on 127.0.0.1. Every mention carries a distinct log (the same excerpt with a
numbered last line), so no reply is a cache hit. Idle acks are sent one at a time, each after the
previous mention's reply has landed; loaded acks are sent back to back while earlier mentions are
still being diagnosed and answered. Targets (issue 7): ack p99 < 100 ms; reply < 1 s for a log-only
mention. Each figure is taken in each of 3 rounds (one bot, fresh mentions every round) and printed
as min/median/max over the rounds. Prints numbers only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
# This file is bench/bot.py: the script's own folder must not shadow the `bot` package.
sys.path[0] = str(ROOT)
sys.path.insert(1, str(ROOT / "tests" / "bot"))

from slack_sdk.signature import SignatureVerifier  # noqa: E402
from slack_standin import BOT_TOKEN, BOT_USER, SlackStandin  # noqa: E402

from bot.app import build_backends, create_app  # noqa: E402
from bot.gateway import create_gateway  # noqa: E402
from bot.settings import BotSettings  # noqa: E402

SECRET = "bench-signing-secret"
LOG = (ROOT / "tests" / "bot" / "data" / "kv-capacity-qwen.log").read_text(encoding="utf-8")
ACKS = int(os.environ.get("BENCH_BOT_ACKS", "300"))
REPLIES = int(os.environ.get("BENCH_BOT_REPLIES", "30"))
ROUNDS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_service() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"VRAMDOC_REDIS_URL", "PYTHONDONTWRITEBYTECODE"}}
    env["VRAMDOC_CACHE_TTL_S"] = "0"  # cache off: every mention is diagnosed
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("the vramdoc service did not start within 60 s")


def _event(n: int, text: str) -> bytes:
    ts = f"1700000000.{n:06d}"
    return json.dumps(
        {
            "type": "event_callback",
            "team_id": "T0001",
            "api_app_id": "A0001",
            "event_id": f"EvBENCH{n}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": True}],
            "event": {
                "type": "app_mention",
                "user": "U1",
                "text": f"<@{BOT_USER}> {text}",
                "ts": ts,
                "channel": "C1",
            },
        }
    ).encode()


async def _send(http: httpx.AsyncClient, body: bytes) -> float:
    ts = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": SignatureVerifier(SECRET).generate_signature(timestamp=ts, body=body) or "",
    }
    started = time.perf_counter()
    response = await http.post("/slack/events", content=body, headers=headers)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"the bot answered HTTP {response.status_code}")
    return elapsed


def _mention(n: int) -> str:
    """A log-only mention whose log differs from every other mention's."""
    return f"```\n{LOG}\n# bench mention {n}\n```"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _run(service_url: str) -> None:
    logging.basicConfig(level=logging.WARNING, force=True)
    slack = SlackStandin()
    await slack.start()
    settings = BotSettings(
        bot_token=BOT_TOKEN, signing_secret=SECRET, service_url=service_url, slack_api_url=slack.base_url
    )
    backends = build_backends(settings)
    gateway = create_gateway(create_app(settings, backends), signing_secret=SECRET, max_body_bytes=2**21)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(gateway, host="127.0.0.1", port=port, log_level="warning", ws="none")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    rounds: list[dict[str, float]] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for number in range(ROUNDS):
            rounds.append(await _round(http, slack, first=number * 100_000))
    server.should_exit = True
    await task
    await backends.close()
    await slack.stop()
    print(f"bot: first reply says {str(slack.replies()[0].get('text', ''))[:60]!r}")
    print(
        f"bot: {ROUNDS} rounds of {REPLIES} idle and {ACKS} loaded distinct log mentions; min / median / max"
    )
    labels = {
        "idle_p50": "ack p50, idle bot (ms)",
        "idle_p99": "ack p99, idle bot (ms; target < 100)",
        "load_p50": "ack p50, under load (ms)",
        "load_p99": "ack p99, under load (ms; target < 100)",
        "reply_p50": "threaded reply p50 (ms; target < 1000)",
        "reply_p99": "threaded reply p99 (ms; target < 1000)",
        "loaded_over_idle": "ack p50 loaded / idle (x)",
        "reply_over_ack": "reply p50 / idle ack p50 (x)",
    }
    for key, label in labels.items():
        values = [r[key] for r in rounds]
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"  {label:42s} {low:8.1f} {mid:8.1f} {high:8.1f}")


async def _round(http: httpx.AsyncClient, slack: SlackStandin, first: int) -> dict[str, float]:
    """One round: REPLIES mentions one at a time (idle acks, reply times), then ACKS back to back."""
    replied = len(slack.replies())
    removed = len(slack.called("reactions.remove"))
    reply_times: list[float] = []
    idle_acks: list[float] = []
    for n in range(first, first + REPLIES):
        started = time.perf_counter()
        idle_acks.append(await _send(http, _event(n, _mention(n))))
        thread = f"1700000000.{n:06d}"
        await slack.wait_for(lambda t=thread: any(r.get("thread_ts") == t for r in slack.replies()))
        reply_times.append(time.perf_counter() - started)
    await slack.wait_for(lambda: len(slack.called("reactions.remove")) >= removed + REPLIES)
    loaded = range(first + 10_000, first + 10_000 + ACKS)
    acks = [await _send(http, _event(n, _mention(n))) for n in loaded]
    await slack.wait_for(lambda: len(slack.replies()) >= replied + REPLIES + ACKS, timeout_s=300)
    return {
        "idle_p50": _pct(idle_acks, 0.5),
        "idle_p99": _pct(idle_acks, 0.99),
        "load_p50": _pct(acks, 0.5),
        "load_p99": _pct(acks, 0.99),
        "reply_p50": _pct(reply_times, 0.5),
        "reply_p99": _pct(reply_times, 0.99),
        "loaded_over_idle": statistics.median(acks) / statistics.median(idle_acks),
        "reply_over_ack": statistics.median(reply_times) / statistics.median(idle_acks),
    }


def main() -> None:
    proc, url = _start_service()
    try:
        asyncio.run(_run(url))
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main()
