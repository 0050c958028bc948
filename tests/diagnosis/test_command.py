"""Reading pasted launch commands: facts, vLLM's human-readable ints, and flags a version rejects."""

from __future__ import annotations

import pytest

from service.diagnosis import classify_text
from service.diagnosis.command import human_int, parse_command
from service.packs import RulePacks


@pytest.mark.parametrize(
    ("text", "value"),
    [("32768", 32768), ("32k", 32000), ("32K", 32768), ("1m", 10**6), ("1M", 2**20), ("25.6k", 25600)],
)
def test_human_readable_ints_follow_vllm(text: str, value: int) -> None:
    assert human_int(text) == value


def test_auto_and_minus_one_are_not_a_length() -> None:
    assert human_int("auto") is None
    assert human_int("-1") is None


@pytest.mark.parametrize(
    ("command", "model"),
    [
        (
            "vllm serve Qwen/Qwen2.5-VL-7B-Instruct-AWQ到底需要多大显存？16G都不够",
            "Qwen/Qwen2.5-VL-7B-Instruct-AWQ",
        ),
        (
            "vllm serve --model meta-llama/Llama-3.1-8B-Instruct会报错 --max-model-len 8192",
            "meta-llama/Llama-3.1-8B-Instruct",
        ),
        ("vllm serve /models/千问-7b --max-model-len 8192", "/models/千问-7b"),
    ],
)
def test_a_hub_id_ends_where_a_sentence_in_another_script_starts(
    packs: RulePacks, command: str, model: str
) -> None:
    assert parse_command(command, packs.fixes).facts["model"] == model


