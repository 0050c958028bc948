"""Service and agent HTTP clients: answers decoded, every failure one sentence."""

from __future__ import annotations

import asyncio

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


async def test_hosts_are_fetched_concurrently_and_a_slow_one_fails_alone(agent: AgentStandin) -> None:
    in_flight = {"now": 0, "most": 0}
    all_waiting = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        if in_flight["most"] == 3:
            all_waiting.set()
        await asyncio.sleep(5)
        return web.Response(status=200)

    servers = [await _serve(slow) for _ in range(3)]
    client = AgentClient("agent-standin-token-0123456789", timeout_s=0.5)
    hosts = {f"gpu-0{i}": url for i, (url, _) in enumerate(servers)}
    results = await client.snapshots(hosts | {"gpu-07": agent.url, "gpu-09": closed_port_url()})
    await client.close()
    for _, runner in servers:
        await runner.cleanup()
    assert all_waiting.is_set()  # the three slow hosts were asked at the same time
    assert [r.reason if isinstance(r, HostFailure) else r.host for r in results] == [
        "gpu-00 did not answer within 0.5 s",
        "gpu-01 did not answer within 0.5 s",
        "gpu-02 did not answer within 0.5 s",
        "gpu-07",
        "gpu-09 refused the connection",
    ]


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
