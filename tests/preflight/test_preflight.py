"""Pre-flight in the core and on the command line: the verdict, the corrected command, the exit code."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.budget import GIB, max_passing_utilization
from service.cli import main
from service.packs import RulePacks
from service.preflight import preflight
from service.schemas import GpuInfo, GpuProcess, PreflightRequest, Snapshot, VllmServer

COMMAND = "vllm serve Qwen/Qwen2.5-72B-Instruct -tp 4 --max-model-len 32768"
H100_TOTAL_GIB = 79.65


def _gpu(index: int, free_gib: float, processes: list[GpuProcess] | None = None) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index:08d}",
        name="NVIDIA H100 80GB HBM3",
        total_gib=H100_TOTAL_GIB,
        used_gib=round(H100_TOTAL_GIB - free_gib, 2),
        free_gib=free_gib,
        reserved_gib=0.5,
        utilization_pct=0,
        compute_capability="9.0",
        mig_mode=False,
        processes=processes or [],
    )


def _host(free0: float, version: str | None = None) -> Snapshot:
    """gpu-07 with four H100s; GPU 0 partly used by another vLLM (pid 4121)."""
    used = round(H100_TOTAL_GIB - free0 - 0.5, 2)
    servers = []
    if version is not None:
        servers = [
            VllmServer(
                url="http://127.0.0.1:8000",
                model="Qwen/Qwen2.5-7B-Instruct",
                kv_cache_usage=None,
                requests_running=None,
                requests_waiting=None,
                preemptions_total=None,
                version=version,
            )
        ]
    busy = [GpuProcess(pid=4121, name="vllm-qwen", cmdline=None, used_gib=used)] if used > 0 else []
    return Snapshot(
        host="gpu-07",
        captured_at="2026-12-01T12:00:00Z",
        driver_version="550.90.07",
        cuda_version="12.4",
        gpus=[_gpu(0, free0, busy), _gpu(1, 79.1), _gpu(2, 79.1), _gpu(3, 79.1)],
        vllm=servers,
    )


def test_a_partly_used_gpu_is_refused_at_the_startup_check_with_the_utilization_that_passes(
    packs: RulePacks,
) -> None:
    result = preflight(PreflightRequest(command=COMMAND, snapshot=_host(61.2)), packs)

    assert result.outcome == "refused" and result.phase == "startup_budget"
    assert result.verdict.startswith(
        f"refused at the startup check: 61.2 GiB free < 0.92 × {H100_TOTAL_GIB} GiB"
    )
    changes = [fix.change for fix in result.fixes]
    utilization = next(c for c in changes if c.startswith("--gpu-memory-utilization"))
    assert (
        "--gpu-memory-utilization 0.76" in result.verdict and utilization == "--gpu-memory-utilization 0.76"
    )
    # the startup check's own arithmetic passes it, and the next step does not
    free, total = round(61.2 * GIB), round(H100_TOTAL_GIB * GIB)
    assert max_passing_utilization(free, total) is not None
    assert any(c.startswith("stop PID 4121 (vllm-qwen") for c in changes)
    assert result.corrected_command == f"{COMMAND} --gpu-memory-utilization 0.76"
    assert result.gpus == [0, 1, 2, 3] and result.budget.startup_check.passes is False


def test_empty_gpus_start_with_the_kv_pool_and_concurrency_at_the_length(packs: RulePacks) -> None:
    result = preflight(PreflightRequest(command=COMMAND, snapshot=_host(79.1)), packs)

    assert result.outcome == "starts" and result.phase is None and result.fixes == []
    budget = result.budget
    assert result.verdict == (
        f"starts: {budget.kv_cache_tokens:,} KV tokens, {budget.max_concurrency:.1f}× concurrency at 32k"
    )
    assert result.corrected_command is None


def test_the_hosts_vllm_version_lints_the_flags_and_the_fix_for_them_comes_first(packs: RulePacks) -> None:
    request = PreflightRequest(command=f"{COMMAND} --swap-space 4", snapshot=_host(79.1, version="0.24.0"))

    result = preflight(request, packs)

    assert result.vllm_version == "0.24.0" and result.version_source == "snapshot"
    assert result.outcome == "rejected"
    assert [issue.flag for issue in result.issues] == ["--swap-space"]
    assert result.fixes[0].change == "remove --swap-space"
    assert result.corrected_command == COMMAND


def test_without_a_version_anywhere_the_answer_says_which_it_assumed_and_asks(packs: RulePacks) -> None:
    result = preflight(PreflightRequest(command=COMMAND, snapshot=_host(79.1)), packs)

    assert result.version_source == "assumed"
    assert any("gpu-07 reports its version; give yours" in note for note in result.uncertain)


def test_gpus_chosen_by_cuda_visible_devices_are_the_ones_checked(packs: RulePacks) -> None:
    command = f"CUDA_VISIBLE_DEVICES=1,2,3,0 {COMMAND.replace('-tp 4', '-tp 2')}"

    result = preflight(PreflightRequest(command=command, snapshot=_host(10.0)), packs)

    assert result.gpus == [1, 2]
    assert result.budget.startup_check.passes is True


def _snapshot_file(tmp_path: Path, snapshot: Snapshot) -> str:
    path = tmp_path / "snap.json"
    path.write_bytes(msgspec.json.encode(snapshot))
    return str(path)


@pytest.mark.parametrize(("free0", "code"), [(79.1, 0), (61.2, 1)], ids=["starts", "refused"])
def test_the_command_line_exits_0_when_it_starts_and_1_when_it_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], free0: float, code: int
) -> None:
    snap = _snapshot_file(tmp_path, _host(free0))

    assert main(["preflight", COMMAND, "--snapshot", snap, "--json"]) == code

    answer = msgspec.json.decode(capsys.readouterr().out)
    assert answer["outcome"] == ("starts" if code == 0 else "refused")


@pytest.mark.parametrize(
    "argv",
    [
        ["preflight", "vllm serve --max-model-len 4096", "--gpu", "H100"],
        ["preflight", COMMAND, "--snapshot", "/nonexistent/snap.json"],
        ["preflight", COMMAND],
        ["preflight", COMMAND, "--host", "gpu-07"],
    ],
    ids=["no-model", "unreadable-snapshot", "no-host-nor-gpu", "host-without-registry"],
)
def test_bad_input_is_one_sentence_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VRAMDOC_REDIS_URL", raising=False)

    assert main(argv) == 2

    err = capsys.readouterr().err
    assert err.startswith("vramdoc preflight: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_version_before_the_startup_check_says_a_busy_gpu_shows_up_later(packs: RulePacks) -> None:
    result = preflight(PreflightRequest(command=COMMAND, snapshot=_host(61.2), vllm_version="0.8.5"), packs)

    assert result.budget.startup_check.passes is None and result.outcome != "refused"
    assert any("runs no startup check" in note for note in result.uncertain)


def test_data_and_expert_parallel_in_the_command_size_the_experts_over_every_engine(packs: RulePacks) -> None:
    command = "vllm serve Qwen3-30B-A3B -tp 2 -dp 2 --enable-expert-parallel --max-model-len 8192"
    result = preflight(PreflightRequest(command=command, snapshot=_host(79.1)), packs)
    sliced = preflight(
        PreflightRequest(
            command=command.replace(" -dp 2 --enable-expert-parallel", ""), snapshot=_host(79.1)
        ),
        packs,
    )
    assert result.budget is not None and sliced.budget is not None
    assert (result.budget.data_parallel_size, result.budget.expert_parallel_size) == (2, 4)
    assert result.gpus == [0, 1, 2, 3]  # TP 2 × DP 2 engines need all four GPUs
    assert result.budget.weights_gib < sliced.budget.weights_gib  # 128 experts over 4 GPUs, not 2
