"""Reads the GPUs through NVML (nvidia-ml-py): memory, utilization, MIG instances, processes.

Every part NVML cannot give becomes a `SnapshotError` naming the part and the reason; nothing here
raises for a missing library, an old driver, an unsupported query or a lost GPU. NVML calls block
and share global library state, so readings are serialized by a lock and callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from service.agent.procfs import ProcFs
from service.schemas import GpuInfo, GpuProcess, MigInstance, SnapshotError

__all__ = ["NvmlReading", "cuda_version_text", "read_nvml"]

GIB = float(2**30)
T = TypeVar("T")

_LOCK = threading.Lock()

_NAMESPACE_ADVICE = (
    "run the agent in the host PID namespace (Kubernetes hostPID: true, Docker --pid=host) "
    "or mount the host's /proc and point VRAMDOC_AGENT_PROC_ROOT at it"
)


@dataclass(slots=True)
class NvmlReading:
    """What NVML gave, plus what it could not give and why."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    errors: list[SnapshotError] = field(default_factory=list)
    pids_resolvable: bool | None = None


@dataclass(frozen=True, slots=True)
class _Memory:
    total: int
    used: int
    free: int
    reserved: int | None
    api: Literal["v2", "v1"]


@dataclass(slots=True)
class _Reader:
    """One NVML session: the pynvml module, the /proc view and the errors found so far."""

    nv: Any
    procfs: ProcFs
    host_namespace: bool | None
    errors: list[SnapshotError] = field(default_factory=list)
    missing_pids: list[int] = field(default_factory=list)

    def attempt(self, source: str, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Call one NVML function; on an NVML error record why and return None."""
        try:
            return fn(*args)
        except self.nv.NVMLError as err:
            self.errors.append(SnapshotError(source=source, reason=explain(self.nv, err, what)))
            return None


def gib(value: int) -> float:
    return round(value / GIB, 3)


def cuda_version_text(value: int) -> str:
    """NVML encodes the CUDA driver version as 1000 * major + 10 * minor (12040 is 12.4)."""
    return f"{value // 1000}.{value % 1000 // 10}"


def explain(nv: Any, err: Exception, what: str) -> str:
    """One sentence saying why NVML could not give `what`."""
    code = getattr(err, "value", None)
    reasons = {
        nv.NVML_ERROR_LIBRARY_NOT_FOUND: (
            "the NVML library libnvidia-ml.so.1 was not found: this host has no NVIDIA driver, "
            "or the container was started without the NVIDIA container runtime"
        ),
        nv.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
        nv.NVML_ERROR_NO_PERMISSION: f"permission denied reading {what} (NVML: Insufficient Permissions)",
        nv.NVML_ERROR_NOT_SUPPORTED: f"{what} is not supported on this GPU or driver",
        nv.NVML_ERROR_FUNCTION_NOT_FOUND: f"this driver's NVML has no function for {what} (driver too old)",
        nv.NVML_ERROR_GPU_IS_LOST: f"the GPU fell off the bus or became inaccessible while reading {what}",
        nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
            "the NVML library and the kernel driver versions differ (reload the driver or reboot)"
        ),
    }
    return reasons.get(code, f"NVML could not read {what}: {err}")


def read_nvml(procfs: ProcFs) -> NvmlReading:
    """Read every GPU NVML can see; blocking, so run it in a thread from async code."""
    try:
        import pynvml
    except ImportError:
        reason = "the nvidia-ml-py package (pynvml) is not installed, so NVML cannot be read"
        return NvmlReading(errors=[SnapshotError(source="nvml", reason=reason)])
    with _LOCK:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            reason = explain(pynvml, err, "NVML") + "; no GPU could be read"
            return NvmlReading(errors=[SnapshotError(source="nvml", reason=reason)])
        try:
            return _read_initialized(_Reader(pynvml, procfs, procfs.in_host_pid_namespace()))
        finally:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def _read_initialized(reader: _Reader) -> NvmlReading:
    nv = reader.nv
    reading = NvmlReading()
    reading.driver_version = reader.attempt("nvml", "the driver version", nv.nvmlSystemGetDriverVersion)
    cuda = reader.attempt("nvml", "the CUDA driver version", nv.nvmlSystemGetCudaDriverVersion)
    reading.cuda_version = cuda_version_text(cuda) if cuda is not None else None
    count = reader.attempt("nvml", "the number of GPUs", nv.nvmlDeviceGetCount)
    if count == 0:
        reader.errors.append(SnapshotError(source="nvml", reason="NVML found no GPU on this host"))
    for index in range(count or 0):
        try:
            gpu = _read_gpu(reader, index)
        except Exception as err:  # one odd GPU must not cost the snapshot the others
            reason = f"GPU {index} could not be read: {err.__class__.__name__}: {err}"
            reader.errors.append(SnapshotError(source=f"nvml:gpu{index}", reason=reason))
            continue
        if gpu is not None:
            reading.gpus.append(gpu)
    reading.pids_resolvable = _pids_resolvable(reader, any(g.processes for g in reading.gpus))
    reading.errors = reader.errors
    return reading


def _read_gpu(reader: _Reader, index: int) -> GpuInfo | None:
    nv = reader.nv
    source = f"nvml:gpu{index}"
    handle = reader.attempt(source, f"GPU {index}", nv.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return None
    memory = _read_memory(reader, source, handle)
    if memory is None:
        reader.errors.append(
            SnapshotError(
                source=source, reason=f"GPU {index} is left out because its memory could not be read"
            )
        )
        return None
    uuid = reader.attempt(source, "the GPU UUID", nv.nvmlDeviceGetUUID, handle)
    name = reader.attempt(source, "the GPU name", nv.nvmlDeviceGetName, handle)
    utilization = reader.attempt(source, "GPU utilization", nv.nvmlDeviceGetUtilizationRates, handle)
    capability = reader.attempt(
        source, "the compute capability", nv.nvmlDeviceGetCudaComputeCapability, handle
    )
    mig_mode = _read_mig_mode(reader, source, handle)
    processes = _read_processes(reader, source, handle, required=not mig_mode)
    instances: list[MigInstance] = []
    if mig_mode:
        instances, mig_processes = _read_mig_instances(reader, source, handle)
        known = {p.pid for p in processes}
        processes += [p for p in mig_processes if p.pid not in known]
    return GpuInfo(
        index=index,
        uuid=uuid or "unknown",
        name=name or "unknown",
        total_gib=gib(memory.total),
        used_gib=gib(memory.used),
        free_gib=gib(memory.free),
        reserved_gib=gib(memory.reserved) if memory.reserved is not None else None,
        utilization_pct=int(utilization.gpu) if utilization is not None else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability is not None else None,
        mig_mode=mig_mode,
        processes=processes,
        memory_api=memory.api,
        mig_instances=instances,
    )


def _read_memory(reader: _Reader, source: str, handle: Any) -> _Memory | None:
    """The v2 call (separates driver-reserved memory), else v1 on drivers older than R510."""
    nv = reader.nv
    try:
        info = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
        return _Memory(info.total, info.used, info.free, info.reserved, "v2")
    except (nv.NVMLError_FunctionNotFound, nv.NVMLError_ArgumentVersionMismatch, nv.NVMLError_NotSupported):
        pass
    except nv.NVMLError as err:
        reader.errors.append(SnapshotError(source=source, reason=explain(nv, err, "memory usage")))
        return None
    info = reader.attempt(source, "memory usage", nv.nvmlDeviceGetMemoryInfo, handle)
    if info is None:
        return None
    reason = (
        "reserved memory is unknown: this driver has no v2 memory call (nvmlDeviceGetMemoryInfo_v2), "
        "so used memory includes what the driver reserves"
    )
    reader.errors.append(SnapshotError(source=source, reason=reason))
    return _Memory(info.total, info.used, info.free, None, "v1")


def _read_mig_mode(reader: _Reader, source: str, handle: Any) -> bool | None:
    """MIG mode in effect now; GPUs that cannot do MIG at all answer 'not supported', which is False."""
    nv = reader.nv
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
    except nv.NVMLError_NotSupported:
        return False
    except nv.NVMLError as err:
        reader.errors.append(SnapshotError(source=source, reason=explain(nv, err, "the MIG mode")))
        return None
    return bool(current == nv.NVML_DEVICE_MIG_ENABLE)


def _read_mig_instances(
    reader: _Reader, parent_source: str, handle: Any
) -> tuple[list[MigInstance], list[GpuProcess]]:
    nv = reader.nv
    slots = reader.attempt(parent_source, "the MIG device count", nv.nvmlDeviceGetMaxMigDeviceCount, handle)
    instances: list[MigInstance] = []
    processes: list[GpuProcess] = []
    for slot in range(slots or 0):
        source = f"{parent_source}:mig{slot}"
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nv.NVMLError_NotFound:
            continue  # an unpopulated slot
        except nv.NVMLError as err:
            reader.errors.append(SnapshotError(source=source, reason=explain(nv, err, "the MIG device")))
            continue
        memory = _read_memory(reader, source, mig)
        if memory is None:
            continue
        uuid = reader.attempt(source, "the MIG device UUID", nv.nvmlDeviceGetUUID, mig)
        name = reader.attempt(source, "the MIG device name", nv.nvmlDeviceGetName, mig)
        instances.append(
            MigInstance(
                index=slot,
                uuid=uuid or "unknown",
                name=name or "unknown",
                total_gib=gib(memory.total),
                used_gib=gib(memory.used),
                free_gib=gib(memory.free),
            )
        )
        processes += _read_processes(reader, source, mig, required=True)
    return instances, processes


def _read_processes(reader: _Reader, source: str, handle: Any, *, required: bool) -> list[GpuProcess]:
    """Compute processes on one device; in MIG mode the parent may refuse, and the instances answer."""
    nv = reader.nv
    try:
        try:
            raw = nv.nvmlDeviceGetComputeRunningProcesses_v3(handle)
        except nv.NVMLError_FunctionNotFound:
            raw = nv.nvmlDeviceGetComputeRunningProcesses_v2(handle)
    except nv.NVMLError as err:
        if required:
            reader.errors.append(
                SnapshotError(source=source, reason=explain(nv, err, "the list of running processes"))
            )
        return []
    return [_resolve(reader, int(p.pid), p.usedGpuMemory) for p in raw]


def _resolve(reader: _Reader, pid: int, used: int | None) -> GpuProcess:
    used_gib = gib(used) if used is not None else None
    if reader.host_namespace is False:
        return GpuProcess(pid=pid, name=None, cmdline=None, used_gib=used_gib)
    if not reader.procfs.exists(pid):
        reader.missing_pids.append(pid)
        return GpuProcess(pid=pid, name=None, cmdline=None, used_gib=used_gib)
    details = reader.procfs.details(pid)
    return GpuProcess(
        pid=pid, name=details.name, cmdline=details.cmdline, used_gib=used_gib, container=details.container
    )


def _pids_resolvable(reader: _Reader, any_processes: bool) -> bool | None:
    """Whether the PIDs NVML reported could be looked up in /proc, with the reason when not."""
    if reader.host_namespace is False:
        if any_processes:
            reason = (
                "NVML reports host PIDs but this agent is not in the host PID namespace, so process "
                f"names, command lines and containers are unknown: {_NAMESPACE_ADVICE}"
            )
            reader.errors.append(SnapshotError(source="proc", reason=reason))
        return False
    if not reader.missing_pids:
        return True if reader.host_namespace or any_processes else None
    pids = ", ".join(str(pid) for pid in sorted(set(reader.missing_pids)))
    if reader.host_namespace:
        reason = f"PID {pids} reported by NVML is not in /proc: the process exited while being read"
        reader.errors.append(SnapshotError(source="proc", reason=reason))
        return True
    reason = (
        f"PID {pids} reported by NVML is not in /proc, so the agent is probably not in the host "
        f"PID namespace: {_NAMESPACE_ADVICE}"
    )
    reader.errors.append(SnapshotError(source="proc", reason=reason))
    return False
