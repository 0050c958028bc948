"""The NVML reader against the fake library, through the real nvidia-ml-py code paths."""

from __future__ import annotations

import pynvml
import pytest

from service.agent.nvml import cuda_version_text, read_nvml
from service.agent.procfs import ProcFs

from .conftest import InstallNvml
from .fake_nvml import FakeDevice


def test_h100_with_two_processes_reads_memory_processes_and_containers(fake_nvml: InstallNvml) -> None:
    lib, procfs = fake_nvml("h100_two_processes")
    reading = read_nvml(procfs)
    assert reading.errors == []
    assert (reading.driver_version, reading.cuda_version) == ("550.54.15", "12.4")
    assert reading.pids_resolvable is True
    [gpu] = reading.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-5ad0c4f6-2c1e-9d3b-7f41-0e8a6b2c9d17"
    assert (gpu.total_gib, gpu.reserved_gib, gpu.used_gib, gpu.free_gib) == (79.647, 0.538, 76.416, 2.693)
    assert gpu.memory_api == "v2"
    assert (gpu.utilization_pct, gpu.compute_capability, gpu.mig_mode) == (87, "9.0", False)
    vllm, kernel = gpu.processes
    assert (vllm.pid, vllm.name, vllm.used_gib) == (4242, "python3", 70.0)
    assert vllm.cmdline is not None and vllm.cmdline.startswith("/usr/bin/python3 -m vllm.entrypoints")
    assert vllm.container == "docker:3f4e8a1b9c2d"
    assert (kernel.pid, kernel.used_gib) == (5117, 6.0)
    assert kernel.container == "k8s-pod:8d0c7a4e-5b1f-4c2a-9e3d-6f7a8b9c0d1e/containerd:a1b2c3d4e5f6"
    assert lib.calls[0] == "nvmlInitWithFlags" and lib.calls[-1] == "nvmlShutdown"


def test_mig_mode_reads_instances_and_their_processes(fake_nvml: InstallNvml) -> None:
    lib, procfs = fake_nvml("a100_mig")
    reading = read_nvml(procfs)
    [gpu] = reading.gpus
    assert gpu.mig_mode is True
    assert [(m.index, m.name, m.total_gib, m.used_gib) for m in gpu.mig_instances] == [
        (0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 39.25, 30.0),
        (1, "NVIDIA A100-SXM4-80GB MIG 2g.20gb", 19.5, 0.013),
    ]
    assert gpu.mig_instances[0].uuid.startswith("MIG-")
    [process] = gpu.processes
    assert (process.pid, process.used_gib, process.name) == (7001, 29.5, "python3")
    assert process.container == "k8s-pod:8d0c7a4e-5b1f-4c2a-9e3d-6f7a8b9c0d1e/a1b2c3d4e5f6"
    # utilization is not supported in MIG mode; the refused parent process list is covered by the instances
    assert [(e.source, e.reason) for e in reading.errors] == [
        ("nvml:gpu0", "GPU utilization is not supported on this GPU or driver")
    ]
    assert gpu.utilization_pct is None
    assert lib.calls.count("nvmlDeviceGetMigDeviceHandleByIndex") == 7


