"""Fetch vLLM's released Python sources, one folder per release, for the generators in tools/.

Each release is downloaded as a wheel with `pip download vllm==X --no-deps`, its `vllm/**/*.py` files
are extracted into `<cache>/<version>/`, and the wheel is deleted: only the sources are kept, never
binaries. The generators (templates, call graph) read these folders; nothing here is committed.

    python tools/vllm_sources.py fetch            # the latest patch of every minor 0.2 .. newest
    python tools/vllm_sources.py fetch 0.9.2 0.33.0
    python tools/vllm_sources.py list             # what the cache holds
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.version import Version

FIRST_MINOR = Version("0.2")


def cache_dir() -> Path:
    """`VRAMDOC_VLLM_SRC`, else the user cache: shared by every checkout on the machine."""
    explicit = os.environ.get("VRAMDOC_VLLM_SRC")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vramdoc" / "vllm-src"


def released_versions() -> list[Version]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True, check=True
    ).stdout
    line = next(row for row in out.splitlines() if row.startswith("Available versions:"))
    return [Version(v.strip()) for v in line.split(":", 1)[1].split(",")]


def latest_patch_per_minor(versions: list[Version]) -> list[Version]:
    """The newest final (non-pre) release of each minor from 0.2 on."""
    best: dict[tuple[int, int], Version] = {}
    for v in versions:
        if v.is_prerelease or v.is_devrelease or Version(f"{v.major}.{v.minor}") < FIRST_MINOR:
            continue
        key = (v.major, v.minor)
        if key not in best or v > best[key]:
            best[key] = v
    return [best[k] for k in sorted(best)]


PLATFORMS = (
    "manylinux_2_35_x86_64",  # 0.20.x ships only this tag
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# Old releases ship cp38-cp311 wheels, new ones need 3.11+: ask for each until one is found.
PYTHONS = ("3.10", "3.12")


def _download_wheel(version: str, into: str) -> None:
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    for python in PYTHONS:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"vllm=={version}",
                "--no-deps",
                "--only-binary=:all:",
                *platforms,
                "--python-version",
                python,
                "--implementation",
                "cp",
                "-q",
                "-d",
                into,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return
    raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)


def fetch(version: str, root: Path) -> Path:
    target = root / version
    if (target / ".complete").exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        _download_wheel(version, tmp)
        wheel = next(Path(tmp).glob("*.whl"))
        if target.exists():
            shutil.rmtree(target)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    archive.extract(name, target)
    (target / ".complete").write_text(version + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = sub.add_parser("fetch", help="download and extract releases into the cache")
    fetch_cmd.add_argument("versions", nargs="*", help="default: the latest patch of every minor since 0.2")
    sub.add_parser("list", help="print the cached releases")
    args = parser.parse_args(argv)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if args.command == "list":
        for folder in sorted(
            (p for p in root.iterdir() if (p / ".complete").exists()), key=lambda p: Version(p.name)
        ):
            print(folder.name)
        return 0
    wanted = args.versions or [str(v) for v in latest_patch_per_minor(released_versions())]
    failed = []
    for version in wanted:
        try:
            print(f"{version}: {fetch(version, root)}", flush=True)
        except (subprocess.CalledProcessError, StopIteration) as exc:
            print(f"{version}: not fetched ({exc})", file=sys.stderr, flush=True)
            failed.append(version)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
