"""The one launch-command reader: every form people paste gives the same flags, facts and fixes."""

from __future__ import annotations

import pytest

from service.diagnosis.command import parse_command as diagnosis_parse
from service.fixes.command import corrected_command as corrected_change
from service.launch import parse_launch
from service.packs import RulePacks

SHELL = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.6 -tp 2"
MODULE = (
    "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-7B-Instruct "
    "--max_model_len=8192 --gpu_memory_utilization 0.6 --tensor-parallel-size=2"
)
PYTHON = (
    'llm = LLM(model="Qwen/Qwen2.5-7B-Instruct", max_model_len=8192, gpu_memory_utilization=0.6, '
    "tensor_parallel_size=2)"
)
NAMESPACE = (
    "INFO 05-01 12:00:00 api_server.py:585] args: Namespace(subparser='serve', "
    "model_tag='Qwen/Qwen2.5-7B-Instruct', host=None, port=8000, max_model_len=8192, "
    "gpu_memory_utilization=0.6, tensor_parallel_size=2, enforce_eager=False, swap_space=4, "
    "dispatch_function=<function ServeSubcommand.cmd at 0x7f00>, middleware=[])"
)
COMPOSE_LIST = """services:
  vllm:
    image: vllm/vllm-openai:v0.9.2
    environment:
      - CUDA_VISIBLE_DEVICES=1
    command:
      - --model
      - Qwen/Qwen2.5-7B-Instruct
      - --max-model-len=8192
      - --gpu-memory-utilization
      - "0.6"
      - -tp
      - "2"
"""
COMPOSE_STRING = """vllm:
  image: vllm/vllm-openai:latest
  environment:
    CUDA_VISIBLE_DEVICES: "1"
  command: --model Qwen/Qwen2.5-7B-Instruct --max-model-len 8k --gpu-memory-utilization 0.6 -tp 2
"""

EXPECTED = {
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "max_model_len": 8192,
    "gpu_memory_utilization": 0.6,
    "tensor_parallel_size": 2,
}


@pytest.mark.parametrize(
    ("text", "form"),
    [
        (SHELL, "shell"),
        (MODULE, "shell"),
        (PYTHON, "python"),
        (NAMESPACE, "namespace"),
        (COMPOSE_LIST, "compose"),
    ],
)
def test_every_form_states_the_same_facts(text: str, form: str, packs: RulePacks) -> None:
    assert parse_launch(text, packs.fixes.aliases).form == form
    facts = diagnosis_parse(text, packs.fixes).facts
    assert {name: facts.get(name) for name in EXPECTED} == EXPECTED


def test_compose_string_command_reads_vllm_numbers_and_its_environment(packs: RulePacks) -> None:
    launch = parse_launch(COMPOSE_STRING, packs.fixes.aliases)
    assert launch.form == "compose"
    assert launch.env_value("CUDA_VISIBLE_DEVICES") == "1"
    # in a command, vLLM reads a lower-case k as 1,000 (service.quantities)
    assert diagnosis_parse(COMPOSE_STRING, packs.fixes).facts["max_model_len"] == 8000


def test_compose_list_keeps_its_environment(packs: RulePacks) -> None:
    launch = parse_launch(COMPOSE_LIST, packs.fixes.aliases)
    assert launch.env_value("CUDA_VISIBLE_DEVICES") == "1"
    assert launch.value("--tensor-parallel-size") == "2"


def test_env_file_lines_are_environment_only(packs: RulePacks) -> None:
    text = '# vllm.env\nexport VLLM_USE_V1=0\nCUDA_VISIBLE_DEVICES="0,1"\nHF_HOME=/data/hf  # cache\n'
    launch = parse_launch(text, packs.fixes.aliases)
    assert launch.form == "env"
    assert launch.env == (("VLLM_USE_V1", "0"), ("CUDA_VISIBLE_DEVICES", "0,1"), ("HF_HOME", "/data/hf"))
    assert launch.args == ()


def test_an_assignment_before_a_command_is_its_environment_not_an_env_file(packs: RulePacks) -> None:
    launch = parse_launch("CUDA_VISIBLE_DEVICES=1 vllm serve m -tp 2", packs.fixes.aliases)
    assert launch.form == "shell"
    assert launch.env == (("CUDA_VISIBLE_DEVICES", "1"),)
    assert launch.value("--tensor-parallel-size") == "2"


def test_export_lines_before_a_command_are_its_environment(packs: RulePacks) -> None:
    launch = parse_launch(
        "export CUDA_VISIBLE_DEVICES=3\nvllm serve m --max-model-len 4096", packs.fixes.aliases
    )
    assert launch.env_value("CUDA_VISIBLE_DEVICES") == "3"
    assert launch.value("--max-model-len") == "4096"
    assert launch.model == "m"


def test_python_positional_model_and_booleans(packs: RulePacks) -> None:
    facts = diagnosis_parse(
        'LLM("facebook/opt-125m", enforce_eager=True, max_model_len=2048)', packs.fixes
    ).facts
    assert facts == {
        "model": "facebook/opt-125m",
        "entrypoint": "llm",
        "enforce_eager": True,
        "max_model_len": 2048,
    }


