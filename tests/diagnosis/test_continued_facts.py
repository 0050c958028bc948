"""Every number a decisive line states comes out exact however the paste broke or re-printed it:
hard-wrapped at any column (inside a number or unit too), re-wrapped with indentation, JSON-escaped,
repr'd as a tuple, retyped, or stated by a command pasted in any form `service.launch` reads."""

from __future__ import annotations

import msgspec
import pytest

from service.diagnosis import classify_text
from service.diagnosis.continued import retyped_form
from service.packs import RulePacks

STARTUP = (
    "ValueError: Free memory on device (1.33/23.98 GiB) on startup is less than desired GPU memory "
    "utilization (0.95, 22.79 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
    "processes."
)
STARTUP_FACTS = {"free_gib": 1.33, "total_gib": 23.98, "gpu_memory_utilization": 0.95, "requested_gib": 22.79}
KV = (
    "ValueError: To serve at least one request with the model's max seq len (32768), (4.26 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (2.50 GiB). Based on the available "
    "memory, the estimated maximum model length is 21952. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)
KV_FACTS = {
    "max_model_len": 32768,
    "needed_kv_cache_gib": 4.26,
    "available_kv_cache_gib": 2.5,
    "estimated_max_model_len": 21952,
}
SCHEDULER = (
    "WARNING 03-01 10:00:00 scheduler.py:706] "
    + "Input prompt (5000 tokens) is too long and exceeds limit of 4096"
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 84.00 MiB. GPU 0 has a total capacity "
    "of 31.35 GiB of which 93.06 MiB is free. Including non-PyTorch memory, this process has 30.33 GiB "
    "memory in use. Of the allocated memory 29.39 GiB is allocated by PyTorch, and 309.08 MiB is reserved "
    "by PyTorch but unallocated."
)
OOM_FACTS = {
    "tried_to_allocate_gib": 84 / 1024,
    "total_gib": 31.35,
    "free_gib": 93.06 / 1024,
    "process_in_use_gib": 30.33,
    "torch_allocated_gib": 29.39,
    "torch_reserved_unallocated_gib": 309.08 / 1024,
}


def _facts(packs: RulePacks, text: str) -> dict[str, object]:
    return dict(msgspec.to_builtins(classify_text(text, packs).facts))


def _wrapped(line: str, width: int) -> str:
    return "\n".join(line[i : i + width] for i in range(0, len(line), width))


def _subset(expected: dict[str, object], facts: dict[str, object]) -> dict[str, object]:
    return {name: facts.get(name) for name in expected}


@pytest.mark.parametrize("width", [37, 50, 64, 80, 97, 120])
@pytest.mark.parametrize(("line", "expected"), [(STARTUP, STARTUP_FACTS), (KV, KV_FACTS), (OOM, OOM_FACTS)])
def test_a_line_hard_wrapped_at_any_column_keeps_every_number(
    packs: RulePacks, line: str, expected: dict[str, object], width: int
) -> None:
    assert _subset(expected, _facts(packs, _wrapped(line, width))) == pytest.approx(expected)


def test_a_break_inside_a_number_or_a_unit_is_read_across(packs: RulePacks) -> None:
    startup = STARTUP.replace("22.79 GiB", "22.7\n9 GiB")
    kv = KV.replace("KV cache is needed", "KV cach\ne is needed").replace("2.50 GiB", "2.5\n0 GiB")
    assert _subset(STARTUP_FACTS, _facts(packs, startup)) == STARTUP_FACTS
    assert _subset(KV_FACTS, _facts(packs, kv)) == KV_FACTS


def test_a_line_a_person_rewrapped_with_indentation_keeps_its_tail(packs: RulePacks) -> None:
    text = STARTUP.replace(" on startup is less than", " on startup is less\n        than", 1)
    assert _subset(STARTUP_FACTS, _facts(packs, "    " + text)) == STARTUP_FACTS


def test_a_person_rewrapping_at_spaces_without_indentation_is_read_with_spaces(packs: RulePacks) -> None:
    text = STARTUP.replace(" desired GPU memory ", " desired GPU\nmemory ", 1)
    assert _subset(STARTUP_FACTS, _facts(packs, text)) == STARTUP_FACTS


def test_a_message_inside_a_json_string_with_escaped_newlines_states_its_numbers(packs: RulePacks) -> None:
    body = '{"error": "Traceback (most recent call last):\\n  File \\"a.py\\", line 1\\n' + KV + '"}'
    assert _subset(KV_FACTS, _facts(packs, body)) == KV_FACTS


def test_a_message_repr_d_as_a_tuple_of_strings_is_read_rejoined(packs: RulePacks) -> None:
    head, tail = STARTUP.split("desired GPU memory", 1)
    text = f"RuntimeError: ('{head.removeprefix('ValueError: ')}', 'desired GPU memory{tail}')"
    assert _subset(STARTUP_FACTS, _facts(packs, text)) == STARTUP_FACTS


def test_a_retyped_gb_and_doubled_spaces_still_state_the_request(packs: RulePacks) -> None:
    text = STARTUP.replace("(0.95, 22.79 GiB)", "(0.95,  22.79 GB)")
    assert _subset(STARTUP_FACTS, _facts(packs, text)) == STARTUP_FACTS


def test_a_number_quoted_in_a_persons_sentence_is_read(packs: RulePacks) -> None:
    text = "it says " + STARTUP.removeprefix("ValueError: ") + " even though nothing else runs"
    assert _subset(STARTUP_FACTS, _facts(packs, text)) == STARTUP_FACTS


def test_a_complete_line_keeps_its_number_when_the_next_line_starts_a_record(packs: RulePacks) -> None:
    text = SCHEDULER + "\n2024-03-01 10:00:01 12 requests failed"
    facts = _facts(packs, text)
    assert (facts.get("requested_tokens"), facts.get("context_limit")) == (5000, 4096)


@pytest.mark.parametrize(
    "command",
    [
        "$ vllm serve meta-llama/Llama-3.1-8B --max_model_len 8192 --gpu_memory_utilization 0.6",
        "$ vllm serve meta-llama/Llama-3.1-8B --max-model-len=8192 --gpu-memory-utilization=0.6",
        'llm = LLM(model="meta-llama/Llama-3.1-8B", gpu_memory_utilization=0.6, max_model_len=8192)',
        "args = EngineArgs(model='m/x', max_model_len=8192, gpu_memory_utilization=0.6)",
        "INFO 01-01 00:00:00 api_server.py:1] args: Namespace(model='m/x', max_model_len=8192, "
        "gpu_memory_utilization=0.6)",
    ],
)
def test_a_command_pasted_in_the_log_states_its_settings_in_every_spelling(
    packs: RulePacks, command: str
) -> None:
    facts = _facts(
        packs, command + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    )
    assert _subset({"max_model_len": 0, "gpu_memory_utilization": 0}, facts) == {
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.6,
    }


@pytest.mark.parametrize(
    ("line", "limit", "requested"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, you requested 254457 tokens "
            "(254457 in the messages, 0 in the completion).",
            8192,
            254457,
        ),
        (
            "ValueError: The decoder prompt (length 4926) is longer than the maximum model length of 4096.",
            4096,
            4926,
        ),
        ("ValueError: Input length (9000) exceeds model's maximum context length (8192).", 8192, 9000),
    ],
)
def test_request_too_long_states_the_limit_and_the_max_model_len_it_is(
    packs: RulePacks, line: str, limit: int, requested: int
) -> None:
    diagnosis = classify_text(line, packs)
    facts = diagnosis.facts
    assert (diagnosis.phase, facts.context_limit, facts.max_model_len, facts.requested_tokens) == (
        "request_too_long",
        limit,
        limit,
        requested,
    )


