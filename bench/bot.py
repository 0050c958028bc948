"""Slack bot latency over loopback: ack time of signed events, idle and under load, and time to reply.

Runs the real service (`vramdoc serve` in a subprocess, response cache off so every mention is
diagnosed), the bot's HTTP gateway (uvicorn, as `vramdoc bot --http` runs it) and the tests' stand-in
of Slack's Web API, all on 127.0.0.1. Every mention carries a distinct log (the same excerpt with a
numbered last line), so no reply is a cache hit. Idle acks are sent one at a time, each after the
previous mention's reply has landed; loaded acks are sent back to back while earlier mentions are
still being diagnosed and answered. Targets (issue 7): ack p99 < 100 ms; reply < 1 s for a log-only
mention. Prints numbers only.
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_service() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "VRAMDOC_REDIS_URL"}
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
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        reply_times: list[float] = []
        idle_acks: list[float] = []
        for n in range(REPLIES):
            started = time.perf_counter()
            idle_acks.append(await _send(http, _event(n, _mention(n))))
            thread = f"1700000000.{n:06d}"
            await slack.wait_for(lambda t=thread: any(r.get("thread_ts") == t for r in slack.replies()))
            reply_times.append(time.perf_counter() - started)
        await slack.wait_for(lambda: len(slack.called("reactions.remove")) >= REPLIES)
        acks = [await _send(http, _event(10_000 + n, _mention(10_000 + n))) for n in range(ACKS)]
        await slack.wait_for(lambda: len(slack.replies()) >= REPLIES + ACKS, timeout_s=300)
    server.should_exit = True
    await task
    await backends.close()
    await slack.stop()
    print(f"bot: first reply says {str(slack.replies()[0].get('text', ''))[:60]!r}")
    print(
        f"bot: ack latency, idle bot, over {REPLIES} distinct log mentions: "
        f"p50 {_pct(idle_acks, 0.5):.1f} ms, "
        f"p99 {_pct(idle_acks, 0.99):.1f} ms (target p99 < 100 ms)"
    )
    print(
        f"bot: ack latency under load, {ACKS} distinct log mentions back to back: "
        f"p50 {_pct(acks, 0.5):.1f} ms, "
        f"p99 {_pct(acks, 0.99):.1f} ms (target p99 < 100 ms); loaded/idle p50 "
        f"{statistics.median(acks) / statistics.median(idle_acks):.1f}x"
    )
    print(
        f"bot: time to threaded reply over {REPLIES} log mentions: p50 {_pct(reply_times, 0.5):.0f} ms, "
        f"p99 {_pct(reply_times, 0.99):.0f} ms, max {max(reply_times) * 1000:.0f} ms (target < 1000 ms)"
    )
    print(
        f"bot: reply/idle-ack p50 ratio {statistics.median(reply_times) / statistics.median(idle_acks):.1f}x"
    )


def main() -> None:
    proc, url = _start_service()
    try:
        asyncio.run(_run(url))
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main()
