"""The call-graph table (rules/frames/vllm.json) places the stage functions of every era, and a frame
lands on one stage however its printer names the function: Python by its bare name, IPython 8 and
py-spy by its qualified `Class.method` (the table keys a function by its module and bare name)."""

from __future__ import annotations

import pytest

from service.diagnosis.frames import frame_place
from service.diagnosis.normalize import Document
from service.packs import RulePacks
from service.packs.frames import FrameRow
from service.versions import release

SITE = "/usr/local/lib/python3.10/dist-packages/vllm"

ERAS = [
    # only the oldest releases (0.2-0.3): the engine sized the cache itself through its workers
    ("0.2.7", "engine/llm_engine.py", "_init_cache", "kv_cache"),
    ("0.2.7", "worker/worker.py", "profile_num_available_blocks", "profiling"),
    ("0.3.3", "worker/worker.py", "init_cache_engine", "kv_cache"),
    # V0 (0.4-0.10)
    ("0.4.3", "worker/worker.py", "raise_if_cache_size_invalid", "kv_cache"),
    ("0.6.3", "worker/worker.py", "determine_num_available_blocks", "profiling"),
    ("0.6.3", "worker/model_runner.py", "capture_model", "warmup"),
    ("0.6.3", "worker/worker.py", "load_model", "loading"),
    # V1 (0.8-)
    ("0.8.5.post1", "v1/worker/gpu_model_runner.py", "_dummy_sampler_run", "profiling"),
    ("0.14.1", "v1/worker/utils.py", "request_memory", "device"),
    ("0.18.1", "v1/worker/gpu_model_runner.py", "profile_cudagraph_memory", "profiling"),
    # only recent releases: model runner V2 (0.12-), the CUDA-graph helpers (0.29-), the KV planning
    # module (0.33)
    ("0.12.0", "v1/worker/gpu/model_runner.py", "load_model", "loading"),
    ("0.29.0", "v1/worker/gpu/cudagraph_utils.py", "profile_cudagraph_memory", "profiling"),
    ("0.33.0", "v1/worker/gpu/model_runner.py", "capture_model", "warmup"),
    ("0.33.0", "v1/core/kv_cache_planning.py", "check_enough_kv_cache_memory", "kv_cache"),
    ("0.33.0", "v1/worker/gpu_model_runner.py", "execute_model", "serving"),
    # 0.34 drops v1/worker/gpu_model_runner.py: model runner V2 and the CPU backend's own runner
    ("0.34.0", "v1/worker/gpu/model_runner.py", "capture_model", "warmup"),
    ("0.34.0", "v1/core/kv_cache_planning.py", "_check_enough_kv_cache_memory", "kv_cache"),
    ("0.34.0", "v1/worker/gpu_worker.py", "determine_available_memory", "profiling"),
    ("0.34.0", "v1/worker/cpu/standalone_model_runner.py", "load_model", "loading"),
    ("0.34.0", "v1/worker/cpu/standalone_model_runner.py", "profile_run", "profiling"),
    # a minor's first release is read too (the pooler's task warm-up starts in 0.10.0)
    ("0.10.0", "v1/worker/gpu_model_runner.py", "_dummy_pooler_run_task", "profiling"),
]


@pytest.mark.parametrize(
    ("version", "file", "function", "stage"), ERAS, ids=[f"{v}-{f}" for v, _, f, _ in ERAS]
)
def test_each_eras_stage_functions_are_placed_for_their_release(
    packs: RulePacks, version: str, file: str, function: str, stage: str
) -> None:
    frame = f'File "{SITE}/{file}", line 10, in {function}'
    place = frame_place(packs.signatures.frames, frame, version=release(version))
    assert place is not None and place.stage == stage


def test_no_release_has_one_function_name_in_two_stages_of_a_module(packs: RulePacks) -> None:
    # two classes of one module with a method of one name in different stages would make a frame
    # ambiguous, since Python prints the bare name: the generator keeps such a name out of the table
    table = packs.signatures.frames
    releases = [
        release(v)
        for v in (
            "0.2.0",
            "0.2.7",
            "0.4.3",
            "0.6.3",
            "0.8.5",
            "0.10.0",
            "0.10.2",
            "0.14.1",
            "0.22.1",
            "0.33.0",
            "0.34.0",
        )
    ]
    for (file, function), rows in table.by_file.items():
        for version in releases:
            stages = {row.stage for row in rows if FrameRow.covers(row, version)}
            assert len(stages) <= 1, (file, function, version, stages)


@pytest.mark.parametrize(
    "line",
    [
        # IPython 8 qualifies the function with its class
        "File ~/venv/lib/python3.10/site-packages/vllm/worker/worker.py:123, "
        "in Worker.determine_num_available_blocks(self)",
        # py-spy on Python 3.11+ may print the qualified name too
        "    Worker.determine_num_available_blocks (vllm/worker/worker.py:123)",
        # faulthandler prints the bare name, without the comma
        f'  File "{SITE}/worker/worker.py", line 123 in determine_num_available_blocks',
    ],
)
def test_a_qualified_or_bare_name_lands_on_the_same_row(packs: RulePacks, line: str) -> None:
    doc = Document(line + "\n")
    place = frame_place(packs.signatures.frames, doc.line(1).text, version=release("0.6.3"))
    assert place is not None and place.function == "determine_num_available_blocks"
    assert place.stage == "profiling"