def test_driver_without_v2_calls_falls_back_to_v1_memory_and_v2_processes(fake_nvml: InstallNvml) -> None:
    lib, procfs = fake_nvml("v100_v1_only_driver")
    reading = read_nvml(procfs)
    [gpu] = reading.gpus
    assert gpu.memory_api == "v1"
    assert gpu.reserved_gib is None
    assert gpu.used_gib == 22.746  # v1 counts the 258 MiB the driver reserves as used
    assert (gpu.mig_mode, gpu.compute_capability, reading.cuda_version) == (False, "7.0", "11.4")
    assert [p.pid for p in gpu.processes] == [3131]
    assert gpu.processes[0].container == "docker:3f4e8a1b9c2d"
    assert {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses_v2"} <= set(lib.calls)
    [error] = reading.errors
    assert error.source == "nvml:gpu0" and "reserved memory is unknown" in error.reason


def test_nvml_errors_become_entries_and_the_readable_gpu_is_kept(fake_nvml: InstallNvml) -> None:
    _lib, procfs = fake_nvml("nvml_errors")
    reading = read_nvml(procfs)
    assert [g.index for g in reading.gpus] == [1]
    assert reading.gpus[0].utilization_pct is None and reading.gpus[0].processes == []
    assert reading.cuda_version is None and reading.driver_version == "550.90.07"
    reasons = {(e.source, e.reason) for e in reading.errors}
    assert reasons == {
        ("nvml", "this driver's NVML has no function for the CUDA driver version (driver too old)"),
        ("nvml:gpu0", "the GPU fell off the bus or became inaccessible while reading GPU 0"),
        ("nvml:gpu1", "permission denied reading GPU utilization (NVML: Insufficient Permissions)"),
        ("nvml:gpu1", "the list of running processes is not supported on this GPU or driver"),
    }


def test_no_gpu_says_so(fake_nvml: InstallNvml) -> None:
    _lib, procfs = fake_nvml("no_gpu")
    reading = read_nvml(procfs)
    assert reading.gpus == []
    assert [(e.source, e.reason) for e in reading.errors] == [("nvml", "NVML found no GPU on this host")]


def test_driver_not_loaded_is_an_error_entry_not_a_crash(fake_nvml: InstallNvml) -> None:
    _lib, procfs = fake_nvml("driver_not_loaded")
    reading = read_nvml(procfs)
    assert reading.gpus == [] and reading.driver_version is None
    [error] = reading.errors
    assert error.reason == "the NVIDIA kernel driver is not loaded; no GPU could be read"


def test_missing_library_is_an_error_entry(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    def no_library(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    reading = read_nvml(ProcFs())
    assert reading.gpus == []
    [error] = reading.errors
    assert error.source == "nvml"
    assert error.reason.startswith("the NVML library libnvidia-ml.so.1 was not found")


def test_pid_outside_the_agents_namespace_is_reported_unresolvable(fake_nvml: InstallNvml) -> None:
    _lib, procfs = fake_nvml("pid_not_visible")
    reading = read_nvml(procfs)
    assert reading.pids_resolvable is False
    [process] = reading.gpus[0].processes
    assert (process.pid, process.name, process.cmdline, process.container) == (918273, None, None, None)
    assert process.used_gib == 70.5
    [error] = reading.errors
    assert error.source == "proc" and "not in the host PID namespace" in error.reason
    assert "hostPID: true" in error.reason


@pytest.mark.parametrize(("encoded", "text"), [(12040, "12.4"), (11080, "11.8"), (13000, "13.0")])
def test_cuda_version_decodes_nvml_encoding(encoded: int, text: str) -> None:
    assert cuda_version_text(encoded) == text


def test_an_unexpected_failure_on_one_gpu_keeps_the_others(fake_nvml: InstallNvml) -> None:
    lib, procfs = fake_nvml("h100_two_processes")
    lib.devices[0].spec["name"] = "NVIDIA H100 \udcff"  # the byte 0xff: pynvml's str conversion fails
    lib.devices.append(FakeDevice(dict(lib.devices[0].spec, name="NVIDIA H100 80GB HBM3", uuid="GPU-second")))
    lib.handles[0x20000] = lib.devices[1]

    reading = read_nvml(procfs)
    assert [g.uuid for g in reading.gpus] == ["GPU-second"]
    [error] = reading.errors
    assert error.source == "nvml:gpu0"
    assert error.reason.startswith("GPU 0 could not be read: UnicodeDecodeError")


def test_privileged_mig_parent_list_is_merged_with_instances_without_duplicates(
    fake_nvml: InstallNvml,
) -> None:
    lib, procfs = fake_nvml("a100_mig")
    parent = lib.devices[0].spec
    del parent["errors"]["nvmlDeviceGetComputeRunningProcesses_v3"]
    parent["processes"] = lib.devices[0].mig[0].spec["processes"]  # the aggregate view holds the same PID
    reading = read_nvml(procfs)
    assert [p.pid for p in reading.gpus[0].processes] == [7001]
