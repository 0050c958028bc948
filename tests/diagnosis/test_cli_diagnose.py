"""`vramdoc diagnose` and `vramdoc rules`: output forms and exit codes (DESIGN §3.7)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from service.cli import main
from service.packs import default_rules_dir

KV_LOG = (
    "INFO 01-01 00:00:00 llm_engine.py:1] Initializing an LLM engine (v0.6.3) with config: model='m/x', "
    "dtype=torch.float16, max_seq_len=29000, tensor_parallel_size=1\n"
    "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be "
    "stored in KV cache (23648). Try increasing `gpu_memory_utilization`.\n"
)
HEALTHY_LOG = (
    "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,360 tokens\n"
    "Application startup complete.\n"
)


def _write(tmp_path: Path, text: str | bytes, name: str = "x.log") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_json_output_is_the_contract_and_failure_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diagnose", "--json", _write(tmp_path, KV_LOG)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["phase"] == "kv_cache_capacity"
    assert data["facts"]["kv_cache_tokens"] == 23648
    assert data["rules_version"].startswith("sha256:")
    assert data["engine"] == {"name": "vllm", "version": "0.6.3", "assumed": False, "range": None}
    assert set(data) >= {"confidence", "title", "summary", "evidence", "findings", "budget", "fixes"}


def test_healthy_log_exits_0_with_a_readable_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diagnose", _write(tmp_path, HEALTHY_LOG)])
    out = capsys.readouterr().out
    assert code == 0
    assert "phase: no_failure" in out
    assert "kv_cache_tokens" in out


def test_missing_file_exits_2_with_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", str(tmp_path / "absent.log")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.strip().endswith("does not exist.")
    assert captured.err.count("\n") == 1


def test_empty_log_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", _write(tmp_path, "\n\n")]) == 2
    assert "empty" in capsys.readouterr().err


def test_binary_input_is_read_with_replacement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "diagnose",
            "--json",
            _write(tmp_path, b"\xff\xfe\x00 CUDA out of memory. Tried to allocate 2.00 GiB"),
        ]
    )
    assert code == 1
    assert json.loads(capsys.readouterr().out)["facts"]["tried_to_allocate_gib"] == 2.0


def test_hints_reach_the_diagnosis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diagnose", "--json", "--model", "m/y", "--gpu", "A100-80GB", "--vllm-version", "0.9.2"]
    main([*args, "--command", "vllm serve m/y --swap-space 8", _write(tmp_path, KV_LOG)])
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["gpu_name"] == "A100-80GB"
    assert data["fact_sources"]["gpu_name"] == "request"


def test_rules_test_passes_and_list_shows_the_digest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "test"]) == 0
    assert "0 failed" in capsys.readouterr().out
    assert main(["rules", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["digest"].startswith("sha256:")
    assert sum(listing["packs"].values()) == len(listing["rules"])


def test_rules_test_fails_with_exit_1_listing_the_broken_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    rules = tmp_path / "rules"
    shutil.copytree(default_rules_dir(), rules)
    pack = rules / "signatures" / "kv_cache.yaml"
    pack.write_text(
        pack.read_text().replace(
            "facts: {estimated_max_model_len: 1344}", "facts: {estimated_max_model_len: 7}"
        )
    )
    assert main(["rules", "test", "--rules-dir", str(rules)]) == 1
    out = capsys.readouterr().out
    assert "FAIL signatures/kv_cache.yaml rule vllm-kv-estimated-max-len" in out


def test_broken_rules_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "list", "--rules-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("vramdoc: ")


def test_log_from_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(KV_LOG.encode())))
    assert main(["diagnose", "--json", "-"]) == 1
    assert json.loads(capsys.readouterr().out)["phase"] == "kv_cache_capacity"


def test_folder_instead_of_a_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_missing_log_file_is_one_sentence_naming_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "/nonexistent/vllm.log"]) == 2
    assert capsys.readouterr().err == "vramdoc diagnose: The log file /nonexistent/vllm.log does not exist.\n"


def test_top_above_the_api_cap_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO vLLM API server version 0.11.0\n")
    assert main(["diagnose", "--top", "999", str(log)]) == 2
    assert "--top must be between 0 and 50" in capsys.readouterr().err


def test_human_output_counts_a_line_pasted_many_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity "
        "of 23.55 GiB of which 1.02 GiB is free.\n"
    )
    main(["diagnose", _write(tmp_path, "INFO:     Application startup complete.\n" + oom * 40)])
    evidence = capsys.readouterr().out.split("evidence:")[1]
    assert evidence.count("| torch.OutOfMemoryError") == 1
    assert "(×40 identical lines)" in evidence


def test_a_binary_file_is_refused_as_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", _write(tmp_path, bytes(range(256)) * 200)])
    assert code == 2
    err = capsys.readouterr().err
    assert "binary data, not text" in err and "UTF-8" in err
