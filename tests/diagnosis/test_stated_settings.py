"""Engine settings stated outside a command vramdoc recognises whole are read in every spelling of
vLLM's own flags (rules/fixes/flags.yaml): a bare flag line of a script, a benchmark script, a
compose or k8s argument list, the keyword lines of an `LLM(` call split over lines or cut, a YAML
config, and a person's sentence. What vLLM printed itself still comes first.

Flag spellings are vLLM's: `vllm/engine/arg_utils.py` `EngineArgs.add_cli_args` (0.2.7-0.33.0)
defines `--tensor-parallel-size`/`-tp`, `--pipeline-parallel-size`/`-pp`, `--max-model-len`,
`--gpu-memory-utilization`, `--block-size`, `--max-num-seqs`; argparse (vllm/utils
FlexibleArgumentParser, 0.4+) also takes `--max_model_len`; the engine's config and `LLM(**kwargs)`
take the field names (`tensor_parallel_size=2`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.diagnosis import classify_text
from service.diagnosis.normalize import Document
from service.diagnosis.settings import stated_settings
from service.packs import RulePacks

KV_CHECK = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine."
)  # vllm/worker/worker.py raise_if_cache_size_invalid (0.4.3-0.10.2)


def _facts(packs: RulePacks, log: str) -> dict[str, object]:
    facts = msgspec.to_builtins(classify_text(log, packs).facts)
    return {k: v for k, v in facts.items() if v is not None}


def _settings(packs: RulePacks, log: str) -> list[tuple[int, str, object]]:
    return [(s.line, s.fact, s.value) for s in stated_settings(Document(log), packs.fixes)]


def test_bare_flag_lines_of_a_script_whose_first_line_was_cut_are_read(packs: RulePacks) -> None:
    log = "--tensor-parallel-size 4 \\\n--block-size 256 \\\n--gpu-memory-utilization 0.97 \\\n" + KV_CHECK
    facts = _facts(packs, log)
    stated = (facts["tensor_parallel_size"], facts["block_size"], facts["gpu_memory_utilization"])
    assert stated == (4, 256, 0.97)


def test_a_benchmark_script_taking_engine_arguments_states_them(packs: RulePacks) -> None:
    log = (
        "CUDA_VISIBLE_DEVICES=0 VLLM_USE_V1=1 python3 benchmarks/benchmark_latency.py "
        '--model "meta-llama/Llama-3.2-1B" --tensor-parallel-size 1 --gpu-memory-utilization 0.2\n' + KV_CHECK
    )
    facts = _facts(packs, log)
    assert (facts["tensor_parallel_size"], facts["gpu_memory_utilization"]) == (1, 0.2)
    assert facts["model"] == "meta-llama/Llama-3.2-1B"  # an id or a path: lm-eval's `--model vllm` is none


def test_a_quoted_argument_list_and_a_yaml_block_list_are_read(packs: RulePacks) -> None:
    compose = '  "--tensor-parallel-size", "2",\n  "--max-model-len", "32768",\n  "--max-num-seqs", "64",'
    assert _settings(packs, compose) == [
        (1, "tensor_parallel_size", 2),
        (2, "max_model_len", 32768),
        (3, "max_num_seqs", 64),
    ]
    k8s = '    args:\n      - --max-model-len\n      - "8192"\n      - --gpu-memory-utilization=0.85'
    assert _settings(packs, k8s) == [(2, "max_model_len", 8192), (4, "gpu_memory_utilization", 0.85)]


def test_keyword_lines_of_a_split_or_cut_llm_call_are_read(packs: RulePacks) -> None:
    split = "llm = LLM(\n  model=path,\n  tensor_parallel_size=2,  # 2 GPUs\n  pipeline_parallel_size=2,\n)"
    assert _settings(packs, split) == [(3, "tensor_parallel_size", 2), (4, "pipeline_parallel_size", 2)]
    # an unclosed string literal: `ast` reads nothing of the call, the keyword is still there
    cut = "llm = LLM(model=\"TheBloke/Llama-2-70B-AWQ, quantization='awq', tensor_parallel_size=8)"
    assert _facts(packs, cut)["tensor_parallel_size"] == 8


def test_underscore_flags_yaml_keys_and_sentences_state_settings(packs: RulePacks) -> None:
    assert _settings(packs, "python examples/server_example_tt.py --max_model_len 65536") == [
        (1, "max_model_len", 65536)
    ]
    assert _settings(packs, "gpu_memory_utilization: 0.87\nblock_size: 16") == [
        (1, "gpu_memory_utilization", 0.87),
        (2, "block_size", 16),
    ]
    said = [
        ("I tried setting tensor_parallel_size=2 but it says I need Ray.", 2),
        ("On 2x DGX Spark (TP=2, container vllm-node) it dies at KV-cache init.", 2),
        ("we run it with tp 8 on H100s", 8),
        ("- Model `zai-org/GLM-5.3`, block-scaled FP8, tensor parallel 8", 8),
        ("runs well on `tensor_parallel_size` 1 and 2", 1),
        ("launched with -tp 4", 4),
    ]
    for sentence, size in said:
        assert _settings(packs, sentence) == [(1, "tensor_parallel_size", size)], sentence


def test_the_settings_vllms_own_messages_name_are_read_in_their_spelling(packs: RulePacks) -> None:
    # vllm/config.py _verify_args / vllm/model_executor/models/*: the value follows the setting's
    # name in parentheses, after `=`, or after a space, in the field's or the short option's name
    said = {
        "Tensor parallel size (8) cannot be larger than the number of available GPUs (4).": [
            ("tensor_parallel_size", 8)
        ],
        "AssertionError: num_attention_heads=64 must be divisible by tp_size=3": [
            ("num_attention_heads", 64),
            ("tensor_parallel_size", 3),
        ],
        "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (32768).": [
            ("max_num_batched_tokens", 2048),
            ("max_model_len", 32768),
        ],
    }
    for text, stated in said.items():
        assert [(fact, value) for _, fact, value in _settings(packs, text)] == stated, text


def test_a_config_files_keys_state_strings_and_switches_only_where_they_open_a_line(packs: RulePacks) -> None:
    # Ray Serve LLM's `engine_kwargs:` and verl's rollout config pass EngineArgs' field names on
    config = "engine_kwargs:\n  kv_cache_dtype: fp8\n  enforce_eager: true\n  - dtype: bfloat16"
    assert [(fact, value) for _, fact, value in _settings(packs, config)] == [
        ("kv_cache_dtype", "fp8"),
        ("enforce_eager", True),
        ("dtype", "bfloat16"),
    ]
    assert _settings(packs, "out = f(dtype: x) if enforce_eager: true") == []


@pytest.mark.parametrize(
    "text",
    [
        # vLLM's own advice names flags without a value
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        "Consider reducing tensor_parallel_size to 2 or less",
        "Try decreasing max_model_len (currently unset) or tensor_parallel_size.",
        # other programs' flags of the same name, and tensors' dtypes in pasted code
        "lm_eval --model vllm --model_args pretrained=/models/x",
        "out = torch.empty(n, dtype=x.dtype)",
        "llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size)",
    ],
)
def test_words_that_name_a_flag_without_setting_it_state_nothing(packs: RulePacks, text: str) -> None:
    assert _settings(packs, text) == []


def test_what_vllm_printed_comes_before_a_setting_in_the_persons_words(packs: RulePacks) -> None:
    log = (
        "I set tensor_parallel_size=4 in my script\n"
        "INFO 10-14 21:32:44 llm_engine.py:72] Initializing an LLM engine with config: "
        "model='lmsys/vicuna-7b-v1.3', tokenizer='lmsys/vicuna-7b-v1.3', dtype=torch.float16, "
        "max_seq_len=2048, tensor_parallel_size=2, quantization=None, seed=0)\n" + KV_CHECK
    )
    diagnosis = classify_text(log, packs)
    assert diagnosis.facts.tensor_parallel_size == 2
    assert diagnosis.fact_sources["tensor_parallel_size"] == "line 2"


def test_the_first_of_several_stated_settings_wins(packs: RulePacks) -> None:
    log = (
        "--gpu-memory-utilization 0.95 --port 18081 --max-model-len 116160\n"
        "then I retried with\n"
        "--gpu-memory-utilization 0.90 --port 18081 --max-model-len 53008\n" + KV_CHECK
    )
    facts = _facts(packs, log)
    assert (facts["gpu_memory_utilization"], facts["max_model_len"]) == (0.95, 116160)


HYBRID_BOOT = """\
INFO 01-20 10:00:00 [api_server.py:1] vLLM API server version 0.14.1
INFO 01-20 10:00:05 [config.py:1] Setting attention block size to 528 tokens to ensure that \
attention page size is >= mamba page size.
INFO 01-20 10:01:00 [kv_cache_utils.py:1] GPU KV cache size: 290,864 tokens
INFO 01-20 10:01:00 [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per request: 33.04x
I started it with --max-model-len 32768 --block-size 16 and TP=2
"""


def test_settings_in_words_leave_a_misprinted_figure_flagged_and_are_never_flagged(packs: RulePacks) -> None:
    diagnosis = classify_text(HYBRID_BOOT, packs)
    assert [m.fact for m in diagnosis.misleading] == ["kv_cache_tokens"]
    assert diagnosis.facts.kv_cache_tokens == 290864  # kept as printed
    assert diagnosis.facts.tensor_parallel_size == 2
    assert diagnosis.facts.block_size == 528  # vLLM's own line comes first


def test_a_name_that_begins_a_longer_flags_name_reads_the_longer_flag(packs: RulePacks) -> None:
    # `model` begins `model_weights_gib`: at that name both flags' spellings are tried
    log = "--model Qwen/Qwen2.5-7B-Instruct model_weights_gib=14.2"
    assert _settings(packs, log) == [(1, "model", "Qwen/Qwen2.5-7B-Instruct"), (1, "model_weights_gib", 14.2)]
    # a name inside a word starts no spelling; the flag after it is still read
    assert _settings(packs, "gpu_model_runner model_weights_gib=3") == [(1, "model_weights_gib", 3.0)]


def _pastes() -> list[str]:
    tests = Path(__file__).resolve().parent.parent
    folders = (tests / "corpus", tests / "healthy", tests / "diagnosis" / "healthy_excerpts")
    logs = [p.read_text(encoding="utf-8", errors="replace") for f in folders for p in sorted(f.glob("*.log"))]
    # a YAML list whose value is two lines after its flag, pasted three times; a flag on every line
    logs += ['- --max-model-len\n\n  - "8192"\n' * 3, "--max-num-seqs 8\n" * 50 + "-tp\n2"]
    return logs


def test_a_repeating_paste_states_the_settings_its_text_read_whole_states(packs: RulePacks) -> None:
    # over its distinct lines only the lines a flag's name is on are read, each with the lines its
    # value may be on; every corpus log (as pasted, each line twice, then again whole) reads alike
    for log in _pastes():
        for text in (log, "\n".join(line for line in log.split("\n") for _ in range(2)) + "\n" + log):
            whole, distinct = Document(text), Document(text)
            whole.repeating, distinct.repeating = False, True
            expected = list(stated_settings(whole, packs.fixes))
            assert list(stated_settings(distinct, packs.fixes)) == expected
