"""The frame -> stage table (`rules/frames/*.json`), generated from vLLM's call graph.

`tools/vllm_callgraph.py` writes one row per vLLM function that only one start-up stage reaches:
its file (the path after `vllm/`), its name, the stage, the phase when every error it raises is of
one phase, and the releases it exists in. Loading turns the rows into one dict keyed by
(file, function), so placing a traceback frame is a dict lookup, not a regex per row.

The table is JSON, not YAML like the hand-written packs: it has some 10,000 generated rows, which
even libyaml takes seconds to read, and every `vramdoc diagnose` loads the packs; msgspec decodes
the same rows, validated into the same Structs, in milliseconds. Rows are arrays
(`[file, function, stage, phase, versions]`) to keep the file small.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from service.errors import PackError
from service.packs.signatures import Spec
from service.schemas import Phase
from service.versions import release

__all__ = [
    "FRAME_STAGES",
    "FrameRow",
    "FrameTable",
    "FrameTableFile",
    "empty_frames",
    "load_frames",
]

FrameStage = Literal["config", "loading", "profiling", "warmup", "kv_cache", "serving"]
FRAME_STAGES: tuple[FrameStage, ...] = FrameStage.__args__  # type: ignore[attr-defined]


class FrameRow(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    file: str
    function: str
    stage: FrameStage
    phase: Phase | None
    versions: list[list[str]]

    def covers(self, version: tuple[int, int, int] | None) -> bool:
        """Whether the row holds for `version` (any release when it is unknown); parsed here, not at
        load, so loading the table is one decode and one pass that only groups rows."""
        if version is None:
            return True
        return any(release(low) <= version <= release(high) for low, high in self.versions)

    def __post_init__(self) -> None:
        if self.file.startswith("/") or not self.file.endswith(".py"):
            raise ValueError(f"file {self.file!r} must be a path inside vllm/ ending in .py")
        for run in self.versions:
            if len(run) != 2:
                raise ValueError("each versions entry is [first, last]")


class FrameTableFile(Spec, frozen=True, kw_only=True):
    source: str
    releases: list[str] = msgspec.field(default_factory=list)
    frames: list[FrameRow]


@dataclass(frozen=True, slots=True)
class FrameTable:
    """(file after `vllm/`, function name) -> the rows for it."""

    by_file: dict[tuple[str, str], tuple[FrameRow, ...]]
    rows: int


def empty_frames() -> FrameTable:
    return FrameTable(by_file={}, rows=0)


def _decode(path: Path, root: Path) -> FrameTableFile:
    shown = path.relative_to(root).as_posix()
    try:
        return msgspec.json.decode(path.read_bytes(), type=FrameTableFile)
    except (OSError, msgspec.DecodeError) as exc:
        raise PackError(shown, f"is not a valid frame table ({exc})") from exc


def load_frames(root: Path) -> FrameTable:
    """Every table under `root/frames`; an absent folder is an empty table (a rules folder without
    generated data still diagnoses)."""
    folder = root / "frames"
    by_file: dict[tuple[str, str], list[FrameRow]] = {}
    rows = 0
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            table = _decode(path, root)
            for row in table.frames:
                by_file.setdefault((row.file, row.function), []).append(row)
                rows += 1
    elif folder.exists():
        raise PackError(str(folder), "is not a folder of frame tables")
    return FrameTable(by_file={k: tuple(v) for k, v in by_file.items()}, rows=rows)