def test_python_values_that_are_not_literals_state_nothing(packs: RulePacks) -> None:
    facts = diagnosis_parse(
        "LLM(model=path, max_model_len=n * 2, gpu_memory_utilization=0.5)", packs.fixes
    ).facts
    assert facts == {"entrypoint": "llm", "gpu_memory_utilization": 0.5}


def test_a_logged_namespace_is_what_vllm_accepted_so_it_has_no_flag_findings(packs: RulePacks) -> None:
    parsed = diagnosis_parse(NAMESPACE, packs.fixes, "0.20.0")
    assert parsed.issues == []
    assert parsed.facts["enforce_eager"] is False
    # the same flag typed in a command for that version is rejected
    assert [i.rule for i in diagnosis_parse("vllm serve m --swap-space 4", packs.fixes, "0.20.0").issues] == [
        "vllm-flag-removed"
    ]


def test_a_python_form_is_corrected_as_the_equivalent_vllm_serve_line(packs: RulePacks) -> None:
    assert corrected_change(PYTHON, "--max-model-len 4096", packs.fixes.aliases) == (
        "vllm serve --model Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.6 --tensor-parallel-size 2 "
        "--max-model-len 4096"
    )


def test_docker_words_before_the_image_are_kept_and_not_read_as_vllm_flags(packs: RulePacks) -> None:
    command = "docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.9.2 --model m --max-model-len 4096"
    launch = parse_launch(command, packs.fixes.aliases)
    assert launch.prefix == ("docker", "run", "--gpus", "all", "-p", "8000:8000", "vllm/vllm-openai:v0.9.2")
    assert set(launch.flags) == {"--model", "--max-model-len"}
    assert corrected_change(command, "--max-model-len 2048", packs.fixes.aliases) == (
        "docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.9.2 --model m --max-model-len 2048"
    )


def test_a_python_call_cut_off_is_read_up_to_its_last_whole_argument(packs: RulePacks) -> None:
    launch = parse_launch("LLM(model='x', dtype=\"float16\", max_model_len=", packs.fixes.aliases)
    assert launch.form == "python"
    assert launch.flags == {"--model": ("x",), "--dtype": ("float16",)}


def test_unparseable_python_and_yaml_fall_back_to_shell_words(packs: RulePacks) -> None:
    assert parse_launch("LLM(model='x'", packs.fixes.aliases).form == "shell"
    broken = "command: [--model, m\n  --max-model-len: 4096"
    assert parse_launch(broken, packs.fixes.aliases).form == "shell"


def test_a_call_spread_over_lines_ends_at_its_own_closing_bracket(packs: RulePacks) -> None:
    text = 'from vllm import LLM\nllm = LLM(\n    model="m",\n    max_model_len=int("4096"),\n'
    text += "    block_size=32,\n)\nprint(llm)"
    assert parse_launch(text, packs.fixes.aliases).flags == {"--model": ("m",), "--block-size": ("32",)}


def test_the_llm_class_and_the_api_server_are_told_apart() -> None:
    assert parse_launch("llm = LLM(model='Qwen/Qwen2.5-7B', max_model_len=8192)").entrypoint == "llm"
    assert parse_launch("vllm serve Qwen/Qwen2.5-7B --max-model-len 8192").entrypoint == "serve"
    assert parse_launch("python -m vllm.entrypoints.openai.api_server --model x").entrypoint == "serve"
    assert parse_launch("engine_args = EngineArgs(model='x')").entrypoint is None


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.6，显卡是A10",
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.6。然后就报错了",
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.6；还是不行",
    ],
)
def test_a_full_width_mark_ends_the_command_the_sentence_goes_on_from(text: str, packs: RulePacks) -> None:
    launch = parse_launch(text, packs.fixes.aliases, packs.fixes.switches)
    assert launch.value("--gpu-memory-utilization") == "0.6"
    assert launch.model == "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize(
    "text",
    [
        "python -m fastchat.serve.vllm_worker --model-path /models/m --tensor-parallel-size 2 --dtype half",
        "python3 -m myorg.serving.vllm_server --tensor-parallel-size 2 --max-model-len 4096",
    ],
)
def test_a_module_named_for_vllm_passes_vllm_engine_arguments(text: str, packs: RulePacks) -> None:
    parsed = diagnosis_parse(text, packs.fixes)
    assert parsed.facts["tensor_parallel_size"] == 2
    assert "--model-path" not in packs.fixes.flags  # the wrapper's own flags state nothing


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("docker run --gpus all -m 16g vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct", "16g"),
        ("sudo docker run --memory=48g vllm/vllm-openai --model Qwen/Qwen2.5-7B-Instruct", "48g"),
        ("docker run --memory 6g --memory-swap 8g vllm/vllm-openai --model Qwen/Qwen2.5-7B-Instruct", "6g"),
        ("docker run --gpus all vllm/vllm-openai --model Qwen/Qwen2.5-7B-Instruct", None),
        ("vllm serve Qwen/Qwen2.5-7B-Instruct -m 4", None),
    ],
)
def test_a_containers_memory_limit_is_read_before_the_image(text: str, limit: str | None) -> None:
    assert parse_launch(text).memory_limit == limit
