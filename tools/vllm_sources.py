"""Fetch vLLM's released Python sources, one folder per release, for the generators in tools/.

Each release is downloaded as a wheel with `pip download vllm==X --no-deps`, its `vllm/**/*.py` files
are extracted into `<cache>/<version>/`, and the wheel is deleted: only the sources are kept, never
binaries. The generators (templates, call graph) read these folders; nothing here is committed.

    python tools/vllm_sources.py fetch            # the first and the latest release of every minor
    python tools/vllm_sources.py fetch 0.9.2 0.33.0
    python tools/vllm_sources.py list             # what the cache holds
    python tools/vllm_sources.py plugins          # the platform plugins' and forks' releases (PLUGINS),
                                                  # and the wrappers' that run vLLM (WRAPPERS)

Platform plugins and forks that are published on pip print their own messages and run their own
workers and model runners, and the kernel libraries under vLLM print their own refusals (`PLUGINS`,
data): their pinned releases are cached the same way, only the `.py` files of the packages named,
under `<cache>/plugins/<distribution>/<version>/`.
"""

from __future__ import annotations

import argparse
import os
import re
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


def first_and_latest_per_minor(versions: list[Version]) -> list[Version]:
    """The oldest and the newest final (non-pre) release of each minor from 0.2 on. A minor's first
    release prints messages of its own that a later patch removed (0.11.0's out-of-memory wrappers
    around creating weights and the attention constants, 0.4.0's executor checks): measured over
    0.2..0.34, the X.Y.0 releases add 23 relevant templates the latest patches lack."""
    first: dict[tuple[int, int], Version] = {}
    last: dict[tuple[int, int], Version] = {}
    for v in versions:
        if v.is_prerelease or v.is_devrelease or Version(f"{v.major}.{v.minor}") < FIRST_MINOR:
            continue
        key = (v.major, v.minor)
        first[key] = min(first.get(key, v), v)
        last[key] = max(last.get(key, v), v)
    return sorted({*first.values(), *last.values()})


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


# Distribution on pip -> (the packages (folders) inside its wheel whose sources are kept, the pinned
# releases: the newest and one or two older). Their sources are what tools/vllm_templates.py and
# tools/vllm_callgraph.py read for the plugins' inventory and frame table (`--plugins`). Releases are
# pinned so that a rerun on a fresh machine gives the committed data; vllm-neuron 0.1.0 (an empty
# placeholder), vllm-gaudi and vllm-metal (not on pip) and vllm-xpu-kernels (compiled kernels, no
# engine code) are left out.
PLUGINS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "vllm-ascend": (("vllm_ascend",), ("0.9.1", "0.13.0", "0.18.0")),
    "tpu-inference": (("tpu_inference",), ("0.11.1", "0.22.1", "0.32.0")),
    "vllm-spyre": (("vllm_spyre",), ("1.0.0", "1.10.0")),
    "vllm-rbln": (("vllm_rbln",), ("0.9.4", "0.12.0")),
    "vllm-omni": (("vllm_omni",), ("0.18.0", "0.30.0")),
    "vllm-hpu-extension": (("vllm_hpu_extension",), ("0.1",)),
    "optimum-neuron": (("optimum/neuron/vllm",), ("0.3.0", "0.4.5")),
    "ipex-llm": (("ipex_llm/vllm",), ("2.1.0", "2.2.0")),
    "aphrodite-engine": (("aphrodite",), ("0.6.5", "0.24.1")),
    # Triton, the kernel compiler vLLM's quantization and attention kernels are written in: its own
    # refusals (`type fp8e4nv not supported in this architecture`) are pasted as vLLM's. One release per
    # PyTorch vLLM pinned: torch 2.1 (vLLM 0.2-0.3), 2.5 (0.7), 2.7 (0.9-0.10), 2.9 (0.12 on).
    "triton": (("triton",), ("2.1.0", "3.1.0", "3.3.1", "3.5.0")),
    # --- lines13: more platform plugins on pip. Left out: vllm-neuron 0.1.0,
    # neuronx-distributed-inference 0.1.0, transformers-neuronx 0.1 (placeholders of one __init__.py;
    # the real wheels are on AWS's own index), vllm-gaudi, vllm-metal, vllm-mlu (not on pip).
    "vllm-kunlun": (("vllm_kunlun",), ("0.11.1",)),
    "vllm-musa": (("vllm_musa_platform",), ("0.1.0", "0.1.1")),
    # --- end lines13
}
# --- lines13: the wrappers that run vLLM (or that people run beside it) and print their own memory,
# length, layout and engine errors (issue #12 section 1), same shape as PLUGINS. Their messages are
# inventoried with the plugins' (`vllm_templates.py --plugins`), but their modules do not mirror
# vLLM's layout, so the call graph and the folder filter never read them as vLLM's. Only the folders
# that start, size or call an engine are kept (a trainer's or a router's other messages are not).
WRAPPERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ms-swift": (("swift/llm", "swift/infer_engine", "swift/pipelines"), ("3.12.6", "4.6.0")),
    "xinference": (("xinference/model/llm", "xinference/core"), ("1.17.1", "4.1.0")),
    "litellm": (
        ("litellm/litellm_core_utils", "litellm/llms/vllm", "litellm/llms/hosted_vllm"),
        ("1.74.0", "1.110.2"),
    ),
    "lmdeploy": (("lmdeploy/pytorch", "lmdeploy/turbomind", "lmdeploy/serve"), ("0.9.2", "0.18.0")),
    "llamafactory": (("llamafactory",), ("0.9.2", "0.9.5")),
    "openrlhf": (("openrlhf",), ("0.8.11", "0.11.2")),
    "verl": (("verl/workers", "verl/utils", "verl/trainer"), ("0.5.0", "0.9.1")),
    "trl": (("trl",), ("0.23.1", "1.16.0")),
    "fschat": (("fastchat/serve",), ("0.2.30", "0.2.36")),
    "ray": (("ray/llm",), ("2.46.0", "2.60.0")),
}
# what `plugins` fetches and the templates' inventory reads
SOURCES = {**PLUGINS, **WRAPPERS}
# Plugins for accelerators hosted on aarch64 (Ascend) publish some releases for it only.
PLUGIN_PLATFORMS = (
    *PLATFORMS,
    "manylinux_2_28_aarch64",
    "manylinux_2_24_aarch64",
    "manylinux_2_17_aarch64",
    "manylinux2014_aarch64",
)


