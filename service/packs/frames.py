"""The frame -> stage table (`rules/frames/*.json`), generated from vLLM's call graph.

`tools/vllm_callgraph.py` writes one row per vLLM function that only one start-up stage reaches:
its file (the path after `vllm/`), its name, the stage, the phase when every error it raises is of
one phase, the releases it exists in, and its class where the name's classes in one module differ.
Loading turns the rows into one dict keyed by (file, function), so placing a traceback frame is a
dict lookup, not a regex per row.

The table is JSON, not YAML like the hand-written packs: it has some 10,000 generated rows, which
even libyaml takes seconds to read, and every `vramdoc diagnose` loads the packs; msgspec decodes
the same rows, validated into the same Structs, in milliseconds. Rows are arrays
(`[file, function, stage, phase, versions]`, `owner` appended where it is set) to keep the file small.

Validated and grouped once, the table goes into the compiled-pack cache (service.packs.loader)
keyed by the tables' bytes: a later start decodes the grouped rows from msgpack without checking
each row again (`CheckedFrameRow` validates; the cache holds plain `FrameRow`s), and only when a
traceback frame is first looked up: a log without one never pays for the table.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from service.errors import PackError
from service.packs.loader import deferred_decode, stated
from service.packs.signatures import Spec
from service.schemas import Phase
from service.versions import release

__all__ = [
    "FRAME_STAGES",
    "LIBRARY_FOLDERS",
    "CheckedFrameRow",
    "FrameRow",
    "FrameTable",
    "FrameTableFile",
    "empty_frames",
    "load_frames",
]

FrameStage = Literal["config", "init", "device", "loading", "profiling", "warmup", "kv_cache", "serving"]
FRAME_STAGES: tuple[FrameStage, ...] = FrameStage.__args__  # type: ignore[attr-defined]


class FrameRow(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    file: str
    function: str
    stage: FrameStage
    phase: Phase | None
    versions: list[list[str]]
    # the class (or enclosing function) the row is of, where the name's classes in one module differ
    # in stage or phase: a frame shows only the name, its caller's `self.model_config.…(` the class
    owner: str | None = None

    def covers(self, version: tuple[int, int, int] | None) -> bool:
        """Whether the row holds for `version` (any release when it is unknown); parsed here, not at
        load, so loading the table is one decode and one pass that only groups rows."""
        if version is None:
            return True
        return any(release(low) <= version <= release(high) for low, high in self.versions)


class CheckedFrameRow(FrameRow, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A row as a frame table file gives it, checked while it is decoded."""

    def __post_init__(self) -> None:
        if self.file.startswith("/") or not self.file.endswith(".py"):
            raise ValueError(f"file {self.file!r} must be a path inside vllm/ ending in .py")
        for run in self.versions:
            if len(run) != 2:
                raise ValueError("each versions entry is [first, last]")


class FrameTableFile(Spec, frozen=True, kw_only=True):
    source: str
    releases: list[str] = msgspec.field(default_factory=list)
    frames: list[CheckedFrameRow]
    # vLLM's modules none of whose functions is specific to a stage (every one shared, like the
    # custom ops'): vLLM's own, so a frame of one is never looked up as a fork's module of that folder
    modules: list[str] = msgspec.field(default_factory=list)
    # the packages of platform plugins and forks (`tpu_inference`, `optimum/neuron/vllm`: generated
    # from tools/vllm_sources.py PLUGINS) whose frames are read as vLLM's module of the same path
    plugins: list[str] = msgspec.field(default_factory=list)
    # what the generator says of names a traceback leaves ambiguous: those it keyed by class too,
    # and those it left out (rows of neither are read)
    qualified: list[str] = msgspec.field(default_factory=list)
    ambiguous: list[str] = msgspec.field(default_factory=list)


class FrameGroup(msgspec.Struct, frozen=True, array_like=True):
    file: str
    function: str
    rows: tuple[FrameRow, ...]


class CompiledFrames(msgspec.Struct, frozen=True, array_like=True):
    """Every table's rows grouped by (file, function): what the pack cache stores."""

    groups: list[FrameGroup]
    rows: int
    modules: list[str] = msgspec.field(default_factory=list)
    plugins: list[str] = msgspec.field(default_factory=list)


