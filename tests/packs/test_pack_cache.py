"""The compiled-pack cache: a decoded file is reused only while its bytes and its Struct are unchanged."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
import re2

from service.diagnosis.normalize import Document
from service.diagnosis.scan import scan
from service.errors import PackError
from service.first_use import OnFirstUse
from service.packs import load_packs, loader, signatures
from service.packs.frames import CompiledFrames, FrameGroup, FrameRow, load_frames
from service.packs.loader import CACHE_ENTRIES, decode_yaml, pack_cache_dir, stated
from service.packs.signatures import Regexes, SignaturePackFile, pack_files

RULES = Path(__file__).resolve().parents[2] / "rules"


class Pack(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    sizes: list[int]


class PackWithLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    sizes: list[int]
    limit: int = 3


TEXT = "name: demo\nsizes: [1, 2, 3]\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(folder))
    return folder


def test_a_decoded_file_is_stored_and_the_next_decode_reads_it(cache: Path) -> None:
    first = decode_yaml(TEXT, Pack, file="demo.yaml")
    stored = list(cache.glob("*.msgpack"))
    assert len(stored) == 1
    assert msgspec.msgpack.decode(stored[0].read_bytes(), type=Pack) == first
    stored[0].write_bytes(msgspec.msgpack.encode(Pack(name="from-cache", sizes=[9])))
    assert decode_yaml(TEXT, Pack, file="demo.yaml") == Pack(name="from-cache", sizes=[9])


def test_a_changed_file_or_a_changed_struct_misses(cache: Path) -> None:
    decode_yaml(TEXT, Pack, file="demo.yaml")
    assert decode_yaml(TEXT.replace("3]", "4]"), Pack, file="demo.yaml").sizes == [1, 2, 4]
    assert decode_yaml(TEXT, PackWithLimit, file="demo.yaml") == PackWithLimit(name="demo", sizes=[1, 2, 3])
    assert len(list(cache.glob("*.msgpack"))) == 3


def test_a_corrupt_cache_entry_falls_back_to_the_yaml(cache: Path) -> None:
    decode_yaml(TEXT, Pack, file="demo.yaml")
    (entry,) = cache.glob("*.msgpack")
    entry.write_bytes(b"\xc1 not msgpack")
    assert decode_yaml(TEXT, Pack, file="demo.yaml") == Pack(name="demo", sizes=[1, 2, 3])


def test_an_invalid_file_is_never_cached_and_its_error_still_has_the_line(cache: Path) -> None:
    with pytest.raises(PackError) as raised:
        decode_yaml("name: demo\nsizes: [1, two]\n", Pack, file="demo.yaml")
    assert raised.value.line == 2
    assert raised.value.path == "$.sizes[1]"
    assert not list(cache.glob("*.msgpack")) if cache.exists() else True


def test_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pack_cache_dir() is None
    decode_yaml(TEXT, Pack, file="demo.yaml")
    assert not any(tmp_path.rglob("*.msgpack"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only folder")
def test_an_unwritable_cache_folder_costs_nothing_but_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(folder))
    assert decode_yaml(TEXT, Pack, file="demo.yaml").name == "demo"


def test_an_unusable_cache_path_costs_nothing_but_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("VRAMDOC_PACK_CACHE", str(blocker / "cache"))
    assert decode_yaml(TEXT, Pack, file="demo.yaml").name == "demo"


def test_the_rules_load_the_same_from_the_cache_as_from_the_yaml(cache: Path) -> None:
    cold = load_packs(RULES)
    assert list(cache.glob("*.msgpack"))
    warm = load_packs(RULES)
    assert warm.digest == cold.digest
    assert warm.catalog == cold.catalog
    assert warm.fixes == cold.fixes
    assert [r.rule for r in warm.signatures.rules] == [r.rule for r in cold.signatures.rules]


def _frames_root(tmp_path: Path, rows: list[list[object]]) -> Path:
    root = tmp_path / "rules"
    (root / "frames").mkdir(parents=True)
    table = {"source": "a test", "frames": rows}
    (root / "frames" / "vllm.json").write_bytes(msgspec.json.encode(table))
    return root


ROW = ["worker/gpu_model_runner.py", "profile_run", "profiling", "warmup_oom", [["0.8.0", "0.33.0"]]]


def test_the_frame_table_comes_from_the_cache_and_is_decoded_on_first_use(
    cache: Path, tmp_path: Path
) -> None:
    root = _frames_root(tmp_path, [ROW, [*ROW[:1], "load_model", "loading", "weights_oom", ROW[4]]])
    assert load_frames(root).rows == 2
    (entry,) = cache.glob("*.msgpack")
    table = load_frames(root)  # a hit: the entry is read when the table is first used, not before
    stand_in = CompiledFrames(
        groups=[FrameGroup("x.py", "f", (FrameRow("x.py", "f", "serving", None, []),))], rows=1
    )
    entry.write_bytes(msgspec.msgpack.encode(stand_in))
    assert table.rows == 1
    assert list(table.by_file) == [("x.py", "f")]


def test_a_frame_table_with_a_bad_row_fails_at_load_and_is_not_cached(cache: Path, tmp_path: Path) -> None:
    root = _frames_root(tmp_path, [["/abs/path.py", *ROW[1:]]])
    with pytest.raises(PackError) as raised:
        load_frames(root)
    assert raised.value.file == "frames/vllm.json"
    assert "inside vllm/" in str(raised.value)
    assert not list(cache.glob("*.msgpack")) if cache.exists() else True


def test_a_full_cache_folder_keeps_its_newest_entries_when_a_miss_writes(cache: Path) -> None:
    cache.mkdir()
    for age in range(CACHE_ENTRIES + 88):  # what releases and test runs leave behind
        old = cache / f"{age:064x}.msgpack"
        old.write_bytes(b"")
        os.utime(old, (1_000_000 + age, 1_000_000 + age))
    decode_yaml(TEXT, Pack, file="demo.yaml")
    left = {p.name for p in cache.glob("*.msgpack")}
    assert len(left) <= CACHE_ENTRIES // 2 + 1
    assert f"{CACHE_ENTRIES + 87:064x}.msgpack" in left and f"{0:064x}.msgpack" not in left
    assert decode_yaml(TEXT, Pack, file="demo.yaml") == Pack(name="demo", sizes=[1, 2, 3])
    assert len(list(cache.glob("*.msgpack"))) == len(left)  # the new entry is kept and read


BAD_PATTERN_PACK = """\
pack: scratch
description: a scratch pack
rules:
  - id: scratch-rule
    title: A scratch rule
    kind: failure
    phase: startup_budget
    severity: error
    patterns:
      - '(a+)+\\1 scratch'
    examples:
      match:
        - line: 'aa scratch'
