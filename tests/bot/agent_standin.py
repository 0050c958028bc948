"""A GPU-host agent stand-in: `GET /v1/snapshot` behind a bearer token, serving Snapshot JSON.

The snapshot mirrors what nvidia-ml-py reports on an H100 80GB HBM3 host running one vLLM server
(memory in GiB as the wire contract says); `delay_s` makes it slower than the bot's timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import msgspec
from aiohttp import web

from service.schemas import GpuInfo, GpuProcess, Snapshot, VllmServer

AGENT_TOKEN = "agent-standin-token-0123456789"


def h100_snapshot(host: str) -> Snapshot:
    """A busy H100 host: vLLM holds 71.3 GiB and a stray notebook 6.2 GiB."""
    return Snapshot(
        host=host,
        captured_at="2026-11-29T16:20:00Z",
        driver_version="550.90.07",
        cuda_version="12.4",
        gpus=[
            GpuInfo(
                index=0,
                uuid="GPU-5f1e2d3c-0000-1111-2222-333344445555",
                name="NVIDIA H100 80GB HBM3",
                total_gib=79.65,
                used_gib=77.9,
                free_gib=1.75,
                reserved_gib=0.5,
                utilization_pct=87,
                compute_capability="9.0",
                mig_mode=False,
                processes=[
                    GpuProcess(
                        pid=4121,
                        name="python3",
                        cmdline="python3 -m vllm.entrypoints.openai.api_server",
                        used_gib=71.3,
                        container="vllm-qwen",
                    ),
                    GpuProcess(pid=5230, name="python", cmdline="python -m ipykernel_launcher", used_gib=6.2),
                ],
                memory_api="v2",
            )
        ],
        vllm=[
            VllmServer(
                url="http://127.0.0.1:8000",
                model="Qwen/Qwen2.5-7B-Instruct",
                kv_cache_usage=0.93,
                requests_running=12,
                requests_waiting=4,
                preemptions_total=37,
                metrics_era="v1",
            )
        ],
        pids_resolvable=True,
    )


@dataclass
class AgentStandin:
    host: str
    delay_s: float = 0.0
    url: str = ""
    requests: list[str] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def _snapshot(self, request: web.Request) -> web.Response:
        self.requests.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != f"Bearer {AGENT_TOKEN}":
            return web.Response(status=401)
        await asyncio.sleep(self.delay_s)
        return web.Response(
            body=msgspec.json.encode(h100_snapshot(self.host)), content_type="application/json"
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/snapshot", self._snapshot)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
