"""End to end with the real service: log mentions, log plus host, sizing questions, problem details.

Expected phases and fixes are read from the service itself for the same input, so these tests prove
the bot carries the service's answer faithfully into Slack, not what the answer should be.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import msgspec
import redis.asyncio as aioredis
from agent_standin import AgentStandin, h100_snapshot
from bot_loopback import mention, register_agent
from slack_standin import SlackStandin

from bot.blocks import Message, limit_violations
from service.schemas import Budget, DiagnoseRequest, Diagnosis, EstimateRequest
from tests.diagnosis.test_redact import _PLANTED, WRAP_WIDTHS, _pasted_log, hard_wrap, leaked

LOG = (Path(__file__).parent / "data" / "kv-capacity-qwen.log").read_text(encoding="utf-8")


async def _diagnosis(service_url: str, request: DiagnoseRequest) -> Diagnosis:
    async with httpx.AsyncClient(base_url=service_url) as http:
        response = await http.post(
            "/v1/diagnose",
            content=msgspec.json.encode(request),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=Diagnosis)


def _blocks_text(reply: dict[str, object]) -> str:
    return json.dumps(reply["blocks"], ensure_ascii=False)


async def test_log_mention_gets_a_threaded_reply_with_the_phase_and_fixes(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(f"our server dies at startup:\n```\n{LOG}\n```"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    expected = await _diagnosis(service_url, DiagnoseRequest(log=LOG))
    assert expected.phase == "kv_cache_capacity"
    [reply] = slack.replies()
    assert reply["thread_ts"] == "1700000000.000100"
    assert str(reply["text"]).startswith("kv_cache_capacity: ")
    text = _blocks_text(reply)
    assert "estimated maximum model length is 1344" in text
    for fix in expected.fixes[:3]:
        assert f"```{fix.change}```" in text
    assert expected.rules_version[:19] in text
    assert limit_violations(Message(text=str(reply["text"]), blocks=reply["blocks"])) == []  # type: ignore[arg-type]
    assert [c["name"] for c in slack.called("reactions.add")] == [
        "hourglass_flowing_sand",
        "white_check_mark",
    ]


BARE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.58 GiB of which 1.12 GiB is free."
)


async def test_the_persons_words_around_a_fenced_paste_reach_the_service_and_place_it(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention(f"it crashes while loading the weights:\n```\n{BARE_OOM}\n```"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    bare = await _diagnosis(service_url, DiagnoseRequest(log=BARE_OOM))
    [reply] = slack.replies()
    assert bare.phase != "weights_oom"  # the line alone does not say when it happened
    assert str(reply["text"]).startswith("weights_oom: ")


async def test_log_with_a_host_sends_the_snapshot_into_the_diagnosis(
    start_bot,
    slack: SlackStandin,
    service_url: str,
    agent: AgentStandin,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    await register_agent(redis_client, key_prefix, "gpu-07", agent.url)
    bot = await start_bot(service_url)

    await bot.event(mention(f"on gpu-07:\n```\n{LOG}\n```"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    expected = await _diagnosis(service_url, DiagnoseRequest(log=LOG, snapshot=h100_snapshot("gpu-07")))
    [reply] = slack.replies()
    text = _blocks_text(reply)
    assert expected.phase in str(reply["text"])
    assert "H100 80GB HBM3" in text and "pid 5230" in text
    for fix in expected.fixes[:3]:
        assert f"```{fix.change}```" in text
    assert "recheck_host" in text
    assert len(agent.requests) == 1


async def test_sizing_question_gets_the_budget(start_bot, slack: SlackStandin, service_url: str) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention("will Llama-3.1-70B fit on 2×A100-80GB at 32k?"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    async with httpx.AsyncClient(base_url=service_url) as http:
        request = EstimateRequest(model="Llama-3.1-70B", gpu="A100-80GB", gpus=2, max_model_len=32768)
        response = await http.post("/v1/estimate", content=msgspec.json.encode(request))
    budget = msgspec.json.decode(response.content, type=Budget)
    [reply] = slack.replies()
    assert reply["text"] == ("Fits: " if budget.fits else "Does not fit: ") + budget.verdict
    assert "KV cache" in _blocks_text(reply)


async def test_service_problem_detail_is_shown_as_is(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)

    await bot.event(mention("estimate no-such-model-zz9 on L4"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    async with httpx.AsyncClient(base_url=service_url) as http:
        response = await http.post(
            "/v1/estimate", content=msgspec.json.encode(EstimateRequest(model="no-such-model-zz9", gpu="L4"))
        )
    detail = response.json()["detail"]
    assert response.status_code == 422
    [reply] = slack.replies()
    assert reply["text"] == detail
    assert slack.called("reactions.add")[-1]["name"] == "x"


async def test_secrets_in_a_pasted_log_are_not_echoed(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)
    secret = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456"
    log = LOG.replace("INFO 11-29 10:00:01", f"INFO 11-29 10:00:01 HF_TOKEN={secret}", 1)

    await bot.event(mention(f"```\n{log}\n```"))

    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    everything = json.dumps([c.args for c in slack.calls]) + repr(list(slack.uploads.values()))
    assert secret not in everything


async def test_show_all_fixes_rebuilds_the_answer_in_place_with_every_fix(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)
    await bot.event(mention(f"```\n{LOG}\n```"))
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    expected = await _diagnosis(service_url, DiagnoseRequest(log=LOG))
    posted_ts = "1700000000.000001"
    payload = {
        "type": "block_actions",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0PERSON", "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": "1.2.3",
        "channel": {"id": "C0CHANNEL", "name": "ops"},
        "container": {"type": "message", "message_ts": posted_ts, "channel_id": "C0CHANNEL"},
        "message": {"type": "message", "ts": posted_ts, "thread_ts": "1700000000.000100", "text": "x"},
        "response_url": "https://hooks.slack.com/actions/T0001/1/abc",
        "actions": [
            {
                "action_id": "show_all_fixes",
                "block_id": "b",
                "type": "button",
                "value": "all",
                "action_ts": "1",
            }
        ],
    }

    response = await bot.interaction(payload)

    assert response.status_code == 200
    await slack.wait_for(lambda: bool(slack.called("chat.update")))
    [update] = slack.called("chat.update")
    assert update["ts"] == posted_ts
    text = _blocks_text(update)
    assert "show_all_fixes" not in text
    for fix in expected.fixes[:20]:
        assert f"```{fix.change}```" in text
    assert str(update["text"]).startswith(f"{expected.phase}: ")


async def test_show_all_fixes_after_the_thread_is_forgotten_says_so(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)
    payload = {
        "type": "block_actions",
        "team": {"id": "T0001", "domain": "standin"},
        "user": {"id": "U0PERSON", "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": "1.2.3",
        "channel": {"id": "C0CHANNEL", "name": "ops"},
        "container": {"type": "message", "message_ts": "1700000000.000009", "channel_id": "C0CHANNEL"},
        "message": {
            "type": "message",
            "ts": "1700000000.000009",
            "thread_ts": "1600000000.000001",
            "text": "x",
        },
        "actions": [
            {
                "action_id": "show_all_fixes",
                "block_id": "b",
                "type": "button",
                "value": "all",
                "action_ts": "1",
            }
        ],
    }

    await bot.interaction(payload)

    await slack.wait_for(lambda: bool(slack.replies()))
    [reply] = slack.replies()
    assert reply["text"] == "I no longer remember this thread's log; paste it again and I will answer anew."
    assert reply["thread_ts"] == "1600000000.000001"
    assert slack.called("chat.update") == []


async def test_no_wrapped_secret_reaches_slack_in_any_web_api_call(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    bot = await start_bot(service_url)
    hint = f"vllm serve m --hf-token {_PLANTED['hf']} --api-key {_PLANTED['apikey']}"
    for n, width in enumerate(WRAP_WIDTHS, start=1):
        log = hard_wrap(_pasted_log(_PLANTED), width)
        ts = f"1700000{n:03d}.000100"
        await bot.event(mention(f"{hint}\n```\n{log}\n```", ts=ts), event_id=f"EvWrap{n}")
        await slack.wait_for(lambda n=n: len(slack.called("reactions.add")) >= 2 * n, timeout_s=60)
    everything = json.dumps([c.args for c in slack.calls]) + repr(list(slack.uploads.values()))
    assert len(slack.replies()) >= len(WRAP_WIDTHS)
    for name, secret in _PLANTED.items():
        assert not leaked(secret, everything), name


async def _budget(service_url: str, request: EstimateRequest) -> Budget:
    async with httpx.AsyncClient(base_url=service_url) as http:
        response = await http.post("/v1/estimate", content=msgspec.json.encode(request))
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=Budget)


async def test_a_sizing_answer_that_depends_on_the_release_asks_for_the_version_and_takes_the_reply(
    start_bot, slack: SlackStandin, service_url: str
) -> None:
    # a length between what the newest release and the older default hold, read from the service
    newest = await _budget(
        service_url, EstimateRequest(model="Llama-3.1-8B", gpu="RTX-4090", vllm_version="0.33.0")
    )
    older = await _budget(
        service_url, EstimateRequest(model="Llama-3.1-8B", gpu="RTX-4090", vllm_version="0.19.1")
    )
    length = (newest.max_model_len_fit + older.max_model_len_fit) // 2
    bot = await start_bot(service_url)

    await bot.event(mention(f"will Llama-3.1-8B fit on RTX-4090 at {length}?"), event_id="EvSIZE")
    await slack.wait_for(lambda: len(slack.called("reactions.add")) == 2)
    [question] = slack.replies()
    assert "Which vLLM version runs this?" in _blocks_text(question)

    reply = mention("vllm 0.19.1", ts="1700000000.000300", thread_ts="1700000000.000100")
    await bot.event(reply, event_id="EvVERSION")
    await slack.wait_for(lambda: len(slack.replies()) == 2)
    answer = slack.replies()[1]
    on_older = await _budget(
        service_url,
        EstimateRequest(model="Llama-3.1-8B", gpu="RTX-4090", max_model_len=length, vllm_version="0.19.1"),
    )
    assert answer["thread_ts"] == "1700000000.000100"
    assert answer["text"] == ("Fits: " if on_older.fits else "Does not fit: ") + on_older.verdict
    assert "Which vLLM version" not in _blocks_text(answer)
