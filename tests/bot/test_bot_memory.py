"""Team memory end to end: real service, real Redis, real slack-bolt against the Slack stand-in."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from agent_standin import AgentStandin
from bot_loopback import closed_port_url, mention, register_agent
from slack_standin import BOT_USER, SlackStandin

from bot.memory import Sighting, TeamMemory, ThreadRef, memory_note, promote_fix
from bot.settings import SettingsError, load_settings
from service.core import diagnose, load_rules
from service.schemas import DiagnoseRequest

LOG = (Path(__file__).parent / "data" / "kv-capacity-qwen.log").read_text(encoding="utf-8")
PERMALINK_OF_FIRST = "https://standin.slack.com/archives/C0CHANNEL/p1700000000000001"


def _text(reply: dict[str, object]) -> str:
    return json.dumps(reply["blocks"], ensure_ascii=False)


async def _two_channels(bot: object, slack: SlackStandin, *, host: str = "") -> list[dict[str, object]]:
    """The same log mentioned in two channels, one after the other; both replies."""
    await bot.event(mention(f"{host}\n```\n{LOG}\n```"), event_id="Ev1")  # type: ignore[attr-defined]
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    second = mention(f"{host}\n```\n{LOG}\n```", ts="1700000500.000100", channel="C0OTHER")
    await bot.event(second, event_id="Ev2")  # type: ignore[attr-defined]
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 4)
    return slack.replies()


async def test_the_same_failure_in_a_second_channel_links_the_first_thread(
    start_bot,
    slack: SlackStandin,
    service_url: str,
    agent: AgentStandin,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(service_url)

    first, second = await _two_channels(bot, slack, host="on gpu-07")

    assert "Seen" not in _text(first)
    top = second["blocks"][0]["text"]["text"]  # type: ignore[index]
    assert top == f":repeat: Seen 2 times in 1 day (gpu-07) – first in <#C0CHANNEL>: <{PERMALINK_OF_FIRST}>"
    assert str(second["text"]).startswith(":repeat: Seen 2 times")
    assert [c["message_ts"] for c in slack.called("chat.getPermalink")] == [
        "1700000000.000001",
        "1700000000.000002",
    ]
    keys = [key async for key in redis_client.scan_iter(match=f"{key_prefix}memory:*")]
    # the fingerprint's hash, hosts, threads, the recent index, and one record per reply
    assert len(keys) == 6
    stored = ""
    for key in keys:
        stored += json.dumps(
            await redis_client.dump(key), default=lambda raw: raw.decode("utf-8", errors="replace")
        )
    assert "ValueError" not in stored and "KV cache" not in stored and "gpu_worker" not in stored


def _memory_keys(key_prefix: str) -> list[str]:
    print_ = diagnose(DiagnoseRequest(log=LOG), load_rules()).fingerprint
    assert print_ is not None
    base = f"{key_prefix}memory:fp:{print_.key}"
    return [base, f"{base}:threads"]


async def test_memory_is_kept_for_the_retention_and_no_longer(
    start_bot, slack: SlackStandin, service_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    bot = await start_bot(service_url, memory_retention_days=2)

    await _two_channels(bot, slack)

    for key in _memory_keys(key_prefix):
        ttl = await redis_client.ttl(key)
        assert 0 < ttl <= 2 * 86400


async def test_a_fix_marked_as_the_one_that_worked_is_ranked_first(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)
    diagnosis = diagnose(DiagnoseRequest(log=LOG), load_rules())
    print_ = diagnosis.fingerprint
    assert print_ is not None and len(diagnosis.fixes) >= 2
    worked = diagnosis.fixes[1]
    await bot.event(mention(f"```\n{LOG}\n```"), event_id="Ev1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    memory = bot.backends.memory
    assert isinstance(memory, TeamMemory)
    assert await memory.mark_fixed(print_.key, worked.id)

    await bot.event(mention(f"```\n{LOG}\n```", ts="1700000500.000100", channel="C0OTHER"), event_id="Ev2")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 4)

    second = slack.replies()[1]
    text = _text(second)
    assert f"*{worked.title}* fixed it before, so it is ranked first." in text
    assert text.index(f"```{worked.change}```") < text.index(f"```{diagnosis.fixes[0].change}```")


async def test_without_redis_the_bot_answers_as_before(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url, redis_url=None)
    assert bot.backends.memory is None

    first, second = await _two_channels(bot, slack)

    assert "Seen" not in _text(first) and "Seen" not in _text(second)
    assert "fix_worked" not in _text(first)  # no memory, no "This fixed it" button
    assert slack.called("chat.getPermalink") == []
    assert str(second["text"]).startswith("kv_cache_capacity: ")


async def test_an_unreachable_redis_never_stops_the_answer() -> None:
    memory = TeamMemory(aioredis.from_url(closed_port_url().replace("http://", "redis://")), key_prefix="t:")
    diagnosis = diagnose(DiagnoseRequest(log=LOG), load_rules())
    print_ = diagnosis.fingerprint
    assert print_ is not None
    await memory.record(print_, ThreadRef(channel="C1", ts="1.1"))
    assert await memory.recall(print_.key) is None
    assert await memory.mark_fixed(print_.key, "x") is False
    await memory.close()


def test_memory_line_counts_days_hosts_and_links_the_first_thread() -> None:
    sighting = Sighting(
        key="k",
        count=2,
        first_seen=0.0,
        last_seen=100.0,
        hosts=["gpu-07", "gpu-08"],
        first=ThreadRef(channel="C0INFRA", ts="1.2", permalink="https://x.slack.com/archives/C0INFRA/p12"),
    )
    note = memory_note(sighting, now=6.5 * 86400)
    assert note == (
        ":repeat: Seen 3 times in 7 days (gpu-07, gpu-08) – first in <#C0INFRA>: "
        "<https://x.slack.com/archives/C0INFRA/p12>"
    )
    assert memory_note(sighting, this_one=False, now=10.0).startswith(":repeat: Seen 2 times in 1 day")


def test_retention_setting_is_read_and_checked() -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
    assert load_settings(env).memory_retention_days == 30
    assert load_settings({**env, "VRAMDOC_MEMORY_RETENTION_DAYS": "7"}).memory_retention_days == 7
    with pytest.raises(SettingsError, match="VRAMDOC_MEMORY_RETENTION_DAYS"):
        load_settings({**env, "VRAMDOC_MEMORY_RETENTION_DAYS": "-1"})


def test_promote_fix_ranks_the_fix_that_worked_first() -> None:
    fixes = diagnose(DiagnoseRequest(log=LOG), load_rules()).fixes
    assert len(fixes) >= 2
    promoted = promote_fix(fixes, fixes[-1].id)
    assert [f.id for f in promoted] == [fixes[-1].id, *(f.id for f in fixes[:-1])]
    assert [f.rank for f in promoted] == list(range(1, len(fixes) + 1))
    assert promote_fix(fixes, "no-such-fix") is fixes


def _click(value: str, *, message_ts: str = "1700000000.000001") -> dict[str, object]:
    return {
        "type": "block_actions",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0FIXER", "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": "1.2.3",
        "channel": {"id": "C0CHANNEL", "name": "infra-llm"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": "C0CHANNEL"},
        "message": {"type": "message", "ts": message_ts, "thread_ts": "1700000000.000100", "text": "x"},
        "response_url": "https://hooks.slack.com/actions/T0001/1/abc",
        "actions": [
            {"action_id": "fix_worked", "block_id": "b", "type": "button", "value": value, "action_ts": "1"}
        ],
    }


def _thanks(slack: SlackStandin) -> list[dict[str, object]]:
    return [c for c in slack.called("chat.postMessage") if str(c.get("text", "")).startswith("Thanks")]


async def test_this_fixed_it_button_records_the_fix_and_thanks_once(
    start_bot, slack: SlackStandin, service_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    bot = await start_bot(service_url)
    await bot.event(mention(f"```\n{LOG}\n```"), event_id="Ev1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    buttons = [b["accessory"] for b in reply["blocks"] if "accessory" in b]  # type: ignore[union-attr]
    diagnosis = diagnose(DiagnoseRequest(log=LOG), load_rules())
    assert diagnosis.fingerprint is not None
    assert [b["action_id"] for b in buttons] == ["fix_worked"] * len(diagnosis.fixes[:3])
    worked = buttons[-1]["value"]
    assert worked == f"{diagnosis.fingerprint.key}|{diagnosis.fixes[len(buttons) - 1].id}"

    main_key = f"{key_prefix}memory:fp:{diagnosis.fingerprint.key}"
    await bot.interaction(_click(worked))
    await slack.wait_for(lambda: len(_thanks(slack)) == 1)
    assert await redis_client.hget(main_key, "fixed_by") == worked.partition("|")[2].encode()
    other = buttons[0]["value"]
    await bot.interaction(_click(other))  # a second click in the thread: the latest mark wins, no new thanks
    for _ in range(200):
        if await redis_client.hget(main_key, "fixed_by") == other.partition("|")[2].encode():
            break
        await asyncio.sleep(0.05)

    assert await redis_client.hget(main_key, "fixed_by") == other.partition("|")[2].encode()
    [thanks] = _thanks(slack)
    assert thanks["thread_ts"] == "1700000000.000100" and "<@U0FIXER>" in str(thanks["text"])


async def test_a_check_mark_reaction_on_the_answer_records_its_top_fix(
    start_bot, slack: SlackStandin, service_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    bot = await start_bot(service_url)
    await bot.event(mention(f"```\n{LOG}\n```"), event_id="Ev1")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    diagnosis = diagnose(DiagnoseRequest(log=LOG), load_rules())
    assert diagnosis.fingerprint is not None
    reaction = {
        "type": "reaction_added",
        "user": "U0FIXER",
        "reaction": "white_check_mark",
        "item": {"type": "message", "channel": "C0CHANNEL", "ts": "1700000000.000001"},
        "item_user": BOT_USER,
        "event_ts": "1700000900.000100",
    }
    on_someone_else = {
        **reaction,
        "item": {"type": "message", "channel": "C0CHANNEL", "ts": "1700000000.000100"},
    }

    await bot.event(on_someone_else, event_id="Ev2")
    await bot.event(reaction, event_id="Ev3")
    await slack.wait_for(lambda: len(_thanks(slack)) == 1)
    await bot.event({**reaction, "event_ts": "1700000901.000100"}, event_id="Ev4")

    fixed_by = await redis_client.hget(f"{key_prefix}memory:fp:{diagnosis.fingerprint.key}", "fixed_by")
    assert fixed_by == diagnosis.fixes[0].id.encode()
    await bot.event(mention(f"```\n{LOG}\n```", ts="1700000500.000100", channel="C0OTHER"), event_id="Ev5")
    await slack.wait_for(lambda: len(slack.replies()) >= 2 and len(slack.called("reactions.add")) >= 4)
    assert f"*{diagnosis.fixes[0].title}* fixed it before" in _text(slack.replies()[-1])
    assert len(_thanks(slack)) == 1


def _slash(text: str) -> dict[str, str]:
    return {
        "token": "legacy",
        "team_id": "T0001",
        "channel_id": "C0CHANNEL",
        "user_id": "U0PERSON",
        "command": "/vramdoc",
        "text": text,
        "response_url": "https://hooks.slack.com/commands/T0001/1/abc",
        "trigger_id": "1.2.3",
        "api_app_id": "A0001",
    }


async def test_slash_recent_lists_the_most_frequent_failures_with_hosts_and_fix(
    start_bot,
    slack: SlackStandin,
    service_url: str,
    agent: AgentStandin,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(service_url)
    assert (await bot.form(_slash("recent"))).text == "No failures were recorded in the last 7 days."
    await _two_channels(bot, slack, host="on gpu-07")
    diagnosis = diagnose(DiagnoseRequest(log=LOG), load_rules())
    memory = bot.backends.memory
    assert isinstance(memory, TeamMemory)
    keys = [k async for k in redis_client.scan_iter(match=f"{key_prefix}memory:fp:*:hosts")]
    [key] = [k.decode().split(":fp:")[1].removesuffix(":hosts") for k in keys]
    assert await memory.mark_fixed(key, diagnosis.fixes[0].id)

    response = await bot.form(_slash("recent 30"))

    text = response.text
    assert text.startswith("*Most frequent failures, last 30 days*")
    assert "*kv_cache_capacity* (qwen/qwen2.5-0.5b-instruct" in text
    assert "2 times on gpu-07, first in <#C0CHANNEL>" in text
    assert f"fixed by `{diagnosis.fixes[0].id}`" in text


def _closed_port_redis_url() -> str:
    """A Redis address nothing listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return f"redis://127.0.0.1:{port}/0"


async def test_slash_recent_says_redis_does_not_answer_rather_than_claiming_no_failures(
    start_bot, service_url: str
) -> None:
    bot = await start_bot(service_url, redis_url=_closed_port_redis_url())

    response = await bot.form(_slash("recent"))

    assert response.status_code == 200
    assert (
        response.text == "Team memory's Redis does not answer right now; try `/vramdoc recent` again shortly."
    )
