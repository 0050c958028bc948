"""Fix recipes (`rules/fixes/*.yaml`) and the vLLM flag history they are checked against.

YAML says what a fix is: its id, the phases it serves, the facts that make it exact, the name of
the Python calculator that computes its values, the flags it may set, its trade-off and base rank.
The flag history (`rules/fixes/flags.yaml`) says in which vLLM releases each flag exists, so no fix
ever recommends a flag the user's version lacks. Loading fails fast with file, recipe id, `$.path`
and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from service.errors import PackError
from service.first_use import first_use_re
from service.packs.catalog import ENGINE_FILE, EngineFacts
from service.packs.loader import decode_yaml, load_yaml_file, locate
from service.schemas import Facts, Finding, Phase, Snapshot
from service.versions import Version, VersionRange, VersionSpan, parse_version, release

__all__ = [
    "FixPack",
    "FixRecipe",
    "FlagHistory",
    "FlagSpec",
    "RecipeExample",
    "RecipeOrigin",
    "VersionRange",
    "load_fix_recipes",
]

FLAGS_FILE = "flags.yaml"
OPTIONS_FILE = "options.json"  # every release's long options, by tools/vllm_options.py
_RECIPE_ID = first_use_re(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
_FLAG_NAME = first_use_re(r"^--[a-z][a-z0-9-]*$")
_SHORT_FLAG = first_use_re(r"^-[a-zA-Z]{1,3}$")
_FACT_NAMES = frozenset(Facts.__struct_fields__)


class _Pack(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Strict decoding for every pack type, as for the wire types."""


class FlagSpec(_Pack, frozen=True):
    """One `vllm serve` flag and the releases that accept it."""

    name: str
    versions: VersionRange = VersionRange()
    never: bool = False
    replacement: str | None = None
    previous: str | None = None
    keep_values: bool = False
    note: str | None = None
    fact: str | None = None
    switch: bool = False
    aliases: list[str] = msgspec.field(default_factory=list)
    alias_of: str | None = None

    def __post_init__(self) -> None:
        for name in (self.name, self.replacement, self.previous, self.alias_of):
            if name is not None and not _FLAG_NAME.match(name):
                raise ValueError(f"flag {name!r} must be spelled like --max-model-len")
        for alias in self.aliases:
            if not _SHORT_FLAG.match(alias):
                raise ValueError(f"alias {alias!r} must be a short option like -tp")
        if self.fact is not None and self.fact not in _FACT_NAMES:
            raise ValueError(f"fact {self.fact!r} is not a fact name")

    def exists(self, version: Version | None) -> bool:
        return not self.never and self.versions.contains(version)


class FlagHistory(_Pack, frozen=True):
    flags: list[FlagSpec]


class RecipeExample(_Pack, frozen=True):
    """A case the recipe must answer: facts in, the exact change out (or `expect: null`, it declines)."""

    facts: Facts
    expect: str | None
    phase: Phase | None = None
    findings: list[Finding] = msgspec.field(default_factory=list)
    evidence: list[str] = msgspec.field(default_factory=list)
    snapshot: Snapshot | None = None
    version: str | None = None
    command: str | None = None
    note: str | None = None


