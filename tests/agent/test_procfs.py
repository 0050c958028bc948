"""Process names, command lines and containers from a /proc tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.agent.procfs import HOST_PID_NAMESPACE_INODE, ProcFs, container_from_cgroup

DOCKER_ID = "3f4e8a1b9c2d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
POD_UID = "8d0c7a4e-5b1f-4c2a-9e3d-6f7a8b9c0d1e"


@pytest.mark.parametrize(
    ("cgroup", "container"),
    [
        pytest.param(
            f"0::/system.slice/docker-{DOCKER_ID}.scope\n", "docker:3f4e8a1b9c2d", id="docker-systemd-v2"
        ),
        pytest.param(
            f"12:memory:/docker/{DOCKER_ID}\n0::/\n", "docker:3f4e8a1b9c2d", id="docker-cgroupfs-v1"
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_UID.replace('-', '_')}"
            f".slice/cri-containerd-{DOCKER_ID}.scope\n",
            f"k8s-pod:{POD_UID}/containerd:3f4e8a1b9c2d",
            id="kubernetes-containerd-systemd",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod{POD_UID}/{DOCKER_ID}\n",
            f"k8s-pod:{POD_UID}/3f4e8a1b9c2d",
            id="kubernetes-cgroupfs",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/crio-{DOCKER_ID}.scope",
            f"k8s-pod:{POD_UID}/cri-o:3f4e8a1b9c2d",
            id="kubernetes-crio",
        ),
        pytest.param(f"0::/kubepods/pod{POD_UID}\n", f"k8s-pod:{POD_UID}", id="kubernetes-pod-only"),
        pytest.param(
            f"0::/system.slice/containerd-{DOCKER_ID}.scope", "containerd:3f4e8a1b9c2d", id="containerd"
        ),
        pytest.param(f"0::/machine.slice/libpod-{DOCKER_ID}.scope", "podman:3f4e8a1b9c2d", id="podman"),
        pytest.param(f"0::/default/{DOCKER_ID}\n", "container:3f4e8a1b9c2d", id="containerd-namespace"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", None, id="host-session"),
        pytest.param("0::/\n", None, id="root"),
        pytest.param("garbage without colons\n", None, id="malformed"),
    ],
)
def test_container_from_cgroup(cgroup: str, container: str | None) -> None:
    assert container_from_cgroup(cgroup) == container


def _proc(tmp_path: Path, inode: int | None) -> ProcFs:
    (tmp_path / "self" / "ns").mkdir(parents=True)
    if inode is not None:
        (tmp_path / "self" / "ns" / "pid").symlink_to(f"pid:[{inode}]")
    return ProcFs(tmp_path)


@pytest.mark.parametrize(
    ("inode", "expected"), [(HOST_PID_NAMESPACE_INODE, True), (4026532451, False), (None, None)]
)
def test_host_pid_namespace_is_recognised_by_its_fixed_inode(
    tmp_path: Path, inode: int | None, expected: bool | None
) -> None:
    assert _proc(tmp_path, inode).in_host_pid_namespace() is expected


def test_details_read_name_cmdline_and_tolerate_missing_files(tmp_path: Path) -> None:
    procfs = _proc(tmp_path, HOST_PID_NAMESPACE_INODE)
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "comm").write_text("vllm\n")
    (tmp_path / "77" / "cmdline").write_bytes(b"vllm\0serve\0Qwen/Qwen2.5-7B\0--max-model-len\0\xff32768\0")
    details = procfs.details(77)
    assert details.name == "vllm"
    assert details.cmdline == "vllm serve Qwen/Qwen2.5-7B --max-model-len \ufffd32768"
    assert details.container is None
    assert procfs.exists(77) and not procfs.exists(78)
    assert procfs.details(78).name is None


def test_kernel_thread_has_no_cmdline(tmp_path: Path) -> None:
    procfs = _proc(tmp_path, HOST_PID_NAMESPACE_INODE)
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "comm").write_text("kthreadd\n")
    (tmp_path / "2" / "cmdline").write_bytes(b"")
    assert procfs.details(2).cmdline is None
