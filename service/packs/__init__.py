"""Rule packs: YAML under `rules/` decoded, validated and compiled once, then shared read-only.

`load_packs()` is the one entry point; the service loads it at startup and the CLI per run. The
digest covers every YAML file under the rules folder, so a Diagnosis names the exact rules that
produced it (`rules_version`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import re2

from service.errors import PackError
from service.first_use import OnFirstUse, compile_with
from service.packs.catalog import Catalog, load_catalog
from service.packs.compiled import CheckedLineFinder, CheckedSet, validated_before
from service.packs.evidence import EvidenceWeights, load_evidence
from service.packs.fixes import FixPack, load_fix_recipes
from service.packs.fragments import FragmentIndex, empty_fragments, load_fragments
from service.packs.frames import FrameTable, empty_frames, load_frames
from service.packs.loader import stated
from service.packs.misleading import LoggingBugs, load_misleading
from service.packs.prose import ProseVocabulary, load_prose
from service.packs.signatures import (
    COMBINED_OPTIONS,
    LINE_OPTIONS,
    WIDE_LINE_REPEAT,
    CompiledRule,
    compile_pack,
    pack_files,
    unbounded_form,
)
from service.packs.sre_code import stored_compile

__all__ = [
    "LAZY_KINDS",
    "PackError",
    "PatternIndex",
    "RulePacks",
    "SignatureIndex",
    "default_rules_dir",
    "load_packs",
]

RULES_ENV = "VRAMDOC_RULES_DIR"


# Stage markers and traceback frames repeat on every serving line; they are only read near a bare
# OOM, so they get their own index and are scanned lazily (see service.diagnosis.scan).
LAZY_KINDS = frozenset({"stage", "frame"})


@dataclass(frozen=True, slots=True)
class PatternIndex:
    """Some rules, one OR-ed prefilter over all their patterns, and an RE2 set naming which matched."""

    rules: tuple[CompiledRule, ...]
    prefilter: Any = field(repr=False)
    pattern_set: Any = field(repr=False)
    pattern_owner: tuple[tuple[int, int], ...] = ()
    # what the scan read from one line's text under these rules, kept for every document this
    # process reads (a line repeats across requests: every rank, every restart, every paste of the
    # same startup); filled and bounded by service.diagnosis.scan, never part of equality
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


class SignatureIndex(msgspec.Struct, frozen=True):
    """Every active signature rule, by id and in load order; eager and lazy pattern indexes."""

    rules: tuple[CompiledRule, ...]
    by_id: dict[str, CompiledRule]
    packs: tuple[str, ...]
    eager: PatternIndex
    lazy: PatternIndex
    frames: FrameTable = msgspec.field(default_factory=empty_frames)


class RulePacks(msgspec.Struct, frozen=True):
    """All loaded packs; budget adds `catalog`, fixes adds `fixes`, placement reads `evidence`,
    the facts read `misleading` (known logging bugs)."""

    signatures: SignatureIndex
    digest: str
    root: Path
    catalog: Catalog
    fixes: FixPack
    evidence: EvidenceWeights
    prose: ProseVocabulary
    misleading: LoggingBugs
    fragments: FragmentIndex = msgspec.field(default_factory=empty_fragments)


def default_rules_dir() -> Path:
    """VRAMDOC_RULES_DIR, else the repository's own `rules/` folder."""
    given = os.environ.get(RULES_ENV)
    if given:
        return Path(given)
    return Path(__file__).resolve().parents[2] / "rules"


def _digest(root: Path, files: list[Path]) -> str:
    """`rules_version`: the sha256 of every file's name and bytes, remembered by the files' stat."""

    def digest() -> bytes:
        sha = hashlib.sha256()
        for path in files:
            sha.update(path.relative_to(root).as_posix().encode() + b"\0")
            sha.update(path.read_bytes())
            sha.update(b"\0")
        return f"sha256:{sha.hexdigest()}".encode()

    try:
        return stated(files, digest, salt=b"rules-digest").decode()
    except OSError as exc:
        raise PackError(str(root), f"holds a file that cannot be read ({exc})") from exc


def _prefilter(rules: tuple[CompiledRule, ...], *, check_now: bool = False) -> Any:
    forms = [(f"(?m:{p})", f"(?m:{unbounded_form(p, WIDE_LINE_REPEAT)})") for r in rules for p in r.prefilter]
    return CheckedLineFinder(forms, LINE_OPTIONS, check_now=check_now)


