"""The agent reports each served model's config.json and safetensors totals from this host's disk."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from service.agent.models import served_model_args, with_model_files
from service.schemas import GpuInfo, GpuProcess, VllmServer

QWEN3_8B = Path(__file__).resolve().parents[1] / "models" / "configs" / "Qwen--Qwen3-8B.json"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(QWEN3_8B.read_bytes())
    header = json.dumps(
        {"lm_head.weight": {"dtype": "BF16", "shape": [151936, 4096], "data_offsets": [0, 0]}}
    )
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    return folder


def _gpu(*cmdlines: str) -> GpuInfo:
    processes = [
        GpuProcess(pid=100 + i, name="python3", cmdline=c, used_gib=70.0) for i, c in enumerate(cmdlines)
    ]
    return GpuInfo(
        index=0,
        uuid="GPU-0",
        name="NVIDIA H100 80GB HBM3",
        total_gib=79.19,
        used_gib=70.0,
        free_gib=9.19,
        reserved_gib=None,
        utilization_pct=None,
        compute_capability="9.0",
        mig_mode=False,
        processes=processes,
    )


def _server(model: str) -> VllmServer:
    return VllmServer(
        url="http://127.0.0.1:8000",
        model=model,
        kv_cache_usage=0.1,
        requests_running=0,
        requests_waiting=0,
        preemptions_total=0,
    )


def test_command_lines_name_the_model_and_its_served_name() -> None:
    assert served_model_args("/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen3-8B --port 8000") == (
        "Qwen/Qwen3-8B",
        None,
    )
    assert served_model_args(
        "python3 -m vllm.entrypoints.openai.api_server --model=/models/x --served-model-name x"
    ) == ("/models/x", "x")
    assert served_model_args("python3 train.py --model /models/x") is None


def test_a_local_folder_behind_a_served_name_is_read(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "models" / "private-qwen")
    gpu = _gpu(f"python3 -m vllm.entrypoints.openai.api_server --model {folder} --served-model-name private")
    servers, errors = with_model_files([_server("private")], [gpu], hf_cache=None)
    assert errors == []
    (server,) = servers
    assert server.model_path == str(folder)
    assert server.model_config == json.loads(QWEN3_8B.read_text())
    assert server.model_parameters == {"BF16": 151936 * 4096}


def test_a_hub_id_is_read_from_the_hf_cache(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    _checkpoint(repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    servers, errors = with_model_files(
        [_server("Qwen/Qwen3-8B")], [_gpu("vllm serve Qwen/Qwen3-8B")], hf_cache=str(tmp_path / "hub")
    )
    assert errors == []
    assert servers[0].model_parameters == {"BF16": 151936 * 4096}


def test_a_model_not_on_disk_leaves_the_server_as_scraped(tmp_path: Path) -> None:
    servers, errors = with_model_files([_server("Qwen/Qwen3-8B")], [_gpu()], hf_cache=str(tmp_path))
    assert servers == [_server("Qwen/Qwen3-8B")] and errors == []


def test_an_unreadable_config_is_an_error_entry_not_a_failure(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    servers, errors = with_model_files([_server(str(folder))], [_gpu()], hf_cache=None)
    assert servers[0].model_config is None
    assert errors[0].source == f"model {folder}" and "not a JSON object" in errors[0].reason
