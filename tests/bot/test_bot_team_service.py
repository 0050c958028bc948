"""The bot and the service share one Redis: what the bot records in team memory, the service lists at
`GET /v1/fingerprints`; a log pasted in Slack that states its profile is a calibration sample at
`GET /v1/calibration`. Real slack-bolt, the Slack stand-in, the real service, a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from bot_loopback import mention, serve
from slack_standin import SlackStandin

from service.api.app import create_app
from service.api.settings import Settings

HERE = Path(__file__).resolve().parent
KV_LOG = (HERE / "data" / "kv-capacity-qwen.log").read_text(encoding="utf-8")
PROFILE_LOG = (HERE.parent / "healthy" / "v0.6.4-v0-llama8b-3090-35k-ok.log").read_text(encoding="utf-8")


@pytest.fixture
async def team_service(redis_url: str, key_prefix: str) -> AsyncIterator[str]:
    """The service on the bot's Redis and key prefix (team memory and calibration on)."""
    settings = Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":"))
    url, stop = await serve(create_app(settings))
    yield url
    await stop()


async def test_what_the_bot_remembers_the_service_lists_as_a_recurring_failure(
    start_bot, slack: SlackStandin, team_service: str
) -> None:
    bot = await start_bot(team_service)
    await bot.event(mention(f"```\n{KV_LOG}\n```"), event_id="Ev1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    await bot.event(mention(f"```\n{KV_LOG}\n```", ts="1700000500.000100", channel="C0OTHER"), event_id="Ev2")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 4)

    async with httpx.AsyncClient(base_url=team_service) as api:
        body = (await api.get("/v1/fingerprints", params={"days": 7})).json()

    (row,) = body["failures"]
    assert row["fingerprint"]["phase"] == "kv_cache_capacity"
    assert row["sighting"]["count"] == 2 and row["sighting"]["first"]["channel"] == "C0CHANNEL"


async def test_a_pasted_log_that_states_its_profile_becomes_a_calibration_sample(
    start_bot, slack: SlackStandin, team_service: str
) -> None:
    bot = await start_bot(team_service)

    await bot.event(mention(f"```\n{PROFILE_LOG}\n```"), event_id="EvCal")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    async with httpx.AsyncClient(base_url=team_service) as api:
        report = (await api.get("/v1/calibration")).json()
    (group,) = report["groups"]
    assert (group["family"], group["vllm_minor"], group["samples"]) == ("llama", "0.6", 1)
    # the log states weights, KV cache, non-torch memory (0.35GiB) and what graph capture took (0.85 GiB)
    assert set(group["figures"]) == {"weights_gib", "available_kv_gib", "non_torch_gib", "cuda_graph_gib"}