def test_vllm_serve_positional_model_and_flags_become_facts(packs: RulePacks) -> None:
    parsed = parse_command(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization=0.85 --max-model-len 16k "
        "-tp 2 --dtype half --kv-cache-dtype fp8 --enforce-eager --max-num-seqs 64 --block-size 32",
        packs.fixes,
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


def test_openai_module_form_with_line_continuations(packs: RulePacks) -> None:
    command = (
        "python -m vllm.entrypoints.openai.api_server \\\n  --model /models/llama \\\n  --max-model-len 4096"
    )
    assert parse_command(command, packs.fixes).facts == {"model": "/models/llama", "max_model_len": 4096}


def test_docker_image_form_and_inline_code_span_end(packs: RulePacks) -> None:
    parsed = parse_command(
        "docker run --gpus all vllm/vllm-openai:v0.9.2 --model m/x --enforce-eager` and then", packs.fixes
    )
    assert parsed.facts == {"model": "m/x", "enforce_eager": True}


def test_flag_that_never_existed_is_an_error_in_every_version(packs: RulePacks) -> None:
    issues = parse_command("vllm serve m --disable-cuda-graphs", packs.fixes).issues
    assert [(i.rule, i.severity) for i in issues] == [("vllm-flag-never-existed", "error")]


def test_removed_flag_is_an_error_after_removal_and_a_warning_when_the_version_is_unknown(
    packs: RulePacks,
) -> None:
    assert parse_command("vllm serve m --swap-space 4", packs.fixes, "0.18.0").issues[0].severity == "error"
    assert parse_command("vllm serve m --swap-space 4", packs.fixes, "0.17.0").issues == []
    unknown = parse_command("vllm serve m --swap-space 4", packs.fixes).issues
    assert [(i.rule, i.severity) for i in unknown] == [("vllm-flag-removed", "warning")]


def test_flag_newer_than_the_version_is_an_error(packs: RulePacks) -> None:
    issues = parse_command("vllm serve m --kv-cache-memory-bytes 16M", packs.fixes, "0.9.2").issues
    assert [i.rule for i in issues] == ["vllm-flag-not-yet-added"]
    assert "0.10.2" in issues[0].message


def test_unbalanced_quotes_do_not_raise(packs: RulePacks) -> None:
    assert (
        parse_command("vllm serve m --served-model-name 'oops --max-model-len 2048", packs.fixes).facts[
            "model"
        ]
        == "m"
    )


def test_the_linter_reads_the_flag_history_so_both_say_0_6_4_rejects_max_context_len(
    packs: RulePacks,
) -> None:
    """Issue 11: the linter said 0.6.4 accepts --max-context-len-to-capture, flags.yaml said it was
    removed in 0.6.6. vLLM's arg_utils.py has it up to 0.6.3 and not in 0.6.4; there is one table now."""
    command = "vllm serve m --max-context-len-to-capture 8192"
    assert packs.fixes.flags["--max-context-len-to-capture"].versions.removed == "0.6.4"
    assert parse_command(command, packs.fixes, "0.6.3").issues == []
    issues = parse_command(command, packs.fixes, "0.6.4").issues
    assert [(i.rule, i.severity) for i in issues] == [("vllm-flag-removed", "error")]
    assert "removed in vLLM 0.6.4, so 0.6.4 rejects it" in issues[0].message


def test_underscore_spellings_aliases_and_negated_switches_state_facts(packs: RulePacks) -> None:
    parsed = parse_command(
        "vllm serve m --max_model_len 8192 -q awq -pp 2 --device-memory-utilization 0.8 --no-enforce-eager",
        packs.fixes,
        "0.31.0",
    )
    assert parsed.facts == {
        "model": "m",
        "max_model_len": 8192,
        "quantization": "awq",
        "pipeline_parallel_size": 2,
        "gpu_memory_utilization": 0.8,
        "enforce_eager": False,
    }
    assert parsed.issues == []
    older = parse_command("vllm serve m --device-memory-utilization 0.8", packs.fixes, "0.30.0").issues
    assert [i.rule for i in older] == ["vllm-flag-not-yet-added"]


@pytest.mark.parametrize(
    "log",
    [
        # a shell block with `\` continuations, the model a placeholder
        "```bash\nVLLM_USE_V1=1 vllm serve <model> \\\n  --gpu-memory-utilization 0.91 \\\n"
        "  --max-model-len 65536 \\\n  --trust-remote-code\n```",
        # the same with the backslashes lost in the paste
        "vllm serve meta-llama/Llama-3.1-8B-Instruct\n    --gpu-memory-utilization 0.91\n"
        "    --max-model-len 65536",
        # an inline code span a hard wrap split inside a word
        "I start it with `python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-\n"
        "Instruct --gpu-memory-utilization 0.91 --max-model-len 65536` and it dies",
    ],
)
def test_a_command_is_read_to_its_end_over_the_lines_a_paste_split_it_on(log: str, packs: RulePacks) -> None:
    facts = classify_text(log, packs).facts
    assert facts.gpu_memory_utilization == 0.91
    assert facts.max_model_len == 65536


def test_a_command_ends_where_its_block_does(packs: RulePacks) -> None:
    log = "vllm serve meta-llama/Llama-3.1-8B --max-model-len 8192\nINFO 05-01 args --max-model-len 4"
    assert classify_text(log, packs).facts.max_model_len == 8192


def test_engine_settings_in_the_shapes_wrappers_take_them_are_facts(packs: RulePacks) -> None:
    # a YAML block of engine arguments, a harness's --model_args pairs and a dict a wrapper logged
    log = "\n".join(
        [
            "deployment:",
            "  engine_kwargs:",
            "    tensor_parallel_size: 2",
            "    max_model_len: 16384",
            "lm_eval --model vllm --model_args pretrained=org/m,gpu_memory_utilization=0.7,max_num_seqs=32",
            "INFO loading with config: {'trust_remote_code': True, 'block_size': 32, 'max_num_seqs': 32}",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    facts = classify_text(log, packs).facts
    assert facts.tensor_parallel_size == 2
    assert facts.max_model_len == 16384
    assert facts.gpu_memory_utilization == 0.7
    assert facts.max_num_seqs == 32
    assert facts.block_size == 32
