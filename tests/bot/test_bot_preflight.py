"""Pre-flight from Slack end to end: real slack-bolt against the Slack stand-in, the real service, a
real Redis registry, and the real agent reading a fake NVML (a recorded H100 with another tenant)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

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
from service.cli import main
from service.fixes.limits import STARTUP_MARGIN_GIB

COMMAND = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768"
NOTEBOOK_PID = 5117
CLI_TOKEN = "c0ffee" * 8  # the command line applies the agent's token rules (32 characters or more)


def _partly_used_h100() -> dict[str, object]:
    """The recorded H100 with only its notebook kernel left (the vLLM server on it stopped)."""
    spec = copy.deepcopy(load_fixture("h100_two_processes"))
    device = spec["devices"][0]
    device["processes"] = [p for p in device["processes"] if p["pid"] == NOTEBOOK_PID]
    memory = device["memory"]
    memory["used"] = sum(p["used"] for p in device["processes"])
    memory["free"] = memory["total"] - memory["reserved"] - memory["used"]
    return spec


class Host(NamedTuple):
    spec: dict[str, object]  # what the fake NVML reports
    url: str  # where its agent listens


StartHost = Callable[[str], Awaitable[Host]]


@pytest.fixture
async def start_gpu_07(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_client: aioredis.Redis, key_prefix: str
) -> AsyncIterator[StartHost]:
    """Factory: the real agent on gpu-07 with a given token, registered under this test's prefix."""
    stoppers: list[Callable[[], Awaitable[None]]] = []

    async def start(token: str) -> Host:
        spec = _partly_used_h100()
        monkeypatch.setattr(pynvml, "nvmlLib", FakeNvmlLib(spec))
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        proc = build_proc(tmp_path / "proc", spec["proc"])
        settings = AgentSettings(vllm_urls=(), proc_root=proc)
        identity = AgentIdentity(host="gpu-07", url="http://127.0.0.1", token=token)
        url, stop = await serve(create_app(settings, identity, registry_prefix=f"{key_prefix}unused:"))
        stoppers.append(stop)
        await register_agent(redis_client, key_prefix, "gpu-07", url)
        return Host(spec, url)

    yield start
    for stop in stoppers:
        await stop()


@pytest.fixture
async def gpu_07(start_gpu_07: StartHost) -> Host:
    """gpu-07's agent with the token the test bot sends."""
    return await start_gpu_07(AGENT_TOKEN)


async def test_will_it_start_on_a_partly_used_gpu_gives_the_startup_verdict_with_the_exact_utilization(
    start_bot, slack: SlackStandin, service_url: str, gpu_07: Host
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(f"will `{COMMAND}` start on gpu-07?"), event_id="EvPre1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    (reply,) = slack.replies()
    text = json.dumps(reply["blocks"], ensure_ascii=False)
    memory = gpu_07.spec["devices"][0]["memory"]  # type: ignore[index]
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
    start_bot, slack: SlackStandin, service_url: str, gpu_07: Host
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


async def test_the_command_line_asks_the_hosts_agent_and_exits_1_when_it_would_be_refused(
    start_gpu_07: StartHost,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu_07 = await start_gpu_07(CLI_TOKEN)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"gpu-07: {gpu_07.url}\n")
    monkeypatch.delenv("VRAMDOC_REDIS_URL", raising=False)
    monkeypatch.setenv("VRAMDOC_HOSTS_FILE", str(hosts))
    monkeypatch.setenv("VRAMDOC_AGENT_TOKEN", CLI_TOKEN)

    # the agent answers on this event loop, so the blocking command runs in a thread
    code = await asyncio.to_thread(main, ["preflight", COMMAND, "--host", "gpu-07", "--json"])

    answer = json.loads(capsys.readouterr().out)  # --json: standard output is the contract only
    assert code == 1 and answer["outcome"] == "refused" and answer["host"] == "gpu-07"
    assert answer["corrected_command"].startswith(f"{COMMAND} --gpu-memory-utilization 0.")


async def test_the_command_line_names_a_host_nobody_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("gpu-01: http://127.0.0.1:9\n")
    monkeypatch.delenv("VRAMDOC_REDIS_URL", raising=False)
    monkeypatch.setenv("VRAMDOC_HOSTS_FILE", str(hosts))

    code = await asyncio.to_thread(main, ["preflight", COMMAND, "--host", "gpu-99"])

    assert code == 2
    assert (
        capsys.readouterr().err
        == "vramdoc preflight: I don't know the host gpu-99 (no agent registered it).\n"
    )


HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
API_KEY = "sk-" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"


def _leaks(text: str) -> list[str]:
    """Runs of 8 secret characters that survived (the hostile suite's bound)."""
    return [s[i : i + 8] for s in (HF_TOKEN, API_KEY) for i in range(len(s) - 7) if s[i : i + 8] in text]


async def test_a_preflight_question_with_tokens_posts_and_stores_none_of_them(
    start_bot,
    slack: SlackStandin,
    service_url: str,
    gpu_07: Host,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    bot = await start_bot(service_url)
    command = f"{COMMAND} --hf-token {HF_TOKEN} --api-key {API_KEY}"

    await bot.event(mention(f"will `{command}` start on gpu-07?"), event_id="EvPreSecret")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    posted = json.dumps([slack.called(m) for m in ("chat.postMessage", "chat.update", "chat.postEphemeral")])
    assert "Refused at the startup check on gpu-07" in posted
    stored = [k async for k in redis_client.scan_iter(f"{key_prefix}*")]
    values = [await redis_client.dump(k) or b"" for k in stored]
    assert not _leaks(posted) and not _leaks(repr(stored)) and not _leaks(repr(values))


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("will `vllm serve --max-model-len 4096` start on gpu-07?", "names no model"),
        (f"will `{COMMAND} -tp 0` start on gpu-07?", "tensor_parallel_size must be positive"),
        (f"will `{COMMAND} --gpu-memory-utilization 7` start on gpu-07?", "gpu_memory_utilization"),
    ],
    ids=["no-model", "tp-0", "utilization-7"],
)
async def test_a_preflight_that_cannot_be_sized_is_one_sentence_in_the_thread(
    start_bot, slack: SlackStandin, service_url: str, gpu_07: Host, question: str, said: str
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(question), event_id=f"EvPreBad{abs(hash(question)) % 10**6}")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    (reply,) = slack.replies()
    text = json.dumps(reply, ensure_ascii=False)
    assert said in text and "Traceback" not in text and "cannot be sized on" not in text
