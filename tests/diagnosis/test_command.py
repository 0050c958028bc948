"""Reading pasted launch commands: facts, vLLM's human-readable ints, and flags a version rejects."""

from __future__ import annotations

import pytest

from service.diagnosis.command import human_int, parse_command


@pytest.mark.parametrize(
    ("text", "value"),
    [("32768", 32768), ("32k", 32000), ("32K", 32768), ("1m", 10**6), ("1M", 2**20), ("25.6k", 25600)],
)
def test_human_readable_ints_follow_vllm(text: str, value: int) -> None:
    assert human_int(text) == value


def test_auto_and_minus_one_are_not_a_length() -> None:
    assert human_int("auto") is None
    assert human_int("-1") is None


def test_vllm_serve_positional_model_and_flags_become_facts() -> None:
    parsed = parse_command(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization=0.85 --max-model-len 16k "
        "-tp 2 --dtype half --kv-cache-dtype fp8 --enforce-eager --max-num-seqs 64 --block-size 32"
    )
    assert parsed.facts == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "gpu_memory_utilization": 0.85,
        "max_model_len": 16000,
        "tensor_parallel_size": 2,
        "dtype": "float16",
        "kv_cache_dtype": "fp8",
        "enforce_eager": True,
        "max_num_seqs": 64,
        "block_size": 32,
    }
    assert parsed.issues == []


def test_openai_module_form_with_line_continuations() -> None:
    command = (
        "python -m vllm.entrypoints.openai.api_server \\\n  --model /models/llama \\\n  --max-model-len 4096"
    )
    assert parse_command(command).facts == {"model": "/models/llama", "max_model_len": 4096}


def test_docker_image_form_and_inline_code_span_end() -> None:
    parsed = parse_command(
        "docker run --gpus all vllm/vllm-openai:v0.9.2 --model m/x --enforce-eager` and then"
    )
    assert parsed.facts == {"model": "m/x", "enforce_eager": True}


def test_flag_that_never_existed_is_an_error_in_every_version() -> None:
    issues = parse_command("vllm serve m --disable-cuda-graphs").issues
    assert [(i.rule, i.severity) for i in issues] == [("vllm-flag-never-existed", "error")]


def test_removed_flag_is_an_error_after_removal_and_a_warning_when_the_version_is_unknown() -> None:
    assert parse_command("vllm serve m --swap-space 4", "0.18.0").issues[0].severity == "error"
    assert parse_command("vllm serve m --swap-space 4", "0.17.0").issues == []
    unknown = parse_command("vllm serve m --swap-space 4").issues
    assert [(i.rule, i.severity) for i in unknown] == [("vllm-flag-removed", "warning")]


def test_flag_newer_than_the_version_is_an_error() -> None:
    issues = parse_command("vllm serve m --kv-cache-memory-bytes 16M", "0.9.2").issues
    assert [i.rule for i in issues] == ["vllm-flag-not-yet-added"]
    assert "0.10.2" in issues[0].message


def test_unbalanced_quotes_do_not_raise() -> None:
    assert parse_command("vllm serve m --served-model-name 'oops --max-model-len 2048").facts["model"] == "m"
