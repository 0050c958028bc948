"""Decoding YAML rule-pack files into msgspec Structs, with errors that point at the bad field.

msgspec names the `$.path` of a bad value; walking the `yaml.compose()` node tree along that path
gives the line, so an author sees `rules/signatures/kv.yaml:42 rule vllm-kv-... $.rules[3].phase`.

Parsing YAML is most of what a start-up costs, so a file once decoded is kept as msgpack of its
validated Struct, keyed by the file's bytes and the code that defines the Struct: the next process
decodes that in microseconds, and a changed file or changed code simply misses. YAML is parsed with libyaml
where PyYAML has it, and the node tree (slow, pure Python) is composed only to locate an error.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from service.errors import PackError

if TYPE_CHECKING:
    import yaml

__all__ = [
    "PackError",
    "cached_decode",
    "decode_yaml",
    "deferred_decode",
    "load_yaml_file",
    "locate",
    "pack_cache_dir",
    "parse_yaml",
    "remembered",
    "stated",
    "yaml_line",
]

T = TypeVar("T")

CACHE_ENV = "VRAMDOC_PACK_CACHE"
CACHE_ENTRIES = 512  # entries a cache folder keeps (`_prune`)
_CACHE_FORMAT = b"vramdoc-pack-cache-2\0"
_CODE_DIGESTS: dict[Any, bytes] = {}
_PACKAGE = Path(__file__).resolve().parents[1]  # the `service` package: every pack Struct is in it

_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[['\"](.+?)['\"]\]")


def _path_parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for key, index, quoted in _PATH_PART.findall(path.removeprefix("$")):
        if index:
            parts.append(int(index))
        else:
            parts.append(key or quoted)
    return parts


def _yaml() -> Any:
    """PyYAML, imported on first use: a start-up served from the cache never needs it."""
    import yaml

    return yaml


def _loader() -> Any:
    """libyaml's loader when PyYAML was built with it (wheels are); the pure-Python one otherwise."""
    yaml = _yaml()
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_line(node: yaml.Node | None, path: str) -> tuple[int | None, str | None]:
    """The 1-based line of the node at `path` and the id of the enclosing rule, if any."""
    yaml = _yaml()
    rule_id: str | None = None
    line = node.start_mark.line + 1 if node is not None else None
    for part in _path_parts(path):
        if node is None:
            break
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for key_node, value_node in node.value:
                if key_node.value == part:
                    nxt = value_node
                    line = key_node.start_mark.line + 1
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == "id" and isinstance(value_node, yaml.ScalarNode):
                    rule_id = value_node.value
    return line, rule_id


def locate(text: str, path: str) -> tuple[int | None, str | None]:
    """The line and enclosing rule id of `path` in a pack's text (composes the tree: errors only)."""
    yaml = _yaml()
    try:
        node = yaml.compose(text, Loader=_loader())
    except yaml.YAMLError:
        return None, None
    return yaml_line(node, path)


def pack_cache_dir() -> Path | None:
    """`VRAMDOC_PACK_CACHE` (a folder, or `off`), else the user cache folder."""
    given = os.environ.get(CACHE_ENV, "")
    if given.strip().lower() in ("off", "0", "none"):
        return None
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vramdoc" / "packs"


@functools.cache
def _package_digest() -> bytes:
    """Each source file of the package by its path, size and modification time: an edit changes
    the time, and stating 120 files costs a start 2 ms where reading and hashing them cost 7 ms."""
    sha = hashlib.sha256()
    for name, size, mtime in sorted(_sources(str(_PACKAGE), "")):
        sha.update(f"{name}\0{size}\0{mtime}\0".encode())
    return sha.digest()


def _sources(folder: str, prefix: str) -> list[tuple[str, int, int]]:
    found: list[tuple[str, int, int]] = []
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                found.extend(_sources(entry.path, f"{prefix}{entry.name}/"))
        elif entry.name.endswith(".py"):
            stat = entry.stat()
            found.append((prefix + entry.name, stat.st_size, stat.st_mtime_ns))
    return found


def _code_digest(type_: Any) -> bytes:
    """Changes whenever the code that defines `type_` may have: a source file of the `service`
    package (by `_package_digest`'s stat), or of the module `type_` is defined in (by its bytes).
    Walking every Struct's JSON schema instead cost several times that on each start."""
    digest = _CODE_DIGESTS.get(type_)
    if digest is None:
        sha = hashlib.sha256(_package_digest() + f"{type_.__module__}:{type_.__qualname__}".encode())
        module = sys.modules.get(type_.__module__)
        source = getattr(module, "__file__", None)
        if source and not Path(source).resolve().is_relative_to(_PACKAGE):
            sha.update(Path(source).read_bytes())
        digest = _CODE_DIGESTS[type_] = sha.digest()
    return digest


def _cache_path(source: bytes, type_: Any, salt: bytes = b"", suffix: str = ".msgpack") -> Path | None:
    folder = pack_cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256(_CACHE_FORMAT + _code_digest(type_) + salt + b"\0" + source).hexdigest()
    return folder / f"{key}{suffix}"


def _cached(path: Path | None, type_: type[T]) -> T | None:
    if path is None:
        return None
    try:
        return msgspec.msgpack.decode(path.read_bytes(), type=type_)
    except (OSError, msgspec.DecodeError):
        return None  # absent, unreadable or stale: decode the YAML instead