class FrameTable:
    """(file after `vllm/`, function name) -> the rows for it, decoded on first use."""

    __slots__ = (
        "_by_file",
        "_by_name",
        "_files",
        "_load",
        "_lock",
        "_mirror",
        "_modules",
        "_plugins",
        "_rows",
    )

    def __init__(self, load: Callable[[], CompiledFrames]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._by_file: dict[tuple[str, str], tuple[FrameRow, ...]] | None = None
        self._files: frozenset[str] | None = None
        self._mirror: dict[tuple[str, str], tuple[FrameRow, ...]] | None = None
        self._by_name: dict[str, tuple[FrameRow, ...]] | None = None
        self._rows = 0
        self._modules: tuple[str, ...] = ()
        self._plugins: tuple[str, ...] = ()

    def _decoded(self) -> dict[tuple[str, str], tuple[FrameRow, ...]]:
        if self._by_file is not None:
            return self._by_file
        with self._lock:  # a large log is diagnosed on a worker thread: decode once
            if self._by_file is None:
                compiled = self._load()
                self._rows = compiled.rows
                self._modules = tuple(compiled.modules)
                self._plugins = tuple(compiled.plugins)
                self._by_file = {(g.file, g.function): g.rows for g in compiled.groups}
            return self._by_file

    @property
    def by_file(self) -> dict[tuple[str, str], tuple[FrameRow, ...]]:
        return self._decoded()

    @property
    def plugins(self) -> tuple[str, ...]:
        """The packages of the platform plugins and forks the table names (rules/frames/vllm.json)."""
        self._decoded()
        return self._plugins

    @property
    def rows(self) -> int:
        self._decoded()
        return self._rows

    def rows_for(self, file: str, function: str, *, plugin: bool = False) -> tuple[FrameRow, ...]:
        """The rows of `function` in `file`; for a platform plugin's module vLLM does not have
        (`worker/model_runner_v1.py` of vllm_ascend), the rows of the functions of that name in vLLM's
        folders of the same name (`worker/`, `v1/worker/`): a plugin's worker and model runner
        subclass vLLM's and keep their methods' names and roles."""
        by_file = self._decoded()
        found = by_file.get((file, function))
        if found is not None or not plugin:
            return found or ()
        self._index(by_file)
        assert self._files is not None and self._mirror is not None
        if file in self._files:
            return ()
        return self._mirror.get((_folder(file), function), ())

    def rows_named(self, function: str) -> tuple[FrameRow, ...]:
        """The rows of every vLLM function of that name, whatever its module (a call of another
        object's method, `self.model_executor.determine_num_available_blocks(`, names no module)."""
        self._index(self._decoded())
        assert self._by_name is not None
        return self._by_name.get(function, ())

    def _index(self, by_file: dict[tuple[str, str], tuple[FrameRow, ...]]) -> None:
        """The table's files and its rows by (last folder, function) and by function; built once, on
        the first frame that needs them."""
        if self._by_name is not None:
            return
        with self._lock:
            mirror: dict[tuple[str, str], list[FrameRow]] = {}
            named: dict[str, list[FrameRow]] = {}
            plugins = tuple(f"{package}/" for package in self._plugins)
            for (file, function), rows in by_file.items():
                if file.startswith(LIBRARY_FOLDERS):
                    continue  # a library's method is not vLLM's of that name (Tensor.cuda is not Module.cuda)
                if plugins and file.startswith(plugins):
                    continue  # a plugin's own rows answer for its own frames only
                mirror.setdefault((_folder(file), function), []).extend(rows)
                if not file.startswith(SERVER_FOLDERS):
                    named.setdefault(function, []).extend(rows)
            self._mirror = {key: tuple(rows) for key, rows in mirror.items()}
            self._files = frozenset(file for file, _ in by_file) | frozenset(self._modules)
            self._by_name = {key: tuple(rows) for key, rows in named.items()}


# Libraries whose frames a table may place (rules/frames/torch.json): their rows are keyed by the
# library's own path (`torch/nn/modules/module.py`), never mirrored into vLLM's folders or names.
LIBRARY_FOLDERS = ("torch/",)


# The OpenAI server's modules (tools/vllm_callgraph.py SERVER_FOLDERS): their functions serve
# requests and the engine never calls them, so a call of another object's method by name
# (`self.quant_method.embedding(`) is not the server's `embedding` route helper.
SERVER_FOLDERS = ("entrypoints/",)


def _folder(file: str) -> str:
    """The last folder of a path inside vLLM (`v1/worker/gpu_worker.py` -> `worker`), or ''."""
    parts = file.split("/")
    return parts[-2] if len(parts) > 1 else ""


_EMPTY = CompiledFrames(groups=[], rows=0)


def empty_frames() -> FrameTable:
    return FrameTable(lambda: _EMPTY)


def _decode(shown: str, data: bytes) -> FrameTableFile:
    try:
        return msgspec.json.decode(data, type=FrameTableFile)
    except msgspec.DecodeError as exc:
        raise PackError(shown, f"is not a valid frame table ({exc})") from exc


def _compile(tables: list[tuple[str, bytes]]) -> CompiledFrames:
    by_file: dict[tuple[str, str], list[FrameRow]] = {}
    rows = 0
    modules: list[str] = []
    plugins: list[str] = []
    for shown, data in tables:
        table = _decode(shown, data)
        modules += table.modules
        plugins += [p for p in table.plugins if p not in plugins]
        for row in table.frames:
            by_file.setdefault((row.file, row.function), []).append(row)
            rows += 1
    groups = [FrameGroup(file, function, tuple(found)) for (file, function), found in by_file.items()]
    return CompiledFrames(groups=groups, rows=rows, modules=modules, plugins=plugins)


def load_frames(root: Path) -> FrameTable:
    """Every table under `root/frames`; an absent folder is an empty table (a rules folder without
    generated data still diagnoses)."""
    folder = root / "frames"
    if not folder.is_dir():
        if folder.exists():
            raise PackError(str(folder), "is not a folder of frame tables")
        return empty_frames()
    paths = sorted(folder.glob("*.json"))

    @functools.cache
    def tables() -> list[tuple[str, bytes]]:
        read: list[tuple[str, bytes]] = []
        for path in paths:
            shown = path.relative_to(root).as_posix()
            try:
                read.append((shown, path.read_bytes()))
            except OSError as exc:
                raise PackError(shown, f"cannot be read ({exc})") from exc
        return read

    def digest() -> bytes:
        sha = hashlib.sha256()
        for shown, data in tables():
            sha.update(b"%s\0%d\0" % (shown.encode(), len(data)))
            sha.update(data)
        return sha.digest()

    try:  # the tables' digest names the compiled table; a start whose files are unchanged reads neither
        source = stated(paths, digest, salt=b"frame-tables")
    except OSError as exc:
        raise PackError("frames", f"holds a table that cannot be read ({exc})") from exc
    return FrameTable(deferred_decode(source, CompiledFrames, lambda: _compile(tables())))