class FixRecipe(_Pack, frozen=True):
    """One kind of fix; its calculator turns facts into an exact change, or declines."""

    id: str
    title: str
    phases: list[Phase | Literal["any"]]
    calculator: str
    tradeoff: str
    rank: int
    needs: list[str] = msgspec.field(default_factory=list)
    flags: list[str] = msgspec.field(default_factory=list)
    action: str | None = None
    versions: VersionRange = VersionRange()
    without_facts: Literal["offer", "skip"] = "skip"
    status: Literal["stable", "experimental", "retired"] = "stable"
    note: str | None = None
    # the signature rules whose findings (of the diagnosed phase) the recipe needs, or must not see:
    # one phase can be reached by different failures (a KV cache sized too small, or an OOM while
    # allocating the cache it sized), and advice right for one is wrong for the other
    with_rules: list[str] = msgspec.field(default_factory=list)
    without_rules: list[str] = msgspec.field(default_factory=list)
    examples: list[RecipeExample] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if not _RECIPE_ID.match(self.id):
            raise ValueError(
                f"id {self.id!r} must be an imperative kebab-case phrase like lower-max-model-len"
            )
        if not self.phases:
            raise ValueError("phases must name at least one phase")
        if not 1 <= self.rank <= 100:
            raise ValueError("rank must be between 1 (try first) and 100")
        if bool(self.flags) == (self.action is not None):
            raise ValueError("a recipe names either the flags it sets or an action, not both or neither")

    def serves(self, phase: Phase) -> bool:
        return phase in self.phases or "any" in self.phases

    def applies(self, phase: Phase, findings: Sequence[Finding]) -> bool:
        """Whether the recipe serves `phase` as the findings of that phase reached it."""
        if not self.serves(phase):
            return False
        if not self.with_rules and not self.without_rules:
            return True
        return self.admits({f.rule for f in findings if f.phase == phase})

    def admits(self, rules: set[str]) -> bool:
        """Whether the rules of the diagnosed phase's findings are ones this recipe is for."""
        if self.with_rules and not rules.intersection(self.with_rules):
            return False
        return not rules.intersection(self.without_rules)


class _RecipeFile(_Pack, frozen=True):
    recipes: list[FixRecipe]


class RecipeOrigin(_Pack, frozen=True):
    """Where a recipe's `calculator` is written, so a check above the packs can point at it.

    The line is found from the file's text only when asked: composing YAML nodes costs start-up time
    that only an error message needs.
    """

    file: str
    path: str
    text: str

    @property
    def line(self) -> int | None:
        return locate(self.text, self.path)[0]


class FixPack(_Pack, frozen=True):
    """Every active recipe, in file order, with the flag history.

    `engine` is `rules/catalog/engines.yaml` (the same decoded record the catalog holds), for the
    defaults a fix assumes when a flag is not given. Packs are data: which calculator names exist
    is known only to `service.fixes`, which checks
    `calculator_origins` when the rules are loaded (`service.core.load_rules`).
    """

    recipes: tuple[FixRecipe, ...]
    flags: dict[str, FlagSpec]
    engine: EngineFacts
    calculator_origins: dict[str, RecipeOrigin] = msgspec.field(default_factory=dict)
    aliases: dict[str, str] = msgspec.field(default_factory=dict)
    options: dict[str, list[list[str]]] = msgspec.field(default_factory=dict)

    def flag(self, name: str) -> FlagSpec | None:
        return self.flags.get(name)

    def expand(self, name: str, version: str | None = None) -> str:
        """The long option vLLM's parser reads `name` as. Its parsers never set `allow_abbrev=False`
        (tools/vllm_options.py), so argparse takes an unambiguous prefix of a long option for it
        (`--gpu-memory-util` is `--gpu-memory-utilization`); an option of its own, a prefix of two
        options of the release (of any release, when it is unknown) or of none is `name` itself."""
        if not name.startswith("--") or name in self.options or name in self.flags or len(name) < 4:
            return name
        known = parse_version(version) if version else None
        matches = {
            option
            for option, runs in self.options.items()
            if option.startswith(name)
            and (known is None or any(release(low) <= known <= release(high) for low, high in runs))
        }
        return matches.pop() if len(matches) == 1 else name

    @property
    def switches(self) -> frozenset[str]:
        """Flags that take no value (`switch: true` in flags.yaml), for the command reader."""
        return frozenset(name for name, spec in self.flags.items() if spec.switch)

    def setting(self, name: str) -> FlagSpec | None:
        """The flag whose setting `name` changes (`--device-memory-utilization` sets
        `--gpu-memory-utilization`), or None when the history does not list it."""
        spec = self.flags.get(name)
        if spec is not None and spec.alias_of is not None:
            return self.flags.get(spec.alias_of)
        return spec

    def spelling(self, names: list[str], span: VersionSpan) -> str | None:
        """The first of `names` that exists in every version of `span` (a renamed flag lists old and new)."""
        for name in names:
            spec = self.flags.get(name)
            if spec is not None and all(spec.exists(v) for v in span):
                return name
        return None