def test_limits_that_are_not_max_model_len_state_only_the_limit(packs: RulePacks) -> None:
    encoder = classify_text(
        "ValueError: The encoder prompt (length 1500) is longer than the maximum model length of 448.", packs
    ).facts
    scheduler = classify_text(
        SCHEDULER,
        packs,
    ).facts
    assert (encoder.context_limit, encoder.max_model_len) == (448, None)
    assert (scheduler.context_limit, scheduler.max_model_len) == (4096, None)


def test_a_message_retyped_without_parentheses_is_still_recognised_with_its_numbers(packs: RulePacks) -> None:
    text = STARTUP.replace("(", "").replace(")", "").replace(" GiB", "GB")
    diagnosis = classify_text(text, packs)
    assert diagnosis.phase == "startup_budget"
    assert _subset(STARTUP_FACTS, _facts(packs, text)) == STARTUP_FACTS


def test_a_retyped_form_only_loosens_parentheses_spaces_and_units() -> None:
    assert retyped_form(r"device \((?P<free>[\d.]+) GiB\)") == r"device +\(?(?P<free>[\d.]+) +Gi?B\)?"


def test_a_line_wrapped_twice_reads_across_the_lines_an_earlier_rejoin_emptied(packs: RulePacks) -> None:
    once = _wrapped("(EngineCore pid=42103) " + STARTUP, 80).split("\n")
    twice = "\n".join(piece for line in once for piece in _wrapped(line, 60).split("\n"))
    assert _subset(STARTUP_FACTS, _facts(packs, twice)) == STARTUP_FACTS


