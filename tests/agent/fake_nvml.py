"""A fake NVML library at the C boundary, driven by the JSON device descriptions in fixtures/.

The real nvidia-ml-py (`pynvml`) loads `libnvidia-ml.so.1` into its module global `nvmlLib` and
looks every C symbol up on it by name. `FakeNvmlLib` stands in for that library object: each
attribute is one NVML C entry point that takes the same ctypes arguments (`byref` out-parameters,
`c_uint` values, `create_string_buffer` buffers, `c_nvmlDevice_t` handles, arrays of
`c_nvmlProcessInfo_v2_t`) and returns an `nvmlReturn_t` code. So every pynvml wrapper runs
unchanged: struct versions, the two-call size protocol of the process list, `_nvmlCheckReturn`
and the real `NVMLError_*` classes. A symbol listed in `missing_functions` is absent, exactly as on
an old driver, and pynvml answers `NVMLError_FunctionNotFound`.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures"

_DEVICE_BASE = 0x10000
_MIG_STEP = 0x100
SUCCESS = pynvml.NVML_SUCCESS
_TAKES_NO_HANDLE = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2"}


def error_code(name: str) -> int:
    """`NVML_ERROR_NOT_SUPPORTED` -> 3, from the real pynvml constants."""
    return int(getattr(pynvml, name))


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def _out(arg: Any) -> Any:
    """The ctypes object behind a `byref(...)` out-parameter."""
    return arg._obj


def _set_handle(arg: Any, address: int) -> None:
    handle = _out(arg)
    pointer = ctypes.c_void_p(address)
    ctypes.memmove(ctypes.addressof(handle), ctypes.addressof(pointer), ctypes.sizeof(ctypes.c_void_p))


def _address(handle: Any) -> int:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    return int(value or 0)


def _write_string(buffer: Any, size: Any, text: str) -> int:
    data = text.encode("utf-8", "surrogateescape")  # "\udcff" in a fixture stands for the raw byte 0xff
    if len(data) + 1 > size.value:
        return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    buffer.value = data
    return SUCCESS


@dataclass
class FakeDevice:
    spec: dict[str, Any]
    mig: dict[int, FakeDevice] = field(default_factory=dict)

    def failure(self, function: str) -> int | None:
        name = self.spec.get("errors", {}).get(function)
        return error_code(name) if name else None


class FakeNvmlLib:
    """The `nvmlLib` object pynvml calls into; `calls` records every entry point used, in order."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.calls: list[str] = []
        self.handles: dict[int, FakeDevice] = {}
        self.devices: list[FakeDevice] = []
        for index, device_spec in enumerate(spec.get("devices", [])):
            device = FakeDevice(device_spec)
            address = _DEVICE_BASE * (index + 1)
            self.handles[address] = device
            self.devices.append(device)
            for mig_spec in device_spec.get("mig_devices", []):
                mig = FakeDevice(mig_spec)
                device.mig[int(mig_spec["slot"])] = mig
                self.handles[address + _MIG_STEP * (int(mig_spec["slot"]) + 1)] = mig

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name in self.spec.get("missing_functions", []):
            raise AttributeError(name)
        implementation = getattr(type(self), f"c_{name}", None)
        if implementation is None:
            raise AttributeError(name)

        def entry_point(*args: Any) -> Any:
            self.calls.append(name)
            if name.startswith("nvmlDevice") and name not in _TAKES_NO_HANDLE:
                device = self.handles.get(_address(args[0]))
                if device is None:
                    return int(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                failure = device.failure(name)
                if failure is not None:
                    return failure
                return implementation(self, device, *args[1:])
            return implementation(self, *args)

        return entry_point

    # --- system ------------------------------------------------------------------------------

    def c_nvmlInitWithFlags(self, flags: int) -> int:
        init_error = self.spec.get("init_error")
        return error_code(init_error) if init_error else SUCCESS

    def c_nvmlShutdown(self) -> int:
        return SUCCESS

    def c_nvmlErrorString(self, code: int) -> bytes:
        return f"Fake NVML error {code}".encode()

    def c_nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        return _write_string(buffer, size, self.spec["driver_version"])

    def c_nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        _out(version).value = int(self.spec["cuda_driver_version"])
        return SUCCESS

    def c_nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _out(count).value = len(self.devices)
        return SUCCESS

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, handle: Any) -> int:
        if not 0 <= index.value < len(self.devices):
            return int(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        failure = self.devices[index.value].failure("nvmlDeviceGetHandleByIndex_v2")
        if failure is not None:
            return failure
        _set_handle(handle, _DEVICE_BASE * (index.value + 1))
        return SUCCESS

    # --- device ------------------------------------------------------------------------------

    def c_nvmlDeviceGetUUID(self, device: FakeDevice, buffer: Any, size: Any) -> int:
        return _write_string(buffer, size, device.spec["uuid"])

    def c_nvmlDeviceGetName(self, device: FakeDevice, buffer: Any, size: Any) -> int:
        return _write_string(buffer, size, device.spec["name"])

    def c_nvmlDeviceGetMemoryInfo_v2(self, device: FakeDevice, memory: Any) -> int:
        struct = _out(memory)
        if struct.version != pynvml.nvmlMemory_v2:
            return int(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        spec = device.spec["memory"]
        struct.total, struct.reserved = spec["total"], spec["reserved"]
        struct.used, struct.free = spec["used"], spec["free"]
        return SUCCESS

    def c_nvmlDeviceGetMemoryInfo(self, device: FakeDevice, memory: Any) -> int:
        """v1 has no reserved field: what the driver reserves is counted as used."""
        struct = _out(memory)
        spec = device.spec["memory"]
        struct.total, struct.free = spec["total"], spec["free"]
        struct.used = spec["used"] + spec.get("reserved", 0)
        return SUCCESS

    def c_nvmlDeviceGetUtilizationRates(self, device: FakeDevice, utilization: Any) -> int:
        struct = _out(utilization)
        struct.gpu, struct.memory = device.spec["utilization"]["gpu"], device.spec["utilization"]["memory"]
        return SUCCESS

    def c_nvmlDeviceGetCudaComputeCapability(self, device: FakeDevice, major: Any, minor: Any) -> int:
        _out(major).value, _out(minor).value = device.spec["compute_capability"]
        return SUCCESS

    def c_nvmlDeviceGetMigMode(self, device: FakeDevice, current: Any, pending: Any) -> int:
        mode = device.spec.get("mig_mode")
        if mode is None:  # a GPU that cannot do MIG at all
            return int(pynvml.NVML_ERROR_NOT_SUPPORTED)
        _out(current).value, _out(pending).value = mode
        return SUCCESS

    def c_nvmlDeviceGetMaxMigDeviceCount(self, device: FakeDevice, count: Any) -> int:
        _out(count).value = int(device.spec.get("max_mig_devices", 0))
        return SUCCESS

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeDevice, index: Any, handle: Any) -> int:
        if index.value not in device.mig:
            return int(pynvml.NVML_ERROR_NOT_FOUND)
        parent = next(address for address, d in self.handles.items() if d is device)
        _set_handle(handle, parent + _MIG_STEP * (index.value + 1))
        return SUCCESS

    def _processes(self, device: FakeDevice, count: Any, array: Any) -> int:
        """NVML's two-call protocol: size query with a NULL array, then the filled array."""
        processes = device.spec.get("processes", [])
        counter = _out(count)
        if array is None:
            counter.value = len(processes)
            return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE) if processes else SUCCESS
        if counter.value < len(processes):
            counter.value = len(processes)
            return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for slot, process in enumerate(processes):
            array[slot].pid = process["pid"]
            used = process.get("used")
            array[slot].usedGpuMemory = (
                pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
            )
            array[slot].gpuInstanceId = process.get("gpu_instance_id", 0xFFFFFFFF)
            array[slot].computeInstanceId = process.get("compute_instance_id", 0xFFFFFFFF)
        counter.value = len(processes)
        return SUCCESS

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, device: FakeDevice, count: Any, array: Any) -> int:
        return self._processes(device, count, array)

    def c_nvmlDeviceGetComputeRunningProcesses_v2(self, device: FakeDevice, count: Any, array: Any) -> int:
        return self._processes(device, count, array)


def build_proc(root: Path, spec: dict[str, Any]) -> Path:
    """A /proc tree holding what the fixture says the agent's PID namespace can see."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "self" / "ns").mkdir(parents=True)
    (root / "self" / "ns" / "pid").symlink_to(f"pid:[{spec['pid_namespace_inode']}]")
    for pid, process in spec.get("processes", {}).items():
        base = root / pid
        base.mkdir()
        (base / "comm").write_text(process["comm"] + "\n")
        (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in process["cmdline"]) + b"\0")
        (base / "cgroup").write_text(process["cgroup"])
    return root
