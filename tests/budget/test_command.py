"""`vramdoc estimate` end to end through the real CLI entry point: output, JSON contract, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from service.cli import main
from service.commands.estimate import human_bytes, human_tokens, parse_human_int
from service.errors import InvalidConfigError
from service.schemas import Budget

QWEN = ["estimate", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", "L4", "--dtype", "float16"]
QWEN_16M = [*QWEN, "--block-size", "16", "--kv-cache-memory-bytes", "16M", "--vllm-version", "0.32.0"]


def test_json_output_is_the_budget_contract_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*QWEN_16M, "--max-model-len", "512", "--json"])
    out = capsys.readouterr().out
    budget = msgspec.json.decode(out, type=Budget)
    assert code == 0
    assert budget.kv_cache_tokens == 1360 and budget.num_blocks == 85
    assert json.loads(out)["startup_check"]["requested_gib"] > 0


def test_does_not_fit_exits_1_and_names_the_fitting_length(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*QWEN_16M, "--max-model-len", "2048"])
    out = capsys.readouterr().out
    assert code == 1
    assert "DOES NOT FIT" in out and "1,344" in out
    assert "[" in out and "] 22.05 GiB" in out  # the stacked bar


def test_readable_output_shows_human_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QWEN_16M, "--max-model-len", "512"]) == 0
    out = capsys.readouterr().out
    assert "12K/token" in out and "192K/block" in out and "FITS" in out


def test_unknown_model_exits_2_with_one_sentence_and_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "Qwen/Qwen2.5-0.5B-Instrukt", "--gpu", "L4"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "Qwen/Qwen2.5-0.5B-Instruct" in captured.err
    assert captured.err.count("\n") == 1


def test_unreadable_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "config.json"
    broken.write_bytes(b"\xff{not json")
    assert main(["estimate", "--config", str(broken), "--gpu", "H100"]) == 2
    assert "not a JSON object" in capsys.readouterr().err
    assert main(["estimate", "--config", str(tmp_path / "missing.json"), "--gpu", "H100"]) == 2


def test_config_file_path_estimates_a_model_not_in_the_catalog(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_attention_heads": 32,
        "num_hidden_layers": 22,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert main(["estimate", "--config", str(path), "--gpu", "T4", "--json"]) == 0


def test_startup_check_failure_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*QWEN, "--gpu", "11", "--free-gib", "9.87", "--vllm-version", "0.32.0"])
    assert code == 1
    assert "0.89 would pass" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "value"),
    [("16M", 16 * 2**20), ("16m", 16_000_000), ("32k", 32_000), ("25.6k", 25_600), ("4K", 4096)],
)
def test_human_readable_ints_follow_vllm(text: str, value: int) -> None:
    assert parse_human_int(text, "--x") == value


def test_bad_human_int_is_an_input_error() -> None:
    with pytest.raises(InvalidConfigError):
        parse_human_int("lots", "--max-model-len")


def test_human_sizes() -> None:
    assert human_bytes(16 * 2**20) == "16M"
    assert human_bytes(128 * 1024) == "128K"
    assert human_tokens(32_000) == "32k"
    assert human_tokens(1344) == "1.3k"
