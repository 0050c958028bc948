"""Parameter counts per dtype from safetensors headers on disk.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming every
tensor's dtype and shape. Reading that header is all a budget needs, so this reads it directly rather
than pull in the `safetensors` package (and numpy or torch) on GPU hosts; `huggingface_hub` does the
same for remote files (`get_safetensors_metadata`), but has no reader for local ones.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import msgspec

__all__ = ["SafetensorsError", "directory_parameters", "header_parameters"]

# huggingface_hub's own bound (SAFETENSORS_MAX_HEADER_LENGTH): a longer header is not a checkpoint.
_MAX_HEADER_BYTES = 25_000_000
# Sharded checkpoints of the largest models have a few hundred files; more is not one model.
_MAX_FILES = 2048


class SafetensorsError(ValueError):
    """A file that is not a readable safetensors checkpoint; the message names it."""


class _Tensor(msgspec.Struct):
    dtype: str
    shape: list[int]


def header_parameters(header: bytes, name: str = "header") -> dict[str, int]:
    """{dtype: parameter count} of one safetensors JSON header (the `__metadata__` entry skipped)."""
    try:
        entries = msgspec.json.decode(header, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise SafetensorsError(f"{name} does not hold a safetensors JSON header ({exc}).") from exc
    counts: dict[str, int] = {}
    for key, raw in entries.items():
        if key == "__metadata__":
            continue
        try:
            tensor = msgspec.json.decode(raw, type=_Tensor)
        except msgspec.DecodeError as exc:
            raise SafetensorsError(f"{name}: tensor {key!r} has no dtype and shape ({exc}).") from exc
        if any(d < 0 for d in tensor.shape):
            raise SafetensorsError(f"{name}: tensor {key!r} has a negative dimension.")
        counts[tensor.dtype] = counts.get(tensor.dtype, 0) + math.prod(tensor.shape)
    return counts


def file_parameters(path: Path) -> dict[str, int]:
    """{dtype: parameter count} of one .safetensors file, reading only its header."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise SafetensorsError(f"{path.name} is too short to be a safetensors file.")
            (length,) = struct.unpack("<Q", prefix)
            if length > _MAX_HEADER_BYTES:
                raise SafetensorsError(
                    f"{path.name} declares a {length:,}-byte header; not a safetensors file."
                )
            header = handle.read(length)
    except OSError as exc:
        raise SafetensorsError(f"{path.name} cannot be read ({exc.strerror}).") from exc
    if len(header) < length:
        raise SafetensorsError(f"{path.name} ends inside its header (truncated download?).")
    return header_parameters(header, path.name)


def directory_parameters(folder: Path) -> dict[str, int] | None:
    """Summed {dtype: count} over a checkpoint folder's .safetensors files; None when it has none."""
    files = sorted(folder.glob("*.safetensors"))[: _MAX_FILES + 1]
    if not files:
        return None
    if len(files) > _MAX_FILES:
        raise SafetensorsError(f"{folder.name} holds more than {_MAX_FILES} safetensors files.")
    totals: dict[str, int] = {}
    for path in files:
        for dtype, count in file_parameters(path).items():
            totals[dtype] = totals.get(dtype, 0) + count
    return totals
