"""Assembles one `Snapshot`: GPUs (NVML, or dcgm-exporter when configured) and local vLLM servers,
each with its model's config.json and safetensors totals read from this host's disk.

The parts are read concurrently; NVML blocks, so it runs in a worker thread. A part that cannot be
read adds entries to `errors[]` and the rest of the snapshot is still returned.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import UTC, datetime

from service.agent.metrics import scrape_dcgm, scrape_vllm_servers
from service.agent.models import with_model_files
from service.agent.nvml import NvmlReading, read_nvml
from service.agent.procfs import ProcFs
from service.agent.settings import AgentSettings
from service.models.local import hf_cache_dir
from service.schemas import GpuInfo, GpuSummary, Snapshot

__all__ = ["collect_snapshot", "gpu_summary", "read_gpus", "utc_now"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def read_gpus(settings: AgentSettings) -> NvmlReading:
    """The GPU part of a snapshot: dcgm-exporter when configured, else NVML in a worker thread."""
    if settings.dcgm_url is not None:
        dcgm = await scrape_dcgm(settings.dcgm_url, settings.scrape_timeout_s)
        return NvmlReading(driver_version=dcgm.driver_version, gpus=dcgm.gpus, errors=dcgm.errors)
    return await asyncio.to_thread(read_nvml, ProcFs(settings.proc_root))


async def collect_snapshot(settings: AgentSettings, host: str) -> Snapshot:
    """Everything this host's GPUs and vLLM servers say right now."""
    captured_at = utc_now()
    gpus, (servers, vllm_errors) = await asyncio.gather(
        read_gpus(settings), scrape_vllm_servers(settings.vllm_urls, settings.scrape_timeout_s)
    )
    servers, model_errors = await asyncio.to_thread(with_model_files, servers, gpus.gpus, _hf_cache())
    return Snapshot(
        host=host,
        captured_at=captured_at,
        driver_version=gpus.driver_version,
        cuda_version=gpus.cuda_version,
        gpus=gpus.gpus,
        vllm=servers,
        errors=gpus.errors + vllm_errors + model_errors,
        pids_resolvable=gpus.pids_resolvable,
    )


def _hf_cache() -> str | None:
    """The Hugging Face cache the host's vLLM servers download into (HF_HUB_CACHE / HF_HOME)."""
    return hf_cache_dir(os.environ)


def gpu_summary(gpus: Sequence[GpuInfo]) -> list[GpuSummary]:
    """The registry's short form of a host's GPUs."""
    return [GpuSummary(index=g.index, name=g.name, total_gib=g.total_gib, free_gib=g.free_gib) for g in gpus]
