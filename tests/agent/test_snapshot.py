"""Snapshot assembly: GPUs from NVML or dcgm-exporter, plus vLLM servers, with every error kept."""

from __future__ import annotations

from service.agent.settings import AgentSettings
from service.agent.snapshot import collect_snapshot, gpu_summary

from .conftest import InstallNvml


async def test_snapshot_combines_nvml_and_vllm_and_keeps_both_errors(
    fake_nvml: InstallNvml, metrics_server: str
) -> None:
    _lib, procfs = fake_nvml("pid_not_visible")
    settings = AgentSettings(
        vllm_urls=(f"{metrics_server}/v1", f"{metrics_server}/broken"), proc_root=procfs.root
    )
    snapshot = await collect_snapshot(settings, "gpu-9")
    assert snapshot.host == "gpu-9" and snapshot.captured_at.endswith("Z")
    assert snapshot.pids_resolvable is False
    assert [g.name for g in snapshot.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert [s.model for s in snapshot.vllm] == ["Qwen/Qwen2.5-32B-Instruct"]
    assert [e.source for e in snapshot.errors] == ["proc", f"vllm:{metrics_server}/broken"]


async def test_dcgm_endpoint_replaces_nvml(fake_nvml: InstallNvml, metrics_server: str) -> None:
    lib, procfs = fake_nvml("h100_two_processes")
    settings = AgentSettings(vllm_urls=(), dcgm_url=f"{metrics_server}/dcgm", proc_root=procfs.root)
    snapshot = await collect_snapshot(settings, "gpu-dcgm")
    assert lib.calls == []  # NVML was not touched
    assert [(g.index, g.memory_api) for g in snapshot.gpus] == [(0, "dcgm"), (1, "dcgm")]
    assert snapshot.driver_version == "550.54.15"
    assert snapshot.pids_resolvable is None and snapshot.errors == []


async def test_gpu_summary_is_the_registry_short_form(fake_nvml: InstallNvml) -> None:
    _lib, procfs = fake_nvml("a100_mig")
    snapshot = await collect_snapshot(AgentSettings(vllm_urls=(), proc_root=procfs.root), "gpu-mig")
    [summary] = gpu_summary(snapshot.gpus)
    assert (summary.index, summary.name, summary.total_gib, summary.free_gib) == (
        0,
        "NVIDIA A100-SXM4-80GB",
        80.0,
        49.427,
    )
