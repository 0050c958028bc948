"""Models on this machine: a checkpoint folder, or a repo in the Hugging Face cache.

Both give the config.json and, where the weights are there too, their safetensors header totals.
`huggingface_hub`'s cache lookup is imported when a repo is first looked up (it pulls in the whole
client); its constants are cheap and imported here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import msgspec
from huggingface_hub import constants as hf_constants

from service.errors import InvalidConfigError
from service.models.safetensors import SafetensorsError, directory_parameters

__all__ = ["LocalModel", "cached_repo", "hf_cache_dir", "looks_like_path", "read_config", "read_folder"]

# A config.json is a few KiB; one of megabytes is not a model config and is not read.
_MAX_CONFIG_BYTES = 4 * 2**20


class LocalModel(msgspec.Struct, frozen=True, kw_only=True):
    """What a folder on disk says about a model."""

    folder: str
    config: dict[str, object]
    parameters: dict[str, int] | None
    notes: list[str] = msgspec.field(default_factory=list)


def hf_cache_dir(env: Mapping[str, str]) -> str:
    """The Hugging Face cache folder as huggingface_hub resolves it: HF_HUB_CACHE, HF_HOME/hub, default."""
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HF_HOME"):
        return str(Path(env["HF_HOME"]) / "hub")
    return hf_constants.HF_HUB_CACHE


def looks_like_path(name: str) -> bool:
    """A name meant as a folder (`/models/x`, `./x`, `~/x`), not a Hugging Face id (`owner/name`)."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1


def read_config(path: Path) -> dict[str, object]:
    """A config.json as a JSON object; InvalidConfigError names the file when it is not one."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise InvalidConfigError(f"{path} cannot be read ({exc.strerror}).") from exc
    if len(raw) > _MAX_CONFIG_BYTES:
        raise InvalidConfigError(
            f"{path} is larger than {_MAX_CONFIG_BYTES // 2**20} MiB; not a config.json."
        )
    try:
        return msgspec.json.decode(raw, type=dict[str, object])
    except msgspec.DecodeError:
        pass
    # Python's json writes (and transformers saves) Infinity and NaN, which strict JSON lacks:
    # Nemotron-H's `time_step_limit` is [0.0, Infinity]. No sizing field is ever one of them.
    try:
        decoded = json.loads(raw, parse_constant=lambda _: None)
    except (ValueError, RecursionError) as exc:
        raise InvalidConfigError(f"{path} is not a JSON object ({exc}).") from exc
    if not isinstance(decoded, dict):
        raise InvalidConfigError(f"{path} is not a JSON object.")
    return decoded


def read_folder(folder: Path) -> LocalModel | None:
    """config.json and safetensors totals of a checkpoint folder; None when it has no config.json."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return None
    config = read_config(config_path)
    notes: list[str] = []
    try:
        parameters = directory_parameters(folder)
    except SafetensorsError as exc:
        parameters = None
        notes.append(f"The safetensors headers could not be read ({exc}); weights are from the formula.")
    return LocalModel(folder=str(folder), config=config, parameters=parameters, notes=notes)


def cached_repo(repo_id: str, cache_dir: str | None) -> LocalModel | None:
    """The repo's newest snapshot in the Hugging Face cache, when its config.json was downloaded."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    except ValueError:  # not a valid repo id
        return None
    if not isinstance(found, str):
        return None
    return read_folder(Path(found).parent)