def _field_error(file: str, text: str, index: int, field: str, message: str) -> PackError:
    path = f"$.recipes[{index}].{field}"
    line, rule_id = locate(text, path)
    return PackError(file, message, path=path, line=line, rule_id=rule_id)


def _check_recipes(file: str, text: str, pack: _RecipeFile, flags: dict[str, FlagSpec]) -> None:
    for index, recipe in enumerate(pack.recipes):
        for j, need in enumerate(recipe.needs):
            if need not in _FACT_NAMES:
                raise _field_error(file, text, index, f"needs[{j}]", f"{need!r} is not a fact name")
        for j, flag in enumerate(recipe.flags):
            if flag not in flags:
                raise _field_error(
                    file, text, index, f"flags[{j}]", f"flag {flag!r} is not in {FLAGS_FILE}; add its history"
                )


def load_fix_recipes(rules_dir: Path, engine: EngineFacts | None = None) -> FixPack:
    """Load `rules_dir/fixes/*.yaml`: the flag history, then every recipe file, checked.

    `engine` is the catalog's engine facts when already loaded, else read from `catalog/engines.yaml`.
    """
    if engine is None:
        engine = load_yaml_file(rules_dir / "catalog" / ENGINE_FILE, EngineFacts, root=rules_dir)
    folder = rules_dir / "fixes"
    root = rules_dir
    flags_path = folder / FLAGS_FILE
    flags_file = _shown(flags_path, root)
    history = decode_yaml(_read(flags_path, flags_file), FlagHistory, file=flags_file)
    flags: dict[str, FlagSpec] = {}
    aliases: dict[str, str] = {}
    for spec in history.flags:
        if spec.name in flags:
            raise PackError(flags_file, f"flag {spec.name} is listed twice", rule_id=spec.name)
        flags[spec.name] = spec
        aliases.update(dict.fromkeys(spec.aliases, spec.name))
    for spec in history.flags:
        if spec.alias_of is not None:
            if spec.alias_of not in flags:
                raise PackError(
                    flags_file, f"alias_of names an unlisted flag {spec.alias_of}", rule_id=spec.name
                )
            aliases[spec.name] = spec.alias_of
    recipes: list[FixRecipe] = []
    origins: dict[str, RecipeOrigin] = {}
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name == FLAGS_FILE:
            continue
        file = _shown(path, root)
        text = _read(path, file)
        pack = decode_yaml(text, _RecipeFile, file=file)
        _check_recipes(file, text, pack, flags)
        for index, recipe in enumerate(pack.recipes):
            if recipe.id in seen:
                raise _field_error(file, text, index, "id", f"recipe id is already used in {seen[recipe.id]}")
            seen[recipe.id] = file
            where = f"$.recipes[{index}].calculator"
            origins[recipe.id] = RecipeOrigin(file=file, path=where, text=text)
            if recipe.status != "retired":
                recipes.append(recipe)
    if not recipes:
        raise PackError(_shown(folder, root), "holds no fix recipes")
    return FixPack(
        recipes=tuple(recipes),
        flags=flags,
        engine=engine,
        calculator_origins=origins,
        aliases=aliases,
        options=_load_options(folder / OPTIONS_FILE, root),
    )


class _OptionTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    source: str
    releases: list[str]
    options: list[tuple[str, list[list[str]]]]


def _load_options(path: Path, root: Path) -> dict[str, list[list[str]]]:
    """`options.json` as option -> its releases ([first, last] runs); none when absent (a rules
    folder without generated data still reads commands, abbreviations as written)."""
    if not path.is_file():
        return {}
    shown = _shown(path, root)
    try:
        table = msgspec.json.decode(_read(path, shown).encode(), type=_OptionTable)
    except msgspec.DecodeError as exc:
        raise PackError(shown, f"is not a valid option table ({exc})") from exc
    return dict(table.options)


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root.parent)) if path.is_relative_to(root.parent) else str(path)


def _read(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackError(shown, f"cannot be read ({exc})") from exc
