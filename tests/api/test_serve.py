"""`vramdoc serve`: checks settings and packs before starting workers, serves, and drains on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
KV_LOG = (Path(__file__).parent / "data" / "kv-capacity-v0.32-qwen.log").read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(port: int, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), *extra],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_workers_serve_and_stop_cleanly_on_sigterm() -> None:
    port = _free_port()
    proc = _serve(port, "--workers", "2")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
                time.sleep(0.2)
            answers = [client.post("/v1/classify", content=KV_LOG + f"\n# {i}\n") for i in range(6)]
            assert {a.status_code for a in answers} == {200}
            metrics = client.get("/metrics").text
            assert 'vramdoc_diagnoses_total{endpoint="classify",phase="kv_cache_capacity"} 6.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr


def test_broken_pack_stops_startup_naming_file_rule_and_field(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(REPO / "rules", rules)
    pack = sorted((rules / "signatures").glob("*.yaml"))[0]
    pack.write_text(pack.read_text() + "\n  - id: broken-rule\n    phase: not-a-phase\n")
    proc = _serve(_free_port(), env={"VRAMDOC_RULES_DIR": str(rules)})
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert stderr.startswith("vramdoc serve: ")
    assert f"signatures/{pack.name}" in stderr
    assert "rule broken-rule $.rules[" in stderr and "].phase" in stderr
    assert "Traceback" not in stderr


def test_bad_setting_stops_startup_naming_the_variable() -> None:
    proc = _serve(_free_port(), env={"VRAMDOC_RATE_LIMIT": "lots"})
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "VRAMDOC_RATE_LIMIT" in stderr and "Traceback" not in stderr


def test_port_in_use_is_exit_2_with_a_sentence() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = _serve(taken.getsockname()[1])
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "vramdoc serve: could not serve on 127.0.0.1:" in stderr


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_port_out_of_range_is_exit_2_with_a_sentence_before_starting(port: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"vramdoc serve: --port must be between 0 and 65535, not {port}.\n"
