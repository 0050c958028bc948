"""`vramdoc snapshot` and `vramdoc agent`: exit codes, output, and the real process end to end."""

from __future__ import annotations

import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from service.agent.command import agent_url, parse_listen
from service.cli import main
from service.errors import SettingsError
from service.schemas import Snapshot

from .conftest import InstallNvml

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMDOC_")}
    env.update(extra)
    return env


def test_snapshot_json_without_a_gpu_is_a_valid_snapshot_with_errors_and_exit_1() -> None:
    """Replaces the exit-0 version: `snapshot --json > snap.json && diagnose …` must stop when no
    GPU could be read (issue 14); stdout still holds the contract JSON, with the errors."""
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "snapshot", "--json", "--name", "ci-runner"],
        cwd=REPO,
        env=_env(VRAMDOC_AGENT_VLLM_URLS=""),
        capture_output=True,
        timeout=60,
    )
    snapshot = msgspec.json.decode(result.stdout, type=Snapshot)
    assert snapshot.host == "ci-runner"
    assert result.returncode == (0 if snapshot.gpus else 1), result.stderr
    if ctypes.util.find_library("nvidia-ml") is None:
        assert b"no GPU could be read on ci-runner" in result.stderr
        assert snapshot.gpus == []
        assert [e.source for e in snapshot.errors] == ["nvml"]
        assert "libnvidia-ml.so.1 was not found" in snapshot.errors[0].reason


def test_snapshot_table_shows_gpus_processes_servers_and_errors(
    fake_nvml: InstallNvml,
    metrics_server: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _lib, procfs = fake_nvml("v100_v1_only_driver")
    monkeypatch.setenv("VRAMDOC_AGENT_PROC_ROOT", str(procfs.root))
    monkeypatch.setenv("VRAMDOC_AGENT_VLLM_URLS", f"{metrics_server}/v0,{metrics_server}/broken")
    assert main(["snapshot", "--name", "gpu-old"]) == 0
    out = capsys.readouterr().out
    assert "host gpu-old  driver 470.223.02  CUDA 11.4" in out
    assert "Tesla V100-SXM2-32GB" in out
    assert "pid 3131" in out and "[docker:3f4e8a1b9c2d]" in out
    assert (
        "model meta-llama/Llama-3.1-8B-Instruct  KV cache 99%  running 38  waiting 11  preemptions 213" in out
    )
    assert "could not read:" in out and "answered HTTP 500" in out


def test_snapshot_json_prints_only_the_contract(
    fake_nvml: InstallNvml, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _lib, procfs = fake_nvml("a100_mig")
    monkeypatch.setenv("VRAMDOC_AGENT_PROC_ROOT", str(procfs.root))
    monkeypatch.setenv("VRAMDOC_AGENT_VLLM_URLS", "")
    assert main(["snapshot", "--json", "--name", "gpu-mig"]) == 0
    snapshot = msgspec.json.decode(capsys.readouterr().out, type=Snapshot)
    assert snapshot.gpus[0].mig_instances[0].name == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["snapshot", "--name", "Bad Name!"], {}, "cannot be a registry key"),
        (["snapshot"], {"VRAMDOC_AGENT_VLLM_URLS": "localhost:8000"}, "is not an http:// or https:// URL"),
        (["snapshot"], {"VRAMDOC_AGENT_SCRAPE_TIMEOUT_S": "soon"}, "must be a number of seconds"),
        (["agent", "--name", "gpu-1"], {}, "needs a bearer token: set VRAMDOC_AGENT_TOKEN"),
        (["agent", "--listen", "9400"], {"VRAMDOC_AGENT_TOKEN": "t0ken" * 8}, "is not address:port"),
        (["agent"], {"VRAMDOC_AGENT_TOKEN": "t0ken" * 8, "VRAMDOC_AGENT_HEARTBEAT_S": "0"}, "more than 0"),
    ],
    ids=["bad-name", "bad-vllm-url", "bad-timeout", "no-token", "bad-listen", "zero-heartbeat"],
)
def test_usage_errors_exit_2_with_one_sentence(
    argv: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [k for k in os.environ if k.startswith("VRAMDOC_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"vramdoc {argv[0]}: ") and message in captured.err
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("listen", "parsed"),
    [("0.0.0.0:9400", ("0.0.0.0", 9400)), ("[::]:9400", ("::", 9400)), (":9401", ("0.0.0.0", 9401))],
)
def test_parse_listen(listen: str, parsed: tuple[str, int]) -> None:
    assert parse_listen(listen) == parsed


@pytest.mark.parametrize("listen", ["9400", "host:", "host:99999", "bad host:80"])
def test_parse_listen_rejects_non_addresses(listen: str) -> None:
    with pytest.raises(SettingsError):
        parse_listen(listen)


def test_agent_url_prefers_the_given_url_and_names_the_host_when_listening_everywhere() -> None:
    assert agent_url("0.0.0.0", 9400, "https://gpu-7.example.com/agent/") == "https://gpu-7.example.com/agent"
    assert agent_url("0.0.0.0", 9400, None) == f"http://{socket.gethostname()}:9400"
    assert agent_url("10.0.0.7", 9400, None) == "http://10.0.0.7:9400"
    assert agent_url("fd00::7", 9400, None) == "http://[fd00::7]:9400"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_vramdoc_agent_process_serves_snapshots_behind_its_token(tmp_path: Path) -> None:
    port = _free_port()
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-from-a-file-0123456789\n")
    token_file.chmod(0o600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "agent", "--listen", f"127.0.0.1:{port}", "--name", "gpu-e2e"],
        cwd=REPO,
        env=_env(VRAMDOC_AGENT_TOKEN_FILE=str(token_file), VRAMDOC_AGENT_VLLM_URLS=""),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        health = None
        for _ in range(300):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.05)
        # This machine has no GPU (or no NVML): alive, but degraded, with the reason.
        assert health is not None and health.status_code == 200
        assert health.json()["status"] == "degraded" and health.json()["host"] == "gpu-e2e"
        assert health.json()["reasons"][0].startswith("nvml")
        assert httpx.get(f"http://127.0.0.1:{port}/v1/snapshot").status_code == 401
        ok = httpx.get(
            f"http://127.0.0.1:{port}/v1/snapshot",
            headers={"Authorization": "Bearer s3cret-token-from-a-file-0123456789"},
        )
        assert ok.status_code == 200
        assert msgspec.json.decode(ok.content, type=Snapshot).host == "gpu-e2e"
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert b"will not register itself" in output
    assert b"can read no GPU" in output
