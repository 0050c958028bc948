"""A GGUF file's tensor types, read from its header: elements per type, as the budget sizes them.

The header is the magic `GGUF`, a version (2 or 3), the tensor and metadata counts, the metadata
key/values (skipped) and one record per tensor: name, dimensions, ggml type id, data offset
(llama.cpp's gguf.md). Reading it is a few struct reads over the first megabytes; the `gguf` package
would memory-map the whole file through numpy, which neither the service nor the agent carries.
Shards (`-00001-of-00003.gguf`) are summed over their siblings.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from service.errors import InvalidConfigError

__all__ = ["read_tensor_types", "shard_paths"]

_SHARD = re.compile(r"-(\d{2,5})-of-(\d{2,5})\.gguf$")
# metadata value types with a fixed width (gguf.md GGUFValueType): u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64
_WIDTH = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# bounds a real header stays far inside; beyond them the file is not a GGUF model
_MAX_TENSORS = 1_000_000
_MAX_ITEMS = 50_000_000
_MAX_DIMS = 8
_MAX_NESTING = 4  # arrays of arrays: real headers nest one level (tokenizer merges are strings)
_MAX_ELEMENTS = 2**50  # one tensor beyond a quadrillion elements is no checkpoint


class _Reader:
    def __init__(self, handle: BinaryIO, path: Path) -> None:
        self._handle, self._path = handle, path

    def take(self, size: int) -> bytes:
        data = self._handle.read(size)
        if len(data) != size:
            raise InvalidConfigError(f"{self._path} ends inside its GGUF header.")
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def skip_string(self) -> None:
        self._handle.seek(self._bounded(self.u64()), 1)

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if depth > _MAX_NESTING:
            raise InvalidConfigError(f"{self._path} nests GGUF metadata arrays deeper than {_MAX_NESTING}.")
        if kind in _WIDTH:
            self._handle.seek(_WIDTH[kind], 1)
        elif kind == _STRING:
            self.skip_string()
        elif kind == _ARRAY:
            inner, count = self.u32(), self._bounded(self.u64())
            if inner in _WIDTH:
                self._handle.seek(_WIDTH[inner] * count, 1)
            else:
                for _ in range(count):
                    self.skip_value(inner, depth + 1)
        else:
            raise InvalidConfigError(f"{self._path} has a GGUF metadata value of unknown type {kind}.")

    def _bounded(self, count: int) -> int:
        if count > _MAX_ITEMS:
            raise InvalidConfigError(f"{self._path} is not a GGUF model header (a count of {count}).")
        return count


def _file_types(path: Path, names: Mapping[int, str]) -> dict[str, int]:
    try:
        with path.open("rb") as handle:
            reader = _Reader(handle, path)
            if reader.take(4) != b"GGUF":
                raise InvalidConfigError(f"{path} is not a GGUF file (no GGUF magic).")
            version = reader.u32()
            if version not in (2, 3):
                raise InvalidConfigError(f"{path} is GGUF version {version}; vramdoc reads versions 2 and 3.")
            tensors, metadata = reader.u64(), reader.u64()
            if tensors > _MAX_TENSORS:
                raise InvalidConfigError(f"{path} claims {tensors} tensors; not a GGUF model header.")
            for _ in range(reader._bounded(metadata)):
                reader.skip_string()
                reader.skip_value(reader.u32())
            counts: dict[str, int] = {}
            for _ in range(tensors):
                reader.skip_string()
                dims = reader.u32()
                if dims > _MAX_DIMS:
                    raise InvalidConfigError(f"{path} has a tensor of {dims} dimensions; not a GGUF model.")
                elements = 1
                for _ in range(dims):
                    elements *= reader.u64()
                if elements > _MAX_ELEMENTS:
                    raise InvalidConfigError(f"{path} has a tensor of {elements} elements; not a GGUF model.")
                kind = reader.u32()
                reader.u64()  # the data offset
                name = names.get(kind, f"ggml type {kind}")
                counts[name] = counts.get(name, 0) + elements
            return counts
    except OSError as exc:
        raise InvalidConfigError(f"{path} cannot be read ({exc.strerror}).") from exc


def shard_paths(path: Path) -> list[Path]:
    """The file and, for a shard `-0000i-of-0000n.gguf`, its siblings that are present."""
    match = _SHARD.search(path.name)
    if match is None:
        return [path]
    width, total = len(match.group(1)), int(match.group(2))
    stem = path.name[: match.start()]
    siblings = [path.with_name(f"{stem}-{i:0{width}d}-of-{match.group(2)}.gguf") for i in range(1, total + 1)]
    return [p for p in siblings if p.is_file()] or [path]


def read_tensor_types(path: Path, names: Mapping[int, str]) -> dict[str, int]:
    """Elements per tensor type over a GGUF file (and its shards), named by `names` (ggml type id → id)."""
    counts: dict[str, int] = {}
    for shard in shard_paths(path):
        for kind, elements in _file_types(shard, names).items():
            counts[kind] = counts.get(kind, 0) + elements
    return counts
