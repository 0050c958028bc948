"""Pre-flight from Slack end to end: real slack-bolt against the Slack stand-in, the real service, a
real Redis registry, and the real agent reading a fake NVML (a recorded H100 with another tenant)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pynvml
import pytest
import redis.asyncio as aioredis
from agent.fake_nvml import FakeNvmlLib, build_proc, load_fixture
from agent_standin import AGENT_TOKEN
from bot_loopback import mention, register_agent, serve
from slack_standin import SlackStandin

from service.agent.app import AgentIdentity, create_app
from service.agent.settings import AgentSettings
from service.budget import GIB, max_passing_utilization
from service.fixes.limits import STARTUP_MARGIN_GIB

COMMAND = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768"
NOTEBOOK_PID = 5117


def _partly_used_h100() -> dict[str, object]:
    """The recorded H100 with only its notebook kernel left (the vLLM server on it stopped)."""
    spec = copy.deepcopy(load_fixture("h100_two_processes"))
    device = spec["devices"][0]
    device["processes"] = [p for p in device["processes"] if p["pid"] == NOTEBOOK_PID]
    memory = device["memory"]
    memory["used"] = sum(p["used"] for p in device["processes"])
    memory["free"] = memory["total"] - memory["reserved"] - memory["used"]
    return spec


@pytest.fixture
async def gpu_07(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_client: aioredis.Redis, key_prefix: str
) -> AsyncIterator[dict[str, object]]:
    """The real agent on gpu-07, registered in the registry under this test's prefix."""
    spec = _partly_used_h100()
    monkeypatch.setattr(pynvml, "nvmlLib", FakeNvmlLib(spec))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    proc = build_proc(tmp_path / "proc", spec["proc"])
    settings = AgentSettings(vllm_urls=(), proc_root=proc)
    identity = AgentIdentity(host="gpu-07", url="http://127.0.0.1", token=AGENT_TOKEN)
    url, stop = await serve(create_app(settings, identity, registry_prefix=f"{key_prefix}unused:"))
    await register_agent(redis_client, key_prefix, "gpu-07", url)
    yield spec
    await stop()


async def test_will_it_start_on_a_partly_used_gpu_gives_the_startup_verdict_with_the_exact_utilization(
    start_bot, slack: SlackStandin, service_url: str, gpu_07: dict[str, object]
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(f"will `{COMMAND}` start on gpu-07?"), event_id="EvPre1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    (reply,) = slack.replies()
    text = json.dumps(reply["blocks"], ensure_ascii=False)
    memory = gpu_07["devices"][0]["memory"]  # type: ignore[index]
    free, total = int(memory["free"]), int(memory["total"])
    utilization = max_passing_utilization(free, total, margin_bytes=round(STARTUP_MARGIN_GIB * GIB))
    assert utilization is not None and 0.5 < utilization < 0.92
    assert "Refused at the startup check on gpu-07 (GPU 0)" in text
    assert f"refused at the startup check: {round(free / GIB, 2):g} GiB free < 0.92 × " in text
    assert f"use --gpu-memory-utilization {utilization:g}" in text
    assert f"{COMMAND} --gpu-memory-utilization {utilization:g}" in text
    assert f"PID {NOTEBOOK_PID}" in text
    assert "reports its version; give yours" in text


async def test_a_preflight_without_a_host_asks_for_one(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(f"will `{COMMAND}` start?"), event_id="EvPre2")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    assert "Name the host to check it on" in str(slack.replies()[0]["text"])


async def test_the_slash_command_runs_the_same_preflight_in_the_channel(
    start_bot, slack: SlackStandin, service_url: str, gpu_07: dict[str, object]
) -> None:
    bot = await start_bot(service_url)
    form = {
        "token": "x",
        "team_id": "T0001",
        "channel_id": "C0CHANNEL",
        "user_id": "U0PERSON",
        "command": "/vramdoc",
        "text": f"will `{COMMAND}` start on gpu-07?",
        "response_url": "https://hooks.slack.com/commands/T0001/1/abc",
        "trigger_id": "1.2.3",
        "api_app_id": "A0001",
    }

    assert (await bot.form(form)).status_code == 200
    await slack.wait_for(lambda: len(slack.replies()) == 1)

    assert "Refused at the startup check on gpu-07" in json.dumps(slack.replies()[0]["blocks"])