"""


def _full_pattern_compiles(monkeypatch: pytest.MonkeyPatch, patterns: set[str]) -> list[str]:
    """Every later `re2.compile` of one of `patterns` (the full form of a rule's pattern)."""
    seen: list[str] = []
    real = re2.compile

    def counting(pattern: Any, options: Any = None) -> Any:
        if pattern in patterns:
            seen.append(pattern)
        return real(pattern, options)

    monkeypatch.setattr(re2, "compile", counting)
    return seen


def test_packs_from_the_cache_compile_a_full_pattern_only_when_a_scan_needs_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_packs(RULES)  # validated once, every pattern compiled, and stored
    patterns = {p for r in load_packs(RULES).signatures.rules for p in (*r.rule.patterns, *r.rule.exclude)}
    compiled = _full_pattern_compiles(monkeypatch, patterns)
    packs = load_packs(RULES)
    assert compiled == []
    rule = packs.signatures.by_id["vllm-kv-estimated-max-len"]
    hits = scan(Document(rule.rule.examples.match[0].line), packs.signatures.eager)
    assert "vllm-kv-estimated-max-len" in {h.rule_id for h in hits}
    assert rule.rule.patterns[0] in compiled
    assert len(compiled) < len(patterns) // 10


def test_a_pattern_re2_rejects_fails_the_load_even_where_the_yaml_alone_was_cached(
    cache: Path, tmp_path: Path
) -> None:
    root = tmp_path / "rules"
    shutil.copytree(RULES, root)
    (root / "signatures" / "zz-scratch.yaml").write_text(BAD_PATTERN_PACK, encoding="utf-8")
    decode_yaml(BAD_PATTERN_PACK, SignaturePackFile, file="signatures/zz-scratch.yaml")  # YAML-valid
    for _ in range(2):  # and again: a failed validation is never remembered as a pass
        with pytest.raises(PackError) as raised:
            load_packs(root)
        assert raised.value.file == "signatures/zz-scratch.yaml"
        assert raised.value.rule_id == "scratch-rule"
        assert raised.value.path == "$.rules[0].patterns[0]"
        assert raised.value.line == 10
        assert "RE2 cannot compile" in str(raised.value)


def test_a_validation_by_another_re2_build_is_not_taken_for_this_one(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_packs(RULES)
    stored = set(cache.glob("*.msgpack"))
    monkeypatch.setattr(signatures, "re2_build", lambda: b"re2:another-build")
    load_packs(RULES)
    added = set(cache.glob("*.msgpack")) - stored
    assert len(added) == len(pack_files(RULES / "signatures"))  # every signature pack validated again


def test_a_pattern_that_fails_to_compile_on_first_use_names_its_file_and_rule() -> None:
    regexes = Regexes(
        ["ok", "(a+)+\\1"], file="signatures/x.yaml", rule_id="x-rule", field="$.rules[2].patterns"
    )
    assert regexes[0].search("ok") is not None
    with pytest.raises(PackError) as raised:
        regexes[1]
    assert (raised.value.file, raised.value.rule_id) == ("signatures/x.yaml", "x-rule")
    assert raised.value.path == "$.rules[2].patterns[1]"


def test_the_combined_indexes_and_prose_words_wait_for_first_use_once_they_compiled(cache: Path) -> None:
    cold = load_packs(RULES)  # nothing remembered yet: everything compiled, so checked, at load
    assert not isinstance(cold.signatures.eager.prefilter, OnFirstUse)
    assert not isinstance(cold.prose.failure, OnFirstUse)
    warm = load_packs(RULES)
    lazy = warm.signatures.lazy
    assert isinstance(lazy.prefilter, OnFirstUse) and isinstance(lazy.pattern_set, OnFirstUse)
    assert isinstance(warm.prose.failure, OnFirstUse)
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    for index in ("eager", "lazy"):
        built, checked = getattr(warm.signatures, index), getattr(cold.signatures, index)
        assert built.pattern_owner == checked.pattern_owner
        assert sorted(built.pattern_set.Match(line) or ()) == sorted(checked.pattern_set.Match(line) or ())
        assert [m.span() for m in built.prefilter.finditer(line)] == [
            m.span() for m in checked.prefilter.finditer(line)
        ]
    assert warm.prose.failure.search("the server crashed") is not None


def test_a_prose_pattern_re2_rejects_fails_the_load_every_time(cache: Path, tmp_path: Path) -> None:
    root = tmp_path / "rules"
    shutil.copytree(RULES, root)
    load_packs(root)  # the good vocabulary remembered: the broken one is another file
    prose = root / "prose.yaml"
    prose.write_text(prose.read_text(encoding="utf-8").replace("failure:\n", "failure:\n  - '(a+)+\\1'\n", 1))
    for _ in range(2):
        with pytest.raises(PackError) as raised:
            load_packs(root)
        assert raised.value.file == "prose.yaml"
        assert raised.value.path == "$.failure"


def _counting(path: Path) -> tuple[list[bytes], Any]:
    read: list[bytes] = []

    def compute() -> bytes:
        read.append(path.read_bytes())
        return read[-1].upper()

    return read, compute


def test_a_stated_value_is_reused_while_the_files_stat_is_unchanged(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "RACY_NS", 0)  # the file is older than the moment it is stated
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(b"one")
    read, compute = _counting(pack)
    assert stated([pack], compute, salt=b"test") == b"ONE"
    assert stated([pack], compute, salt=b"test") == b"ONE"
    assert read == [b"one"]
    assert stated([pack], compute, salt=b"another") == b"ONE" and len(read) == 2


def test_a_file_rewritten_with_its_size_and_times_put_back_is_read_again(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "RACY_NS", 0)
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(b"one")
    read, compute = _counting(pack)
    stated([pack], compute, salt=b"test")
    before = os.stat(pack)
    pack.write_bytes(b"two")
    os.utime(pack, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p` or a tar leave it
    assert stated([pack], compute, salt=b"test") == b"TWO"


def test_files_changed_within_the_racy_window_are_read_on_every_start(cache: Path, tmp_path: Path) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_bytes(b"one")
    read, compute = _counting(pack)
    for _ in range(3):  # stamped just now: a rewrite in the same clock tick could keep every stat field
        assert stated([pack], compute, salt=b"test") == b"ONE"
    assert len(read) == 3


def test_a_warm_start_reads_neither_the_frame_table_nor_the_files_for_the_rules_digest(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = load_packs(RULES)  # the checkout's files are older than the racy window
    opened: list[Path] = []
    real = Path.read_bytes

    def reading(path: Path) -> bytes:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", reading)
    warm = load_packs(RULES)
    assert warm.digest == cold.digest
    assert warm.signatures.frames.rows == cold.signatures.frames.rows
    assert RULES / "frames" / "vllm.json" not in opened
    rule_files = [p for p in opened if p.is_relative_to(RULES)]
    assert len(rule_files) < len(pack_files(RULES, (".yaml", ".yml", ".json"))) // 4
