"""What /proc says about the processes NVML reports: name, command line, container.

NVML reports PIDs in the host's PID namespace. An agent inside a container without `hostPID`
(Kubernetes) or `--pid=host` (Docker) sees its own namespace, where those numbers are absent or,
worse, belong to other processes; so names are only resolved when the agent shares the host's
namespace (or is pointed at the host's /proc mounted elsewhere, `VRAMDOC_AGENT_PROC_ROOT`).

Container ids are shortened to 12 hex digits, as `docker ps` shows them:
`docker:<id>`, `containerd:<id>`, `cri-o:<id>`, `podman:<id>`, `container:<id>` (runtime not
named in the path), and for Kubernetes pods
`k8s-pod:<pod uid>/<runtime>:<id>` (or `k8s-pod:<pod uid>` when the runtime is not named).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOST_PID_NAMESPACE_INODE", "ProcFs", "ProcessDetails", "container_from_cgroup"]

# The initial PID namespace has this fixed inode number (PROC_PID_INIT_INO, Linux >= 3.8).
HOST_PID_NAMESPACE_INODE = 0xEFFFFFFC

_CMDLINE_LIMIT = 4096

_RUNTIME_PREFIXES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}
# systemd driver: kubepods-burstable-pod<uid with _>.slice; cgroupfs driver: /kubepods/burstable/pod<uid>/
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
# systemd driver: <runtime>-<64 hex>.scope; cgroupfs driver: /docker/<64 hex> or /<pod dir>/<64 hex>
_SCOPE_RE = re.compile(r"(docker|cri-containerd|containerd|crio|libpod)-([0-9a-f]{64})\.scope")
_PLAIN_ID_RE = re.compile(r"/(?:(docker)/)?([0-9a-f]{64})(?:/|$)")


@dataclass(frozen=True, slots=True)
class ProcessDetails:
    name: str | None
    cmdline: str | None
    container: str | None


def container_from_cgroup(text: str) -> str | None:
    """Name the container a process runs in from the text of /proc/<pid>/cgroup (v1 or v2)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = _container_from_path(parts[2])
        if found is not None:
            return found
    return None


def _container_from_path(path: str) -> str | None:
    pod = _POD_RE.search(path)
    runtime: str | None = None
    container_id: str | None = None
    scope = _SCOPE_RE.search(path)
    if scope is not None:
        runtime, container_id = _RUNTIME_PREFIXES[scope.group(1)], scope.group(2)
    else:
        plain = _PLAIN_ID_RE.search(path)
        if plain is not None:
            runtime = "docker" if plain.group(1) else None
            container_id = plain.group(2)
    if pod is not None:
        uid = pod.group(1).replace("_", "-")
        if container_id is None:
            return f"k8s-pod:{uid}"
        inner = f"{runtime}:{container_id[:12]}" if runtime else container_id[:12]
        return f"k8s-pod:{uid}/{inner}"
    if container_id is not None:
        return f"{runtime or 'container'}:{container_id[:12]}"
    return None


class ProcFs:
    """Reads one /proc tree; the root is injectable so tests (and containers) can point elsewhere."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def in_host_pid_namespace(self) -> bool | None:
        """True when this /proc belongs to the host's PID namespace; None when that cannot be read."""
        try:
            link = os.readlink(self.root / "self" / "ns" / "pid")
        except OSError:
            return None
        match = re.fullmatch(r"pid:\[(\d+)\]", link)
        if match is None:
            return None
        return int(match.group(1)) == HOST_PID_NAMESPACE_INODE

    def exists(self, pid: int) -> bool:
        return (self.root / str(pid)).is_dir()

    def details(self, pid: int) -> ProcessDetails:
        """Name, command line and container of one PID; parts that cannot be read are None."""
        base = self.root / str(pid)
        name = _read_text(base / "comm")
        raw_cmdline = _read_bytes(base / "cmdline")
        cmdline = None
        if raw_cmdline:
            args = raw_cmdline[:_CMDLINE_LIMIT].rstrip(b"\0").split(b"\0")
            cmdline = " ".join(arg.decode("utf-8", "replace") for arg in args) or None
        cgroup = _read_text(base / "cgroup")
        container = container_from_cgroup(cgroup) if cgroup else None
        return ProcessDetails(name=name.strip() if name else None, cmdline=cmdline, container=container)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _read_text(path: Path) -> str | None:
    data = _read_bytes(path)
    return data.decode("utf-8", "replace") if data is not None else None