def _store(path: Path | None, value: Any) -> None:
    """Best effort: a read-only or missing cache folder only costs the next start its YAML parse."""
    if path is None:
        return
    _prune(path.parent)
    import tempfile  # only a cache miss writes: a start from the cache never needs it

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        os.fchmod(fd, 0o644)  # a cache baked into an image as root is read by its non-root user
        with os.fdopen(fd, "wb") as out:
            out.write(msgspec.msgpack.encode(value))
        os.replace(tmp, path)
    except OSError:
        return


def _prune(folder: Path) -> None:
    """Keep the folder to its newest `CACHE_ENTRIES` entries. Every change of the rules or of the
    code adds an entry per pack file and nothing else removes one, so a folder that only grew would
    fill a disk over releases and test runs; a pruned entry in use is only rebuilt once. Runs only
    on a miss, which is about to write."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    if len(entries) <= CACHE_ENTRIES:
        return
    dated: list[tuple[float, str]] = []
    for entry in entries:
        try:
            dated.append((entry.stat().st_mtime, entry.path))
        except OSError:
            continue  # removed by another process meanwhile
    for _, stale in sorted(dated)[: len(dated) - CACHE_ENTRIES // 2]:
        try:
            os.remove(stale)
        except OSError:
            continue


def cached_decode(source: bytes, type_: type[T], build: Callable[[], T], *, salt: bytes = b"") -> T:
    """The `type_` value built from `source`: read from the cache while `source` and `type_` are
    unchanged, else `build()` (which validates, raising PackError) and stored for the next process.

    `salt` names what else `build()` checked the value against (a signature pack's patterns are
    compiled by RE2 before it is stored: the RE2 build is part of its key), so an entry stored by
    another check is never taken for one that passed this one."""
    cache = _cache_path(source, type_, salt)
    hit = _cached(cache, type_)
    if hit is not None:
        return hit
    value = build()
    _store(cache, value)
    return value


def remembered(source: bytes, check: Callable[[], None], *, salt: bytes = b"") -> bool:
    """True when `check` passed on `source` before (the cache holds its mark); else `check()` runs
    now (raising on a failure, which is never remembered), a pass is stored, and False says it ran.
    Without a cache folder every call runs `check()`."""
    cache = _cache_path(source, bool, salt)
    if _cached(cache, bool):
        return True
    check()
    _store(cache, True)
    return False


class _Stated(msgspec.Struct, frozen=True, array_like=True):
    """What `stated` remembers: the value, and the time just before the files were stated."""

    value: bytes
    stated_ns: int


# A file changed within one tick of the clock that stamps it may keep its size and times (a coarse
# kernel clock, a file system keeping whole or even seconds): an entry vouches only for files whose
# times were already this much older than the moment they were stated, as git's racy-clean check.
RACY_NS = 3 * 10**9


def stated(paths: Sequence[Path], compute: Callable[[], bytes], *, salt: bytes) -> bytes:
    """`compute()`, a value that depends on the bytes of `paths` alone, remembered in the pack cache
    under their stat (device, inode, size, modification and change times: rewriting a file, even
    with its old times put back, changes its change time), so a start whose files are as they were
    reads neither them nor their digest: the rules' digest and the frame table's key read and hash
    4 MB. Raises OSError when a file cannot be stated."""
    now = time.time_ns()
    signature = bytearray()
    newest = 0
    for path in paths:
        found = os.stat(path)
        newest = max(newest, found.st_mtime_ns, found.st_ctime_ns)
        fields = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
        signature += os.fsencode(path) + b"\0%d\0%d\0%d\0%d\0%d\0" % fields
    cache = _cache_path(bytes(signature), _Stated, salt, suffix=".stat")
    known = _cached(cache, _Stated)
    if known is not None and newest < known.stated_ns - RACY_NS:
        return known.value
    value = compute()
    _store(cache, _Stated(value, now))
    return value


def deferred_decode(source: bytes, type_: type[T], build: Callable[[], T]) -> Callable[[], T]:
    """Like `cached_decode`, but a value already in the cache is decoded only when the returned
    function is first called; a value that is not is built (so validated) now and kept."""
    cache = _cache_path(source, type_)
    if cache is not None and cache.is_file():
        return lambda: cached_decode(source, type_, build)
    value = cached_decode(source, type_, build)
    return lambda: value


def decode_yaml(text: str, type_: type[T], *, file: str) -> T:
    """Decode one YAML document into `type_`, raising PackError that locates any bad field."""
    return cached_decode(text.encode("utf-8"), type_, lambda: parse_yaml(text, type_, file=file))


def parse_yaml(text: str, type_: type[T], *, file: str) -> T:
    """`decode_yaml` without the cache: always parses and validates `text`."""
    return _decode_yaml_text(text, type_, file)


def _decode_yaml_text(text: str, type_: type[T], file: str) -> T:
    yaml = _yaml()
    try:
        raw: Any = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PackError(file, f"is not valid YAML ({getattr(exc, 'problem', exc)})", line=line) from exc
    try:
        value = msgspec.convert(raw, type_, strict=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        path = None
        match = re.search(r"at `(\$[^`]*)`", message)
        if match:
            path = match.group(1)
            message = message[: match.start()].rstrip(" -")
        line, rule_id = locate(text, path or "$")
        raise PackError(file, message, path=path, line=line, rule_id=rule_id) from exc
    return value


def load_yaml_file(path: Path, type_: type[T], *, root: Path | None = None) -> T:
    """Read and decode one pack file; the error names the file relative to `root`."""
    shown = str(path.relative_to(root)) if root is not None and path.is_relative_to(root) else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackError(shown, f"cannot be read ({exc})") from exc
    return decode_yaml(text, type_, file=shown)
