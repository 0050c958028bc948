"""Service and agent HTTP clients: answers decoded, every failure one sentence."""

from __future__ import annotations

import asyncio
import time

import msgspec
from agent_standin import AgentStandin, h100_snapshot
from aiohttp import web
from bot_loopback import closed_port_url

from bot.clients import AgentClient, HostFailure, ServiceClient, ServiceError
from service.schemas import DiagnoseRequest, EstimateRequest, Snapshot


async def _serve(handler: web.Handler) -> tuple[str, web.AppRunner]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://127.0.0.1:{port}", runner


async def test_agent_snapshot_is_fetched_with_the_token(agent: AgentStandin) -> None:
    client = AgentClient("agent-standin-token-0123456789")
    result = await client.snapshot("gpu-07", agent.url)
    await client.close()
    assert result == h100_snapshot("gpu-07")


async def test_wrong_agent_token_is_named() -> None:
    agent = AgentStandin(host="gpu-07")
    await agent.start()
    client = AgentClient("wrong")
    result = await client.snapshot("gpu-07", agent.url)
    await client.close()
    await agent.stop()
    assert result == HostFailure("gpu-07", "gpu-07 refused the bot's agent token (HTTP 401)")


async def test_hosts_are_fetched_concurrently_and_a_slow_one_only_costs_the_timeout() -> None:
    slow = [AgentStandin(host=f"gpu-0{i}", delay_s=3.0) for i in range(3)]
    for agent in slow:
        await agent.start()
    client = AgentClient("agent-standin-token-0123456789", timeout_s=0.3)
    started = time.monotonic()
    results = await client.snapshots({a.host: a.url for a in slow} | {"gpu-09": closed_port_url()})
    elapsed = time.monotonic() - started
    await client.close()
    for agent in slow:
        await agent.stop()
    assert [r.reason for r in results if isinstance(r, HostFailure)] == [
        "gpu-00 did not answer within 0.3 s",
        "gpu-01 did not answer within 0.3 s",
        "gpu-02 did not answer within 0.3 s",
        "gpu-09 refused the connection",
    ]
    assert elapsed < 3.0 * 3  # concurrent: far less than three sequential timeouts of the slow agents


async def test_problem_detail_is_shown_as_is() -> None:
    async def problem(request: web.Request) -> web.Response:
        body = {
            "type": "unknown-model",
            "title": "Unknown model",
            "status": 422,
            "detail": "The model 'x' is not in the catalog.",
        }
        return web.json_response(body, status=422, content_type="application/problem+json")

    url, runner = await _serve(problem)
    client = ServiceClient(url)
    try:
        await client.diagnose(DiagnoseRequest(log="x"))
        raise AssertionError("expected ServiceError")
    except ServiceError as exc:
        assert str(exc) == "The model 'x' is not in the catalog."
    await client.close()
    await runner.cleanup()


async def test_service_garbage_and_timeouts_are_sentences() -> None:
    async def garbage(request: web.Request) -> web.Response:
        if request.path == "/v1/estimate":
            await asyncio.sleep(2)
        return web.Response(text="<html>oops</html>", status=502 if request.query.get("x") else 200)

    url, runner = await _serve(garbage)
    client = ServiceClient(url, timeout_s=0.3)
    errors = []
    for call in (
        client.diagnose(DiagnoseRequest(log="x")),
        client.estimate(EstimateRequest(model="x")),
    ):
        try:
            await call
        except ServiceError as exc:
            errors.append(str(exc))
    await client.close()
    await runner.cleanup()
    assert errors[0].startswith(f"The vramdoc service at {url} sent an answer this bot cannot read")
    assert errors[1] == f"The vramdoc service at {url} did not answer within 0.3 s; try again shortly."


def test_snapshot_type_is_the_wire_contract() -> None:
    assert msgspec.json.decode(msgspec.json.encode(h100_snapshot("h")), type=Snapshot).host == "h"
