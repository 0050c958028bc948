"""Reading what people type in Slack: logs, commands, host names, sizing questions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.parse import HOST_NAME, parse_ask, parse_length, parse_sizing, unescape_slack

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.19 GiB"
)


def test_slack_escapes_are_undone_and_mentions_dropped() -> None:
    wire = "<@U0BOT> x &lt; y &amp;&amp; z &gt; 0 <http://0.0.0.0:8000|0.0.0.0:8000> <#C01|ops> <!here>"
    assert unescape_slack(wire) == " x < y && z > 0 0.0.0.0:8000 #ops "


def test_link_without_label_keeps_the_url() -> None:
    assert unescape_slack("see <https://docs.vllm.ai/en/latest>") == "see https://docs.vllm.ai/en/latest"


def test_fenced_log_keeps_the_words_around_it_and_the_prose_names_hosts() -> None:
    ask = parse_ask(f"<@U0BOT> crashed on gpu-07:\n```\nINFO 11-29 10:00:01 loading\n{OOM}\n```")
    assert ask.log == f"crashed on gpu-07:\n```\nINFO 11-29 10:00:01 loading\n{OOM}\n```"
    assert ask.hosts == ("gpu-07",)


def test_fences_alone_are_joined_in_order() -> None:
    ask = parse_ask("```first part``````second part```")
    assert ask.log == "first part\nsecond part"


def test_words_between_fences_stay_in_the_log_for_the_prose_channel() -> None:
    ask = parse_ask("```first part```\nit crashed while loading the weights\n```second part```")
    assert ask.log is not None and "crashed while loading the weights" in ask.log


def test_unclosed_fence_still_yields_the_log() -> None:
    assert parse_ask(f"```\n{OOM}").log == OOM


def test_unfenced_single_error_line_is_a_log() -> None:
    ask = parse_ask(f"<@U0BOT> {OOM}")
    assert ask.log == OOM
    assert ask.hosts == ()


def test_unfenced_multiline_paste_is_a_log_without_hosts_from_its_lines() -> None:
    paste = "INFO 11-29 10:00:01 [gpu_worker.py:100] node-3 ready\nWARNING something\n" + OOM
    ask = parse_ask(paste)
    assert ask.log == paste
    assert ask.hosts == ()


def test_escaped_log_is_unescaped() -> None:
    ask = parse_ask("```ValueError: free memory &lt; desired (0.9, 79.2 GiB)```")
    assert ask.log == "ValueError: free memory < desired (0.9, 79.2 GiB)"


def test_vllm_serve_command_is_read_across_continuation_lines() -> None:
    ask = parse_ask(
        "```\n$ vllm serve Qwen/Qwen2.5-7B-Instruct \\\n    --max-model-len 32768 \\\n    -tp 2\n```"
    )
    assert ask.command == "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 -tp 2"
    assert ask.log is not None and "vllm serve" in ask.log


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu-07", ("gpu-07",)),
        ("on gpu-07 and gpu-08", ("gpu-07", "gpu-08")),
        ("check gpu-07, gpu-08 & dgx-a100-3.lab please", ("gpu-07", "gpu-08", "dgx-a100-3.lab")),
        ("what about `node3`?", ("node3",)),
        ("how is host trainbox doing", ("trainbox",)),
        ("GPU-07", ("gpu-07",)),
        ("on my A100 with vllm 0.6.3", ()),
        ("hello there", ()),
    ],
)
def test_host_names_are_read_from_prose(text: str, hosts: tuple[str, ...]) -> None:
    assert parse_ask(text).hosts == hosts


def test_vllm_version_in_prose_is_a_hint() -> None:
    assert parse_ask("gpu-07 runs vllm 0.8.5").vllm_version == "0.8.5"


def test_sizing_question_with_count_gpu_and_context() -> None:
    request = parse_ask("<@U0BOT> will Llama-3.1-70B fit on 2×A100-80GB at 32k?").estimate
    assert request is not None
    assert (request.model, request.gpu, request.gpus, request.max_model_len) == (
        "Llama-3.1-70B",
        "A100-80GB",
        2,
        32768,
    )


def test_estimate_phrasing() -> None:
    request = parse_sizing("estimate qwen2.5-7b on L4")
    assert request is not None
    assert (request.model, request.gpu, request.gpus, request.max_model_len) == ("qwen2.5-7b", "L4", 1, None)


def test_sizing_options_are_read() -> None:
    request = parse_sizing(
        "does mistral-7b fit in 24GB with fp8 kv cache at 8192 tokens tp=2 awq bf16 util 0.9"
    )
    assert request is not None
    assert request.gpu is None and request.gpu_total_gib == 24.0
    assert request.kv_cache_dtype == "fp8"
    assert request.quantization == "awq"
    assert request.dtype == "bfloat16"
    assert request.tensor_parallel_size == 2
    assert request.gpu_memory_utilization == 0.9
    assert request.max_model_len == 8192


@pytest.mark.parametrize(
    "text", ["2xA100 fits?", "will it fit on 2 H100?", "gpu-07 is fine", "the fit is bad"]
)
def test_not_a_sizing_question(text: str) -> None:
    assert parse_sizing(text) is None


@pytest.mark.parametrize(
    ("raw", "tokens"), [("32k", 32768), ("8192", 8192), ("25.6k", 26214), ("1M", 1048576)]
)
def test_lengths(raw: str, tokens: int) -> None:
    assert parse_length(raw) == tokens


def test_help_and_empty() -> None:
    assert parse_ask("help").help
    assert parse_ask("<@U0BOT> help?").help
    assert parse_ask("<@U0BOT>").empty


@given(st.text(max_size=400))
def test_any_text_parses_without_error_and_hosts_are_lookup_keys(text: str) -> None:
    ask = parse_ask(text)
    assert all(HOST_NAME.match(host) for host in ask.hosts)
    assert all("/" not in host and ":" not in host for host in ask.hosts)


def test_unfenced_paste_takes_hosts_only_from_the_lines_before_it() -> None:
    paste = (
        "gpu-07 crashed at startup:\n"
        "INFO 11-29 10:00:01 [gpu_worker.py:100] starting\n"
        "    return self._call_impl(sm_80, node42)\n"
        "torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    ask = parse_ask(paste)
    assert ask.hosts == ("gpu-07",)
    assert ask.log == paste.strip()


@pytest.mark.parametrize(
    ("text", "model", "gpu", "gpus", "length"),
    [
        ("will llama 70b fit on 2x a100 80gb at 32k", "llama-70b", "a100-80gb", 2, 32768),
        ("will llama 3.1 70b fit on 2 a100 80gb at 32k?", "llama-3.1-70b", "a100-80gb", 2, 32768),
        ("will qwen2.5 7b fit on l4", "qwen2.5-7b", "l4", 1, None),
        ("qwen 7b fits on rtx 4090?", "qwen-7b", "rtx-4090", 1, None),
    ],
)
def test_sizing_question_typed_with_spaces_is_a_sizing_question_not_hosts(
    text: str, model: str, gpu: str, gpus: int, length: int | None
) -> None:
    ask = parse_ask(text)
    assert ask.hosts == ()
    assert ask.estimate is not None
    assert (ask.estimate.model, ask.estimate.gpu, ask.estimate.gpus) == (model, gpu, gpus)
    assert ask.estimate.max_model_len == length


@pytest.mark.parametrize(
    "text", ["why does my model not fit on gpu-07", "does it fit on gpu-07?", "will it fit on gpu-07"]
)
def test_fit_questions_about_a_host_still_name_the_host(text: str) -> None:
    ask = parse_ask(text)
    assert ask.estimate is None
    assert ask.hosts == ("gpu-07",)


@pytest.mark.parametrize(
    ("text", "command", "hosts", "version"),
    [
        (
            "will `vllm serve Qwen/Qwen2.5-72B-Instruct -tp 4 --max-model-len 32768` start on gpu-07?",
            "vllm serve Qwen/Qwen2.5-72B-Instruct -tp 4 --max-model-len 32768",
            ("gpu-07",),
            None,
        ),
        (
            "would vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8k "
            "run on gpu-08 with vllm 0.24?",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8k",
            ("gpu-08",),
            "0.24",
        ),
        (
            "can this start on node-3?\n```\n"
            "CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen3-8B \\\n  --max-model-len 4096\n```",
            "CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen3-8B \\\n  --max-model-len 4096",
            ("node-3",),
            None,
        ),
    ],
    ids=["inline-code", "bare-words", "fenced-continued"],
)
def test_a_launch_question_is_a_preflight_of_its_command_on_its_host(
    text: str, command: str, hosts: tuple[str, ...], version: str | None
) -> None:
    ask = parse_ask(text)
    assert (ask.preflight, ask.hosts, ask.vllm_version) == (command, hosts, version)
    assert ask.log is None and ask.estimate is None


@pytest.mark.parametrize(
    "text",
    [
        "will Llama-3.1-70B fit on 2xA100-80GB at 32k?",
        "why did `vllm serve x` crash on gpu-07?",
        "will it start?",
    ],
)
def test_questions_without_a_command_to_start_are_not_preflights(text: str) -> None:
    assert parse_ask(text).preflight is None
