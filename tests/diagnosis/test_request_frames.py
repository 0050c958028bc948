"""The OpenAI server's request path and per-class rows in the frame table (tools/vllm_callgraph.py
REQUEST_ENTRIES, owners): frame lines as vLLM's released sources have them (paths, functions, lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.diagnosis import classify_text
from service.diagnosis.frames import deepest_frame, frame_place
from service.diagnosis.normalize import Document
from service.packs import RulePacks

SITE = "/usr/local/lib/python3.12/dist-packages/vllm"
TABLE = Path(__file__).resolve().parents[2] / "rules" / "frames" / "vllm.json"


@pytest.mark.parametrize(
    ("file", "function", "line"),
    [
        ("entrypoints/openai/api_server.py", "create_chat_completion", 312),  # 0.6.3's route handler
        ("entrypoints/openai/serving_chat.py", "create_chat_completion", 93),
        ("entrypoints/openai/serving_engine.py", "_validate_input", 630),
        ("v1/engine/processor.py", "_validate_model_input", 487),
    ],
)
def test_the_openai_servers_request_frames_are_at_the_serving_stage(
    packs: RulePacks, file: str, function: str, line: int
) -> None:
    place = frame_place(
        packs.signatures.frames, f'File "{SITE}/{file}", line {line}, in {function}', 1, (0, 10, 2)
    )
    assert place is not None and place.stage == "serving"


@pytest.mark.parametrize("function", ["run_server", "build_async_engine_client"])
def test_the_servers_start_up_is_not_a_request(packs: RulePacks, function: str) -> None:
    text = f'File "{SITE}/entrypoints/openai/api_server.py", line 100, in {function}'
    place = frame_place(packs.signatures.frames, text, 1, (0, 6, 3))
    assert place is None or place.stage != "serving"


def test_a_request_cut_inside_the_engines_length_check_is_request_too_long(packs: RulePacks) -> None:
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{SITE}/entrypoints/openai/serving_chat.py", line 289, in create_chat_completion',
            "    generator = self.engine_client.generate(",
            f'  File "{SITE}/v1/engine/async_llm.py", line 375, in generate',
            "    q = await self.add_request(",
            f'  File "{SITE}/v1/engine/async_llm.py", line 289, in add_request',
            "    prompt_str, request = self.processor.process_inputs(",
            f'  File "{SITE}/v1/engine/processor.py", line 380, in process_inputs',
            "    self._validate_model_inputs(processed_inputs, lora_request)",
            f'  File "{SITE}/v1/engine/processor.py", line 449, in _validate_model_inputs',
            "    self._validate_model_input(decoder_inputs,",
            f'  File "{SITE}/v1/engine/processor.py", line 487, in _validate_model_input',
            "    raise ValueError(",
        ]
    )
    assert classify_text(log, packs, vllm_version="0.10.2").phase == "request_too_long"


def _v063_verify(receiver: str) -> Document:
    """V0 0.6.3's `LLMEngine._verify_args` calling one config's `verify_with_parallel_config`, cut."""
    return Document(
        "\n".join(
            [
                "Traceback (most recent call last):",
                f'  File "{SITE}/engine/llm_engine.py", line 626, in _verify_args',
                f"    self.{receiver}.verify_with_parallel_config(self.parallel_config)",
                f'  File "{SITE}/config.py", line 667, in verify_with_parallel_config',
                '    raise ValueError("Too large swap space. " + msg)',
            ]
        )
    )


def test_the_callers_attribute_names_the_class_of_a_shared_method_name(packs: RulePacks) -> None:
    table = packs.signatures.frames
    doc = _v063_verify("cache_config")
    place = deepest_frame(doc, table, 1, len(doc.lines), version=(0, 6, 3))
    assert place is not None and place.function == "verify_with_parallel_config"
    assert place.phase == "host_oom"  # CacheConfig's swap-space check, not ModelConfig's
    other = _v063_verify("model_config")
    modelled = deepest_frame(other, table, 1, len(other.lines), version=(0, 6, 3))
    assert modelled is not None and modelled.phase != "host_oom"


def test_without_its_caller_a_shared_method_name_names_no_phase(packs: RulePacks) -> None:
    text = f'File "{SITE}/config.py", line 667, in verify_with_parallel_config'
    place = frame_place(packs.signatures.frames, text, 1, (0, 6, 3))
    assert place is not None and place.stage == "config" and place.phase is None


def test_the_generator_says_which_names_it_keyed_by_class_or_dropped() -> None:
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    assert "config.py:verify_with_parallel_config" in table["qualified"]
    assert isinstance(table["ambiguous"], list)
    owned = [
        row for row in table["frames"] if row[0] == "config.py" and row[1] == "verify_with_parallel_config"
    ]
    assert {row[5] for row in owned} == {"ModelConfig", "CacheConfig"}
