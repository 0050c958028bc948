"""The evidence model: clues per process, weighed by rules/evidence.yaml, into a phase and confidence."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from service.diagnosis.placement import Clue, stage_after, stage_before, weigh
from service.packs import PackError, RulePacks, load_packs
from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
    "23.55 GiB of which 1.02 GiB is free. Of the allocated memory 21.9 GiB is allocated by PyTorch, and "
    "180.00 MiB is reserved by PyTorch but unallocated."
)


def _frame(function: str) -> str:
    return f'  File "/venv/lib/python3.12/site-packages/vllm/x.py", line 1, in {function}'


def test_another_process_serving_does_not_place_a_workers_loading_oom(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "(Worker_TP1 pid=301) INFO 01-01 00:00:01 [loader.py:1] Loading safetensors checkpoint shards",
            "(APIServer pid=1) INFO 01-01 00:00:02 [api_server.py:1] Application startup complete.",
            f"(Worker_TP1 pid=301) ERROR 01-01 00:00:03 [core.py:1] {OOM}",
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "weights_oom"
    assert diagnosis.confidence < 0.8  # the other process's line still counts a little


def test_another_process_reaching_serving_after_a_printed_oom_does_not_place_it(
    run_classify: Classify,
) -> None:
    # the failing process printed no stage of its own: another process's later "ready" says nothing
    log = "\n".join(
        [
            f"(EngineCore_DP0 pid=11) ERROR 01-01 00:00:01 [core.py:1] {OOM}",
            "(APIServer pid=12) INFO 01-01 00:00:02 [launcher.py:1] Application startup complete.",
        ]
    )
    assert run_classify(log).phase != "runtime_oom"


def test_fork_and_plugin_stage_lines_after_a_titled_oom_place_it(run_classify: Classify) -> None:
    # the weights-loaded and warm-up wordings of forks and plugins (rules/signatures/stages.yaml)
    log = "\n".join(
        [
            "[Bug]: torch.OutOfMemoryError: CUDA out of memory.",
            "INFO 01-01 00:00:01 [runner.py:1] Model runner: Model loaded successfully.",
            "INFO 01-01 00:00:02 [worker.py:1] Worker 0: GPU memory after model loading: 19.56 GiB.",
            "INFO 01-01 00:00:03 [engine.py:1] dummy run to warm up the model",
        ]
    )
    assert run_classify(log).phase == "warmup_oom"


def test_the_api_server_ready_after_the_engines_graph_capture_places_a_runtime_oom(
    run_classify: Classify,
) -> None:
    log = "\n".join(
        [
            "(EngineCore_DP0 pid=210) INFO 01-01 00:00:01 [gpu_model_runner.py:1] Graph capturing finished "
            "in 12 secs, took 0.54 GiB",
            "(APIServer pid=1) INFO:     Application startup complete.",
            f"(EngineCore_DP0 pid=210) ERROR 01-01 00:00:09 [core.py:1] {OOM}",
        ]
    )
    assert run_classify(log).phase == "runtime_oom"


def test_interleaved_tracebacks_are_read_per_process(run_classify: Classify) -> None:
    tp0, tp1 = (
        "(Worker_TP0 pid=300) ERROR 01-01 00:00:03 [x.py:1] ",
        "(Worker_TP1 pid=301) ERROR 01-01 00:00:03 [x.py:1] ",
    )
    log = "\n".join(
        [
            tp1 + "Traceback (most recent call last):",
            tp0 + "Traceback (most recent call last):",
            tp0 + _frame("run_busy_loop"),
            tp1 + _frame("load_model"),
            tp0 + _frame("execute_model"),
            tp1 + _frame("_initialize_model"),
            tp1 + OOM,
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "weights_oom"
    assert diagnosis.confidence >= 0.9


def test_rank_prefixes_name_the_process(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "[rank1]: Traceback (most recent call last):",
            "[rank0]: Traceback (most recent call last):",
            "[rank0]: " + _frame("capture_model"),
            "[rank1]: " + _frame("load_weights"),
            "[rank1]: " + OOM,
        ]
    )
    assert run_classify(log).phase == "weights_oom"


def test_agreeing_clues_are_surer_than_one_and_disagreeing_ones_less(packs: RulePacks) -> None:
    frame = Clue("frame", "loading", "traceback frames", 3)
    marker = Clue("marker", "loading", "log lines before it", 1)
    against = Clue("marker", "serving", "log lines before it", 1)
    alone = weigh([frame], packs.evidence)
    agreed = weigh([frame, marker], packs.evidence)
    contested = weigh([frame, against], packs.evidence)
    assert alone is not None and agreed is not None and contested is not None
    assert alone.phase == agreed.phase == contested.phase == "weights_oom"
    assert contested.confidence < alone.confidence <= agreed.confidence
    assert weigh([], packs.evidence) is None


def test_a_weight_outside_zero_and_one_fails_loading_with_its_line(tmp_path: Path) -> None:
    rules = Path(__file__).resolve().parents[2] / "rules"
    shutil.copytree(rules, tmp_path / "rules")
    path = tmp_path / "rules" / "evidence.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("frame: 0.92", "frame: 1.5"), encoding="utf-8")
    with pytest.raises(PackError, match=r"evidence\.yaml.*weight of frame"):
        load_packs(tmp_path / "rules")


def test_a_marker_hundreds_of_lines_back_places_every_oom_after_it(run_classify: Classify) -> None:
    serving = [
        f"(Worker_TP0 pid=300) DEBUG 01-01 00:00:02 [x.py:1] shard {n} of 900 read" for n in range(900)
    ]
    log = "\n".join(
        [
            "(Worker_TP0 pid=300) INFO 01-01 00:00:01 [loader.py:1] Loading safetensors checkpoint shards",
            *serving,
            *(f"(Worker_TP0 pid=300) ERROR 01-01 00:00:03 [core.py:1] {OOM} try {n}" for n in range(10)),
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase == "weights_oom"
    assert {f.phase for f in diagnosis.findings} == {"weights_oom"}


def _vllm_frame(file: str, function: str) -> str:
    return f'  File "/venv/lib/python3.10/site-packages/vllm/{file}", line 1, in {function}'


def test_an_engine_construction_frame_outweighs_vague_words_about_running(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "It fails with OOM when running the server",
            "Traceback (most recent call last):",
            _vllm_frame("engine/async_llm_engine.py", "from_engine_args"),
            "    engine = cls(",
            _vllm_frame("engine/async_llm_engine.py", "_init_engine"),
            "    return engine_class(*args, **kwargs)",
            OOM,
        ]
    )
    diagnosis = run_classify(log)
    assert diagnosis.phase in ("weights_oom", "warmup_oom")
    assert "_init_engine" in diagnosis.summary


def test_a_construction_frame_takes_its_stage_from_the_process_timeline(run_classify: Classify) -> None:
    log = "\n".join(
        [
            "INFO 08-26 14:33:37 model_runner.py:890] Loading model weights took 1.9634 GB",
            "Traceback (most recent call last):",
            _vllm_frame("engine/llm_engine.py", "from_engine_args"),
            "    engine = cls(",
            OOM,
        ]
    )
    assert run_classify(log).phase == "warmup_oom"


def test_the_stage_after_one_is_the_next_step_of_start_up_and_after_start_up_is_serving() -> None:
    assert [stage_after(s) for s in ("loading", "profiling", "kv_cache", "warmup", "serving")] == [
        "profiling",
        "kv_cache",
        "warmup",
        "serving",
        "serving",
    ]
    assert stage_after("init") == "serving"


def test_the_stage_before_serving_is_start_up_and_before_loading_the_device_set_up() -> None:
    assert stage_before("serving") == "init"
    assert stage_before("loading") == "device"
    assert stage_before("warmup") == "kv_cache"


def test_a_neutral_library_given_as_an_absolute_path_fails_loading(tmp_path: Path) -> None:
    rules = Path(__file__).resolve().parents[2] / "rules"
    shutil.copytree(rules, tmp_path / "rules")
    path = tmp_path / "rules" / "evidence.yaml"
    text = path.read_text(encoding="utf-8").replace("  - torch/_dynamo/", "  - /usr/lib/torch/_dynamo/")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PackError, match=r"evidence\.yaml.*neutral library"):
        load_packs(tmp_path / "rules")
