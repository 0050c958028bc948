"""Fixtures for the agent: the fake NVML library installed under the real pynvml, and its /proc."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from agent.fake_nvml import FakeNvmlLib, build_proc, load_fixture
from service.agent.procfs import ProcFs

InstallNvml = Callable[[str], tuple[FakeNvmlLib, ProcFs]]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> InstallNvml:
    """Install a fixture's devices as pynvml's loaded library; returns it and its /proc view."""

    def install(name: str) -> tuple[FakeNvmlLib, ProcFs]:
        spec = load_fixture(name)
        lib = FakeNvmlLib(spec)
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        return lib, ProcFs(build_proc(tmp_path / f"proc-{name}", spec["proc"]))

    return install
