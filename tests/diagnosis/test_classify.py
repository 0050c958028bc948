"""Interpretation: the root phase, bare-OOM placement, wrappers, facts with sources, versions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core import classify
from service.diagnosis.evidence import SCAN_BOUND_RULE
from service.diagnosis.facts import FactSet
from service.diagnosis.scan import MAX_EXAMINED_LINES
from service.errors import EmptyLogError
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis

Classify = Callable[..., Diagnosis]

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
    "23.55 GiB of which 1.02 GiB is free. Process 4242 has 22.52 GiB memory in use. Of the allocated memory "
    "21.9 GiB is allocated by PyTorch, and 180.00 MiB is reserved by PyTorch but unallocated."
)


def _traceback(*functions: str) -> str:
    frames = "\n".join(
        f'  File "/venv/lib/python3.12/site-packages/vllm/x.py", line 1, in {f}' for f in functions
    )
    return f"Traceback (most recent call last):\n{frames}\n{OOM}\n"


def test_bare_oom_under_weight_loading_frames_is_weights_oom(run_classify: Classify) -> None:
    diagnosis = run_classify(_traceback("run_engine_core", "load_model", "_initialize_model", "__init__"))
    assert diagnosis.phase == "weights_oom"
    assert diagnosis.confidence >= 0.9


def test_bare_oom_under_profile_run_is_warmup_oom_even_through_execute_model(run_classify: Classify) -> None:
    log = _traceback("determine_num_available_blocks", "profile_run", "execute_model", "forward")
    assert run_classify(log).phase == "warmup_oom"


def test_bare_oom_under_the_busy_loop_is_runtime_oom(run_classify: Classify) -> None:
    assert run_classify(_traceback("run_busy_loop", "step", "execute_model")).phase == "runtime_oom"


def test_bare_oom_after_startup_complete_is_runtime_oom(run_classify: Classify) -> None:
    log = "INFO:     Application startup complete.\nsome request\n" + OOM
    diagnosis = run_classify(log)
    assert diagnosis.phase == "runtime_oom"


def test_bare_oom_while_loading_shards_is_weights_oom(run_classify: Classify) -> None:
    log = "Loading safetensors checkpoint shards:  25% Completed | 1/4\n" + OOM
    assert run_classify(log).phase == "weights_oom"


def test_bare_oom_during_graph_capture_is_warmup_oom(run_classify: Classify) -> None:
    log = "Model loading took 14.99 GiB and 5.1 seconds\nCapturing CUDA graph shapes:  40%|####\n" + OOM
    assert run_classify(log).phase == "warmup_oom"


def test_oom_facts_are_normalized_to_gib_with_their_line(run_classify: Classify) -> None:
    diagnosis = run_classify("hello\n" + OOM)
    facts = diagnosis.facts
    assert facts.tried_to_allocate_gib == 1.95
    assert facts.total_gib == 23.55
    assert facts.free_gib == 1.02
    assert facts.torch_allocated_gib == 21.9
    assert facts.torch_reserved_unallocated_gib == 180 / 1024
    assert facts.other_processes is not None and facts.other_processes[0].pid == 4242
    assert diagnosis.fact_sources["free_gib"] == "line 2"


def test_wrapper_is_never_root_when_the_cause_is_present(run_classify: Classify) -> None:
    log = (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "kv_cache_capacity"
    assert diagnosis.evidence[-1].rule == "vllm-kv-no-cache-blocks"


def test_wrapper_alone_is_not_memory_with_low_confidence(run_classify: Classify) -> None:
    diagnosis = run_classify("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert diagnosis.phase == "not_memory"
    assert diagnosis.confidence < 0.5


def test_unrelated_exception_is_not_memory(run_classify: Classify) -> None:
    diagnosis = run_classify(
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'vllm._C'"
    )
    assert diagnosis.phase == "not_memory"


def test_healthy_startup_is_no_failure_with_its_facts(run_classify: Classify) -> None:
    log = (
        "INFO 05-12 10:11:12 [gpu_model_runner.py:1] Model loading took 0.9277 GiB memory and 1.25 seconds\n"
        "INFO 05-12 10:11:14 [gpu_worker.py:2] Available KV cache memory: 63.02 GiB\n"
        "INFO 05-12 10:11:14 [kv_cache_utils.py:3] GPU KV cache size: 5,506,928 tokens\n"
        "INFO 05-12 10:11:14 [kv_cache_utils.py:4] "
        "Maximum concurrency for 32,768 tokens per request: 168.06x\n"
        "INFO:     Application startup complete.\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "no_failure"
    assert diagnosis.facts.kv_cache_tokens == 5506928
    assert diagnosis.facts.max_concurrency == 168.06
    assert not [f for f in diagnosis.findings if f.severity == "error"]


def test_earliest_phase_in_startup_order_wins(run_classify: Classify) -> None:
    log = (
        "ValueError: No available memory for the cache blocks.\n"
        "ValueError: Free memory on device cuda:0 (2.0/23.5 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 21.15 GiB).\n"
    )
    assert run_classify(log).phase == "startup_budget"


def test_request_hints_become_facts_with_request_source(run_classify: Classify) -> None:
    diagnosis = run_classify(OOM, model="meta-llama/Llama-3.1-70B", gpu="RTX 4090", vllm_version="0.8.5")
    assert diagnosis.facts.model == "meta-llama/Llama-3.1-70B"
    assert diagnosis.facts.gpu_name == "RTX 4090"
    assert diagnosis.fact_sources["model"] == "request"
    assert diagnosis.engine.version == "0.8.5" and not diagnosis.engine.assumed


def test_version_stated_in_the_log_is_not_assumed(run_classify: Classify) -> None:
    diagnosis = run_classify(
        "INFO 01-01 00:00:00 api_server.py:1] vLLM API server version 0.6.3.post1\n" + OOM
    )
    assert diagnosis.engine.version == "0.6.3.post1"
    assert diagnosis.engine.assumed is False
    assert diagnosis.facts.vllm_version == "0.6.3.post1"


def test_wording_narrows_the_version_range(run_classify: Classify) -> None:
    log = (
        "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (2.68 GiB). Based on the available "
        "memory, the estimated maximum model length is 21952. Try increasing `gpu_memory_utilization`"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "kv_cache_capacity"
    assert diagnosis.engine.version is None and diagnosis.engine.assumed
    assert diagnosis.engine.range == ">=0.8.5,<=0.21"
    assert diagnosis.facts.estimated_max_model_len == 21952


def test_command_flags_that_do_not_exist_are_findings(run_classify: Classify) -> None:
    command = "vllm serve Qwen/Qwen2.5-7B --disable-cuda-graphs --swap-space 4 --max-model-len 32k -tp 2"
    diagnosis = run_classify(OOM, command=command, vllm_version="0.19.0")
    rules = {f.rule: f for f in diagnosis.findings}
    assert rules["vllm-flag-never-existed"].severity == "error"
    assert "--enforce-eager" in (rules["vllm-flag-never-existed"].message or "")
    assert rules["vllm-flag-removed"].severity == "error"
    assert diagnosis.facts.max_model_len == 32000
    assert diagnosis.facts.tensor_parallel_size == 2
    assert diagnosis.fact_sources["tensor_parallel_size"] == "command"


def test_command_pasted_in_the_log_yields_facts(run_classify: Classify) -> None:
    log = (
        "$ python -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B --max-model-len 4096\n"
        + OOM
    )
    diagnosis = run_classify(log)
    assert diagnosis.facts.model == "mistralai/Mistral-7B"
    assert diagnosis.facts.max_model_len == 4096
    assert diagnosis.fact_sources["max_model_len"] == "line 1"


def test_evidence_holds_the_exception_with_lines_before_it_and_is_redacted(run_classify: Classify) -> None:
    lines = [f"INFO step {i} HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123" for i in range(40)]
    diagnosis = run_classify("\n".join(lines) + "\n" + OOM)
    numbers = [e.line for e in diagnosis.evidence]
    assert numbers[-1] == 41
    assert 11 in numbers and 10 not in numbers
    assert all("hf_abc" not in e.text for e in diagnosis.evidence)


def test_empty_log_is_an_input_error(packs: RulePacks) -> None:
    with pytest.raises(EmptyLogError):
        classify(DiagnoseRequest(log="  \n\t"), packs)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_never_raise(packs: RulePacks, data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    if text.strip():
        assert classify(DiagnoseRequest(log=text), packs).phase


def test_thousands_of_repeated_ooms_are_shown_once_and_counted(run_classify: Classify) -> None:
    log = "INFO:     Application startup complete.\n" + "\n".join([OOM] * 3000)
    diagnosis = run_classify(log)
    assert diagnosis.phase == "runtime_oom"
    assert [(e.line, e.repeats) for e in diagnosis.evidence] == [(1, 1), (2, 3000)]
    assert len(diagnosis.findings) < 5


def test_the_same_oom_from_every_rank_is_one_evidence_line_counted_per_rank(run_classify: Classify) -> None:
    ranks = "\n".join(f"[rank{rank}]: {OOM}" for rank in range(8))
    diagnosis = run_classify(f"INFO:     Application startup complete.\n{ranks}\n{ranks}")
    oom_lines = [e for e in diagnosis.evidence if "CUDA out of memory" in e.text]
    assert [(e.line, e.repeats) for e in oom_lines] == [(2, 16)]
    assert diagnosis.facts.tried_to_allocate_gib == 1.95


def test_a_log_past_the_scan_bound_says_how_far_it_was_read(run_classify: Classify) -> None:
    distinct = "\n".join(OOM.replace("1.95 GiB", f"{n}.5 MiB") for n in range(MAX_EXAMINED_LINES + 10))
    diagnosis = run_classify(distinct)
    bound = [f for f in diagnosis.findings if f.rule == SCAN_BOUND_RULE]
    assert len(bound) == 1
    assert bound[0].line == MAX_EXAMINED_LINES + 1
    assert f"first {MAX_EXAMINED_LINES} matching lines" in (bound[0].message or "")


def test_a_log_within_the_bound_has_no_bound_finding(run_classify: Classify) -> None:
    diagnosis = run_classify("\n".join([OOM] * 3000))
    assert all(f.rule != SCAN_BOUND_RULE for f in diagnosis.findings)


def test_a_value_of_the_wrong_type_is_dropped_not_raised() -> None:
    found = FactSet()
    found.add("max_model_len", 2048, "line 1")
    found.add("gpu_memory_utilization", "lots", "request")
    assert found.to_facts().max_model_len == 2048
    assert found.to_facts().gpu_memory_utilization is None
    assert "gpu_memory_utilization" not in found.sources


def test_oom_stated_in_a_title_is_placed_by_the_stage_lines_after_it(run_classify: Classify) -> None:
    log = (
        "[Usage]: OOM when using my vision model\n"
        "INFO 09-27 11:18:22 model_runner.py:1025] Loading model weights took 19.9073 GB\n"
        "INFO 09-27 11:18:35 enc_dec_model_runner.py:297] Starting profile run for multi-modal models.\n"
        "[rank0]: Traceback (most recent call last):\n"
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "warmup_oom"


def test_a_constructor_call_after_a_stated_oom_does_not_place_it(run_classify: Classify) -> None:
    log = (
        "CUDA out of memory when setting limit_mm_per_prompt\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "test.py", line 31, in <module>\n'
        "[rank0]:     llm = LLM(\n"
    )
    assert run_classify(log).phase == "warmup_oom"


def test_vllm_advisories_mentioning_oom_are_not_a_stated_oom(run_classify: Classify) -> None:
    log = (
        "WARNING 02-27 12:00:11 arg_utils.py:1135] The model has a long context length (131072). "
        "This may cause OOM errors during the initial memory profiling phase.\n"
        "which may require lowering --gpu-memory-utilization to avoid OOM.\n"
    )
    assert run_classify(log).phase == "no_failure"


def test_a_real_failure_outranks_an_oom_the_reporter_mentions(run_classify: Classify) -> None:
    log = (
        "Getting OOM when I start the server\n"
        "ValueError: Free memory on device (14.92/23.65 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 21.28 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.\n"
    )
    assert run_classify(log).phase == "startup_budget"


def test_an_oom_at_sleep_mode_wake_up_is_runtime_oom(run_classify: Classify) -> None:
    log = (
        "when vLLM wakes up from sleep mode, and there's not enough memory, there is an error:\n"
        "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:56\n"
    )
    assert run_classify(log).phase == "runtime_oom"
