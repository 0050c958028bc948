"""Run a built image's entry point as a container with buildah, and look at it from the host.

`buildah run --isolation chroot` runs the command on the host network (no daemon, no runtime that
sets rlimits), so the container's ports are reachable on 127.0.0.1 and its processes are visible in
the host's /proc, which is how the tests check the user they run as and how they stop them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

STORAGE = ["--storage-driver", "vfs"] + (
    ["--root", os.environ["VRAMDOC_BUILDAH_ROOT"]] if os.environ.get("VRAMDOC_BUILDAH_ROOT") else []
)


def buildah(*args: str) -> str:
    done = subprocess.run(["buildah", *STORAGE, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class ImageConfig:
    entrypoint: list[str]
    cmd: list[str]
    user: str
    env: dict[str, str]
    healthcheck: list[str] | None


def image_config(image: str) -> ImageConfig:
    """The run configuration the image itself declares (docker format keeps HEALTHCHECK)."""
    data = json.loads(buildah("inspect", "--type", "image", image))
    config = data.get("Docker", {}).get("config") or data["OCIv1"]["config"]
    env = dict(item.split("=", 1) for item in config.get("Env") or [])
    health = (config.get("Healthcheck") or {}).get("Test")
    return ImageConfig(
        entrypoint=list(config.get("Entrypoint") or []),
        cmd=list(config.get("Cmd") or []),
        user=str(config.get("User") or ""),
        env=env,
        healthcheck=list(health) if health else None,
    )


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:"))
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))


def process_argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


@dataclass
class Container:
    """One running container: the buildah process and the working container it runs in."""

    image: str
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)

    def entry_processes(self) -> list[int]:
        """Processes inside the container running the entry point (tini, then vramdoc under it)."""
        return [pid for pid in descendants(self.process.pid) if _runs(pid, self.argv[0])]

    def vramdoc_processes(self) -> list[int]:
        return [pid for pid in descendants(self.process.pid) if _runs_vramdoc(pid)]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self, grace_s: float) -> float | None:
        """SIGTERM to the entry point as the kubelet sends it; seconds until it exited, or None."""
        started = time.monotonic()
        for pid in self.entry_processes()[:1]:
            os.kill(pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - started

    def exec(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run one more command in the same container, as the image's user (a HEALTHCHECK does)."""
        user = image_config(self.image).user
        return subprocess.run(
            ["buildah", *STORAGE, "run", "--isolation", "chroot", "--user", user, self.name, "--", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def remove(self) -> None:
        if self.process.poll() is None:
            for pid in reversed(descendants(self.process.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait(timeout=30)
        subprocess.run(["buildah", *STORAGE, "rm", self.name], capture_output=True, timeout=120)


def _runs(pid: int, program: str) -> bool:
    try:
        argv = process_argv(pid)
    except OSError:
        return False
    return bool(argv) and Path(argv[0]).name == Path(program).name


def _runs_vramdoc(pid: int) -> bool:
    try:
        argv = process_argv(pid)
    except OSError:
        return False
    return any(Path(part).name == "vramdoc" for part in argv[:2])


def start(image: str, cmd: list[str], env: dict[str, str], log: Path) -> Container:
    """Start the image's own ENTRYPOINT with `cmd` as its arguments, as the image's USER."""
    config = image_config(image)
    name = buildah("from", "--pull-never", image).strip()
    argv = config.entrypoint + cmd
    env_args = [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                "buildah",
                *STORAGE,
                "run",
                "--isolation",
                "chroot",
                "--user",
                config.user,
                *env_args,
                name,
                "--",
                *argv,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Container(image=image, name=name, process=process, log=log, argv=argv)