def plugins_dir(root: Path) -> Path:
    return root / "plugins"


def _download_plugin(dist: str, version: str, into: str) -> None:
    """A pure-Python wheel where there is one, else the wheel of any platform above (only its .py
    files are kept, so the platform does not matter); never an sdist, which pip would build."""
    attempts: list[list[str]] = [[]]
    attempts += [
        ["--platform", tag, "--python-version", py, "--implementation", "cp"]
        for py in ("3.11", "3.10")
        for tag in PLUGIN_PLATFORMS
    ]
    done = None
    for extra in attempts:
        args = [sys.executable, "-m", "pip", "download", f"{dist}=={version}", "--no-deps"]
        args += ["--only-binary=:all:", *extra, "-q", "-d", into]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode == 0:
            return
    assert done is not None
    raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)


def fetch_plugin(dist: str, version: str, root: Path) -> Path:
    packages, _ = SOURCES[dist]
    target = plugins_dir(root) / dist / version
    if (target / ".complete").exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        _download_plugin(dist, version, tmp)
        wheel = next(Path(tmp).glob("*.whl"))
        if target.exists():
            shutil.rmtree(target)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                # a wheel may put its modules under `<dist>-<version>.data/purelib/` (OpenRLHF's)
                rel = _DATA_DIR.sub("", name)
                if rel.endswith(".py") and rel.startswith(tuple(f"{p}/" for p in packages)):
                    (target / rel).parent.mkdir(parents=True, exist_ok=True)
                    (target / rel).write_bytes(archive.read(name))
    (target / ".complete").write_text(version + "\n")
    return target


_DATA_DIR = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")


def plugin_releases(
    root: Path, table: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] | None = None
) -> dict[str, list[str]]:
    """Distribution -> its cached releases (of those `table` pins: PLUGINS unless given), oldest first."""
    out: dict[str, list[str]] = {}
    for dist, (_, versions) in (PLUGINS if table is None else table).items():
        cached = [v for v in versions if (plugins_dir(root) / dist / v / ".complete").exists()]
        if cached:
            out[dist] = sorted(cached, key=Version)
    return out


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
    fetch_cmd.add_argument(
        "versions", nargs="*", help="default: the first and the latest release of every minor since 0.2"
    )
    sub.add_parser("list", help="print the cached releases")
    sub.add_parser("plugins", help="download and extract the pinned releases of PLUGINS and WRAPPERS")
    args = parser.parse_args(argv)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if args.command == "plugins":
        missed = []
        for dist, (_, versions) in SOURCES.items():
            for version in versions:
                try:
                    print(f"{dist} {version}: {fetch_plugin(dist, version, root)}", flush=True)
                except (subprocess.CalledProcessError, StopIteration) as exc:
                    print(f"{dist} {version}: not fetched ({exc})", file=sys.stderr, flush=True)
                    missed.append(version)
        return 1 if missed else 0
    if args.command == "list":
        for folder in sorted(
            (p for p in root.iterdir() if (p / ".complete").exists()), key=lambda p: Version(p.name)
        ):
            print(folder.name)
        return 0
    wanted = args.versions or [str(v) for v in first_and_latest_per_minor(released_versions())]
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