def test_a_continuation_keeps_reading_past_markdown_bold_around_the_message(packs: RulePacks) -> None:
    text = (
        "**ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        "Your Tesla V100-SXM2-32GB GP\nU has compute capability 7.0.**"
    )
    facts = _facts(packs, text)
    assert (facts.get("gpu_name"), facts.get("compute_capability")) == ("Tesla V100-SXM2-32GB", "7.0")


@pytest.mark.parametrize("mark", ["> ", "▎ "])
def test_a_message_wrapped_inside_a_quote_is_joined_across_its_quoted_lines(
    packs: RulePacks, mark: str
) -> None:
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.22+ wording), re-wrapped by a
    # person inside a Markdown (`> `) or rendered (`▎`) quote, the opening parenthesis lost at the break
    log = (
        f"{mark}ValueError: To serve at least one request with the model's max seq len (196608),\n"
        f"{mark}23.25 GiB KV cache is needed, which is larger than the available KV cache memory"
        " (22.5 GiB).\n"
        f"{mark}Based on the available memory, the estimated maximum model length is 190272.\n"
    )
    facts = msgspec.to_builtins(classify_text(log, packs).facts)
    assert (facts["max_model_len"], facts["needed_kv_cache_gib"], facts["available_kv_cache_gib"]) == (
        196608,
        23.25,
        22.5,
    )
    assert facts["estimated_max_model_len"] == 190272


_SPLIT_CALL = (
    "llm = LLM(\n"
    "    model=model_path,  # a variable: states nothing\n"
    '    dtype="float16",  # the card has no bfloat16\n'
    "    tensor_parallel_size=4,\n"
    "    enforce_eager=False,\n"
    '    limit_mm_per_prompt={"image": 10},\n'
    ")\n"
)


@pytest.mark.parametrize(
    "paste",
    [
        _SPLIT_CALL + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "```python\n" + _SPLIT_CALL + "```\nit OOMs after a few batches",
        # the paste ends inside the call: the keywords typed before the cut still state settings
        "```python\n" + _SPLIT_CALL.split("    limit_mm")[0] + "    limit_mm_per_pro\n```\nit OOMs",
    ],
)
def test_a_python_call_split_one_keyword_a_line_states_strings_and_switches(
    packs: RulePacks, paste: str
) -> None:
    facts = _facts(packs, paste)
    assert _subset({"dtype": 0, "tensor_parallel_size": 0, "enforce_eager": 0, "entrypoint": 0}, facts) == {
        "dtype": "float16",
        "tensor_parallel_size": 4,
        "enforce_eager": False,
        "entrypoint": "llm",
    }
