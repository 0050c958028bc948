"""The served model as this host's disk holds it: config.json and safetensors header totals.

A vLLM server's `/metrics` names its model (the `--served-model-name`, by default the `--model`
argument). The model argument of a `vllm serve` process on the GPUs says where the checkpoint lives:
a folder, or a Hugging Face id whose snapshot sits in the HF cache. Reading them here lets a budget
work for local and private models with no network. Reading only headers keeps it cheap.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import msgspec

from service.errors import InputError
from service.models.local import LocalModel, cached_repo, looks_like_path, read_folder
from service.models.safetensors import SafetensorsError
from service.schemas import GpuInfo, SnapshotError, VllmServer

__all__ = ["served_model_args", "with_model_files"]


def _flag(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def served_model_args(cmdline: str) -> tuple[str, str | None] | None:
    """(model argument, served name) of a `vllm serve` / api_server command line, else None."""
    try:
        args = shlex.split(cmdline)
    except ValueError:
        args = cmdline.split()
    model = _flag(args, "--model")
    if "serve" in args:
        after = args[args.index("serve") + 1 :]
        if after and not after[0].startswith("-"):
            model = after[0]
    if model is None or not any("vllm" in a for a in args[:3]):
        return None
    return model, _flag(args, "--served-model-name")


def _read(model: str, hf_cache: str | None) -> LocalModel | None:
    if looks_like_path(model) or Path(model).is_absolute():
        return read_folder(Path(model).expanduser())
    return cached_repo(model, hf_cache)


def _model_argument(server: VllmServer, gpus: Sequence[GpuInfo]) -> str | None:
    """The `--model` of the process serving `server.model` (the metric name may be an alias)."""
    commands = [served_model_args(p.cmdline) for g in gpus for p in g.processes if p.cmdline]
    found = [c for c in commands if c is not None]
    for model, served in found:
        if server.model in (model, served):
            return model
    models = {model for model, _ in found}
    return models.pop() if len(models) == 1 else server.model


def with_model_files(
    servers: Sequence[VllmServer], gpus: Sequence[GpuInfo], hf_cache: str | None
) -> tuple[list[VllmServer], list[SnapshotError]]:
    """Each server with its model's config.json and safetensors totals where this disk has them."""
    result: list[VllmServer] = []
    errors: list[SnapshotError] = []
    for server in servers:
        model = _model_argument(server, gpus) if server.model else None
        if model is None:
            result.append(server)
            continue
        try:
            local = _read(model, hf_cache)
        except (InputError, SafetensorsError, OSError) as exc:
            errors.append(SnapshotError(source=f"model {model}", reason=str(exc)))
            local = None
        if local is None:
            result.append(server)
            continue
        errors.extend(SnapshotError(source=f"model {model}", reason=note) for note in local.notes)
        result.append(
            msgspec.structs.replace(
                server, model_path=local.folder, model_config=local.config, model_parameters=local.parameters
            )
        )
    return result, errors