def _pattern_set(rules: tuple[CompiledRule, ...], *, check_now: bool = False) -> Any:
    forms = ((form, unbounded_form(form)) for compiled in rules for form in compiled.set_forms)
    return CheckedSet(forms, COMBINED_OPTIONS, check_now=check_now)


def _pattern_index(rules: tuple[CompiledRule, ...], *, now: bool) -> PatternIndex:
    """The index over `rules`; its prefilter and set are compiled `now`, else on first use."""
    owner = tuple((r, x) for r, compiled in enumerate(rules) for x in range(len(compiled.set_forms)))
    if not owner:
        return PatternIndex(rules=rules, prefilter=None, pattern_set=re2.Set.SearchSet(COMBINED_OPTIONS))
    if now:
        prefilter, pattern_set = _prefilter(rules, check_now=True), _pattern_set(rules, check_now=True)
    else:
        prefilter = OnFirstUse(functools.partial(_prefilter, rules))
        pattern_set = OnFirstUse(functools.partial(_pattern_set, rules))
    return PatternIndex(rules=rules, prefilter=prefilter, pattern_set=pattern_set, pattern_owner=owner)


def _index(rules: list[CompiledRule], packs: list[str], frames: FrameTable) -> SignatureIndex:
    active = tuple(r for r in rules if r.rule.status != "retired")
    eager = tuple(r for r in active if r.rule.kind not in LAZY_KINDS)
    lazy = tuple(r for r in active if r.rule.kind in LAZY_KINDS)
    # The combined prefilters and sets are checked by compiling them once per set of patterns and
    # RE2 build (a pattern can pass alone and still fail combined: RE2's memory budget); after that
    # each is compiled when a scan first runs it (`vramdoc estimate` never does, a short paste
    # never reaches the frame and stage index).
    forms = [f"{r.rule.kind}\0{p}" for r in active for p in (*r.prefilter, "\1", *r.set_forms)]
    built: list[PatternIndex] = []
    if validated_before(forms, lambda: built.extend(_pattern_index(g, now=True) for g in (eager, lazy))):
        built = [_pattern_index(g, now=False) for g in (eager, lazy)]
    return SignatureIndex(
        rules=active,
        by_id={r.rule.id: r for r in rules},
        packs=tuple(packs),
        eager=built[0],
        lazy=built[1],
        frames=frames,
    )


def load_signatures(root: Path) -> SignatureIndex:
    """Compile every pack under `root/signatures` (rule ids are unique across packs), with the
    frame -> stage table under `root/frames` that places traceback frames."""
    folder = root / "signatures"
    if not folder.is_dir():
        raise PackError(str(folder), "is not a folder of signature packs (set VRAMDOC_RULES_DIR)")
    rules: list[CompiledRule] = []
    packs: list[str] = []
    owner: dict[str, str] = {}
    for path in pack_files(folder):
        shown = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PackError(shown, f"cannot be read ({exc})") from exc
        compiled = compile_pack(text, shown)
        for item in compiled:
            if item.rule.id in owner:
                raise PackError(shown, f"rule id also defined in {owner[item.rule.id]}", rule_id=item.rule.id)
            owner[item.rule.id] = shown
        rules.extend(compiled)
        if compiled:
            packs.append(compiled[0].pack)
    if not rules:
        raise PackError(folder.as_posix(), "holds no signature rules")
    for item in rules:
        unknown = [name for name in item.rule.not_after if name not in owner]
        if unknown:
            raise PackError(item.file, f"not_after names no rule: {', '.join(unknown)}", rule_id=item.rule.id)
    return _index(rules, packs, load_frames(root))


def load_packs(rules_dir: Path | None = None) -> RulePacks:
    """Load and validate every pack; a malformed one raises PackError naming file, rule and field."""
    root = (rules_dir or default_rules_dir()).resolve()
    if not root.is_dir():
        raise PackError(str(root), "is not a rules folder (set VRAMDOC_RULES_DIR to one)")
    compile_with(stored_compile)  # the modules' own patterns, from the code an earlier start stored
    signatures = load_signatures(root)
    catalog = load_catalog(root)
    fixes = load_fix_recipes(root, catalog.engine)
    evidence = load_evidence(root)
    prose = load_prose(root)
    misleading = load_misleading(root, signatures.by_id)
    return RulePacks(
        signatures=signatures,
        digest=_digest(root, pack_files(root, (".yaml", ".yml", ".json"))),
        root=root,
        catalog=catalog,
        fixes=fixes,
        evidence=evidence,
        prose=prose,
        fragments=load_fragments(root),
        misleading=misleading,
    )
