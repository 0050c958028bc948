"""End to end over loopback: signed Slack events into the bot, Web API calls out to the stand-in.

Real slack-bolt, real signatures, real Redis, agents over HTTP; only Slack itself is a stand-in.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import redis.asyncio as aioredis
from agent_standin import AgentStandin
from bot_loopback import closed_port_url, mention, register_agent
from slack_standin import SlackStandin

from bot.blocks import Message, limit_violations

OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 1.2 GiB free."


def _text_of(reply: dict[str, object]) -> str:
    return json.dumps(reply.get("blocks")) + str(reply.get("text"))


def _check_limits(reply: dict[str, object]) -> None:
    blocks = reply["blocks"]
    assert isinstance(blocks, list)
    assert limit_violations(Message(text=str(reply["text"]), blocks=blocks)) == []


async def test_host_mention_replies_in_thread_with_snapshot_table(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())

    response = await bot.event(mention("how is gpu-07 doing?"))

    assert response.status_code == 200
    await slack.wait_for(
        lambda: bool(slack.called("reactions.remove")) and len(slack.called("reactions.add")) == 2
    )
    [reply] = slack.replies()
    assert reply["thread_ts"] == "1700000000.000100"
    assert reply["channel"] == "C0CHANNEL"
    text = _text_of(reply)
    assert "H100 80GB HBM3" in text and "pid 4121" in text and "71.3 GiB" in text
    assert "recheck_host" in text
    _check_limits(reply)
    reactions = [(c["name"]) for c in slack.called("reactions.add")]
    assert reactions == ["hourglass_flowing_sand", "white_check_mark"]
    assert agent.requests == ["Bearer agent-standin-token-0123456789"]


async def test_unknown_host_is_named_but_the_registered_hosts_are_not_listed(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    """Replaces the test that expected every unknown-host reply to list the fleet: any Slack user
    could read every registered host name that way (issue 14); listing is now `hosts`, per channel."""
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())

    await bot.event(mention("check gpu-99"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert "I don't know the host gpu-99" in reply["text"]
    assert "gpu-07" not in _text_of(reply)
    assert slack.called("reactions.add")[-1]["name"] == "x"
    assert agent.requests == []


async def test_an_unfenced_token_is_never_named_back_as_a_host(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    bot = await start_bot(closed_port_url())
    token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sIgNaTuRe0123"
    words = " ".join(f"node{i}x" for i in range(12))

    await bot.event(mention(f"check {token} on gpu-99 {words} Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    text = _text_of(slack.replies()[0]).lower()
    assert "eyjhbgci" not in text and "zm9vymfy" not in text
    assert "and 2 more" in text  # five host-shaped words taken, three named
    assert sum(f"node{i}x" in text for i in range(12)) <= 3


async def test_hosts_are_listed_only_where_the_operator_allows_it(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    closed = await start_bot(closed_port_url())
    await closed.event(mention("hosts"))
    await slack.wait_for(lambda: len(slack.replies()) == 1)
    assert "turned off in this channel" in slack.replies()[0]["text"]
    assert "gpu-07" not in _text_of(slack.replies()[0])

    admin = await start_bot(closed_port_url(), list_hosts_in=("C0CHANNEL",))
    await admin.event(mention("list hosts", ts="1700000000.000200"), event_id="Ev0002")
    await slack.wait_for(lambda: len(slack.replies()) == 2)
    assert "gpu-07" in _text_of(slack.replies()[1])


async def test_typed_url_is_never_contacted(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    typed = agent.url.removeprefix("http://")

    await bot.event(mention(f"check <http://{typed}|{typed}>"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    assert agent.requests == []


async def test_silent_agent_is_named_as_not_answering_within_the_timeout(
    start_bot, slack: SlackStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    slow = AgentStandin(host="gpu-08", delay_s=5.0)
    await slow.start()
    try:
        await register_agent(redis_client, key_prefix, "gpu-08", slow.url)
        bot = await start_bot(closed_port_url(), agent_timeout_s=0.3)
        await bot.event(mention("gpu-08"))
        await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    finally:
        await slow.stop()
    [reply] = slack.replies()
    assert "gpu-08 did not answer within 0.3 s" in _text_of(reply)


async def test_hosts_from_the_hosts_file_are_found(
    start_bot, slack: SlackStandin, agent: AgentStandin, tmp_path
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"gpu-07: {agent.url}\n", encoding="utf-8")
    bot = await start_bot(closed_port_url(), hosts_file=hosts)

    await bot.event(mention("on gpu-07"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    assert "H100 80GB HBM3" in _text_of(slack.replies()[0])


async def test_slack_retry_of_the_same_event_gets_exactly_one_reply(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())

    first = await bot.event(mention("gpu-07"), event_id="EvRETRY")
    second = await bot.event(mention("gpu-07"), event_id="EvRETRY", retry=1)
    third = await bot.event(mention("gpu-07"), event_id="EvRETRY", retry=2)

    assert [first.status_code, second.status_code, third.status_code] == [200, 200, 200]
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    other = await bot.event(mention("gpu-07", ts="1700000000.000200"), event_id="EvOTHER")
    assert other.status_code == 200
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 4)
    assert [r["thread_ts"] for r in slack.replies()] == ["1700000000.000100", "1700000000.000200"]


async def test_forged_signature_gets_401_and_no_reply(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url())
    body = json.dumps({"type": "event_callback", "event_id": "EvF", "event": mention("gpu-07")}).encode()

    forged = await bot.send(body, secret="not-the-signing-secret")
    stale = await bot.send(body, timestamp=int(time.time()) - 6 * 60)
    unsigned = await bot.http.post(
        "/slack/events", content=body, headers={"Content-Type": "application/json"}
    )

    assert [forged.status_code, stale.status_code, unsigned.status_code] == [401, 401, 401]
    assert slack.calls == []


async def test_malformed_body_with_a_valid_signature_gets_400_not_500(start_bot, slack: SlackStandin) -> None:
    """A body that is not UTF-8 cannot be verified (Slack signs text), so it is now refused 401
    before it is read as anything; every other malformed signed body is a logged 400."""
    bot = await start_bot(closed_port_url())

    broken_json = await bot.send(b'{"type": "event_callback", "event": ')
    not_object = await bot.send(b"[1, 2, 3]", content_type="application/json")
    broken_payload = await bot.send(b"payload=%7Bnot-json", content_type="application/x-www-form-urlencoded")
    binary = await bot.send(b"\xff\xfe\x00garbage")
    nested = await bot.send(b'{"type": "event_callback", "event": ' + b'{"a": ' * 50_000)

    assert [
        broken_json.status_code,
        not_object.status_code,
        broken_payload.status_code,
        binary.status_code,
        nested.status_code,
    ] == [
        400,
        400,
        400,
        401,
        400,
    ]
    assert slack.calls == []


async def test_a_replayed_slash_command_is_answered_once(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url())
    fields = {
        "command": "/vramdoc",
        "text": "help",
        "channel_id": "C0CHANNEL",
        "user_id": "U0PERSON",
        "team_id": "T0001",
        "response_url": slack.base_url + "response",
        "trigger_id": "1.2.3",
    }
    body = urlencode(fields).encode()
    now = int(time.time())
    first = await bot.send(body, content_type="application/x-www-form-urlencoded", timestamp=now)
    replay = await bot.send(body, content_type="application/x-www-form-urlencoded", timestamp=now)
    later = await bot.send(body, content_type="application/x-www-form-urlencoded", timestamp=now - 1)

    assert first.status_code == replay.status_code == later.status_code == 200
    assert "vramdoc" in first.text.lower()
    assert replay.content == b""  # acknowledged, not answered again
    assert "vramdoc" in later.text.lower()  # a new signed request (another timestamp) is answered


async def test_url_verification_challenge_is_answered(start_bot) -> None:
    bot = await start_bot(closed_port_url())

    response = await bot.send(
        json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"}).encode()
    )

    assert response.status_code == 200
    assert response.json() == {"challenge": "c-123"}


async def test_body_over_the_size_limit_gets_413(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url(), max_body_bytes=4096)

    response = await bot.send(json.dumps({"type": "event_callback", "pad": "x" * 8000}).encode())

    assert response.status_code == 413
    assert slack.calls == []


async def test_service_down_is_told_in_one_sentence(start_bot, slack: SlackStandin) -> None:
    down = closed_port_url()
    bot = await start_bot(down)

    await bot.event(
        mention("```\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n```")
    )

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert reply["text"] == f"The vramdoc service at {down} refused the connection; try again shortly."
    assert slack.called("reactions.add")[-1]["name"] == "x"


async def test_oversized_file_is_refused_in_one_sentence(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url(), max_file_bytes=1024)
    entry = slack.add_file("F0BIG", "vllm.log", b"INFO loading weights\n" * 200)

    await bot.event(mention("here is the log", files=[entry]))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert (
        reply["text"]
        == "The file vllm.log is 4.1 KiB; I read files up to 1.0 KiB, so upload the failing part."
    )
    assert slack.downloads == []


async def test_slack_429_is_retried_after_retry_after(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(closed_port_url())
    slack.rate_limited["chat.postMessage"] = 1

    await bot.event(mention("gpu-07"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    assert [c.method for c in slack.calls if c.method.startswith("chat.postMessage")] == [
        "chat.postMessage:429",
        "chat.postMessage",
    ]
    assert slack.called("reactions.add")[-1]["name"] == "white_check_mark"


async def test_message_without_anything_to_read_gets_a_hint(start_bot, slack: SlackStandin) -> None:
    bot = await start_bot(closed_port_url())

    await bot.event(mention("hello there"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    assert "I found no log, host name or sizing question" in slack.replies()[0]["text"]


async def test_redis_down_still_replies(
    start_bot, slack: SlackStandin, agent: AgentStandin, tmp_path
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"gpu-07: {agent.url}\n", encoding="utf-8")
    bot = await start_bot(
        closed_port_url(), redis_url=closed_port_url().replace("http", "redis"), hosts_file=hosts
    )

    await bot.event(mention("gpu-07"), event_id="EvDOWN")
    await bot.event(mention("gpu-07"), event_id="EvDOWN", retry=1)

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [reply] = slack.replies()
    assert "H100 80GB HBM3" in _text_of(reply)


async def test_follow_up_host_in_the_thread_combines_with_the_threads_log(
    start_bot, slack: SlackStandin, agent: AgentStandin, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    down = closed_port_url()
    bot = await start_bot(down)
    await bot.event(mention(f"```\n{OOM_LINE}\n```"), event_id="EvLOG")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)

    follow_up = mention("and on gpu-07?", ts="1700000000.000300", thread_ts="1700000000.000100")
    await bot.event(follow_up, event_id="EvFOLLOW")

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 4)
    first, second = slack.replies()
    assert second["thread_ts"] == "1700000000.000100"
    # the thread's log was sent to the service again (down here), now with gpu-07's snapshot fetched
    assert (
        second["text"]
        == first["text"]
        == f"The vramdoc service at {down} refused the connection; try again shortly."
    )
    assert len(agent.requests) == 1
    stored = await redis_client.get(f"{key_prefix}bot:thread:C0CHANNEL:1700000000.000100")
    assert stored is not None and b"gpu-07" in stored and b"Tried to allocate" in stored
