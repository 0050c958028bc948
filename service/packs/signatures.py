"""Signature rules: what a vLLM or PyTorch log line looks like, and which facts it states.

A pack file is YAML decoded into `SignaturePackFile`; every regex is compiled with RE2 when the file
is validated, so a pattern that could backtrack catastrophically (or that RE2 cannot run) is a load
error naming the file, the rule id, the `$.path` and the line. A file validated once is remembered in
the pack cache; its full patterns are then compiled only when a scan first needs them. Each named
group of a pattern becomes one typed fact (DESIGN §3.2) with its unit normalized to GiB.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints, overload

import msgspec
import re2

from service.errors import PackError
from service.first_use import first_use_re
from service.packs.compiled import re2_build
from service.packs.loader import cached_decode, locate, parse_yaml
from service.schemas import Facts, OtherProcess, Phase, Severity
from service.versions import VersionRange

__all__ = [
    "FACT_TYPES",
    "CompiledRule",
    "Example",
    "Examples",
    "FactSpec",
    "Regexes",
    "RuleKind",
    "SignaturePackFile",
    "SignatureRule",
    "Stage",
    "VersionRange",
    "compile_pack",
    "convert_fact",
    "string_fact",
]

RuleKind = Literal["failure", "oom", "wrapper", "exception", "stage", "frame", "info", "version"]
Stage = Literal["config", "init", "device", "loading", "profiling", "kv_cache", "warmup", "serving"]
Unit = Literal["GiB", "GB", "MiB", "KiB", "bytes", "auto", "tokens", "count", "ratio", "percent"]
Status = Literal["stable", "experimental", "deprecated", "retired"]

# `body` holds key=value pairs read through `keys`; `command` holds a pasted launch command.
RESERVED_GROUPS = frozenset({"body", "command"})
_UNIT_BYTES = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "GB": 2**30}
_RULE_ID = first_use_re(r"[a-z0-9]+(-[a-z0-9]+)+")  # `vllm-kv-estimated-max-len`
_SIZE = first_use_re(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*(bytes|KiB|MiB|GiB|GB|TiB|B)?\s*$")


def _fact_types() -> dict[str, str]:
    """Map each Facts field to the scalar type a value must convert to."""
    out: dict[str, str] = {}
    for name, hint in get_type_hints(Facts).items():
        args = [a for a in get_args(hint) if a is not type(None)]
        base = args[0] if args else hint
        if getattr(base, "__origin__", None) is Literal:
            base = type(get_args(base)[0])
        out[name] = "list" if getattr(base, "__origin__", None) is list else base.__name__
    return out


FACT_TYPES: dict[str, str] = _fact_types()


class Spec(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of pack types: strict decoding, immutable values."""


class FactSpec(Spec, frozen=True, kw_only=True):
    """One named group -> one fact; `field` picks pid/used_gib for `other_processes`.

    `also` names facts the same printed number states too, where vLLM's source prints that
    setting (`maximum context length is {max_model_len}`: `context_limit` and `max_model_len`).
    """

    fact: str
    unit: Unit | None = None
    field: Literal["pid", "used_gib"] | None = None
    also: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.fact not in FACT_TYPES:
            raise ValueError(f"unknown fact {self.fact!r} (DESIGN §3.2 names the facts)")
        kind = FACT_TYPES[self.fact]
        if kind == "list" and self.field is None:
            raise ValueError(f"fact {self.fact!r} needs field: pid or used_gib")
        if kind != "list" and self.field is not None:
            raise ValueError(f"fact {self.fact!r} takes no field")
        if kind == "float" and self.fact.endswith("_gib") and self.unit is None:
            raise ValueError(f"memory fact {self.fact!r} needs a unit (GiB, GB, MiB, KiB, bytes, auto)")
        for other in self.also:
            if FACT_TYPES.get(other) != kind:
                raise ValueError(f"also: {other!r} is not a fact of the same type as {self.fact!r}")


class Example(Spec, frozen=True, kw_only=True):
    line: str
    facts: dict[str, Any] = msgspec.field(default_factory=dict)


class Examples(Spec, frozen=True, kw_only=True):
    match: list[Example]
    no_match: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.match:
            raise ValueError("each rule needs at least one line it must match")


class SignatureRule(Spec, frozen=True, kw_only=True):
    """A log signature (DESIGN §4); `kind` says how interpretation uses a match."""

    id: str
    title: str
    kind: RuleKind
    phase: Phase | None = None
    severity: Severity = "info"
    stage: Stage | None = None
    status: Status = "stable"
    versions: VersionRange = msgspec.field(default_factory=VersionRange)
    patterns: list[str]
    target: Literal["message", "line"] = "message"
    anywhere: bool = False
    exclude: list[str] = msgspec.field(default_factory=list)
    facts: dict[str, FactSpec] = msgspec.field(default_factory=dict)
    keys: dict[str, str] = msgspec.field(default_factory=dict)
    examples: Examples
    todo: list[str] = msgspec.field(default_factory=list)
    # a stage line printed as its stage ends (profiling's result, `Available KV cache memory: …`):
    # a process that dies after it without a word was in the next stage of start-up
    finishes: bool = False
    # rules whose match on an earlier line of the excerpt takes this one's back: a sign that another
    # sender did what this rule's line alone would blame (vLLM's own SIGKILL of its process tree
    # prints the `Killed` the OOM killer's does)
    not_after: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.finishes and (self.stage is None or self.anywhere):
            raise ValueError("only a rule of one stage, found where it is printed, finishes it")
        if not _RULE_ID.fullmatch(self.id):
            raise ValueError(f"rule id {self.id!r} must be lowercase words joined by '-'")
        if not self.patterns:
            raise ValueError("a rule needs at least one pattern")
        if self.kind in ("failure", "oom") and self.phase is None:
            raise ValueError(f"a {self.kind} rule needs a phase")
        if self.kind in ("stage", "frame") and self.stage is None:
            raise ValueError(f"a {self.kind} rule needs a stage")
        for name in self.keys.values():
            if name not in FACT_TYPES:
                raise ValueError(f"keys maps to unknown fact {name!r}")
        if self.keys and "body" not in self.facts and not any("(?P<body>" in p for p in self.patterns):
            raise ValueError("a rule with keys needs a (?P<body>...) group holding key=value pairs")


class SignaturePackFile(Spec, frozen=True, kw_only=True):
    pack: str
    description: str
    rules: list[SignatureRule]


class CompiledRule(msgspec.Struct, frozen=True):
    """A rule with its RE2 patterns compiled; `prefilter` is the anchor-free form for whole-text scans."""

    rule: SignatureRule
    pack: str
    file: str
    regexes: Sequence[Any]  # RE2, compiled on first use (`Regexes`)
    prefilter: tuple[str, ...] = ()
    set_forms: tuple[str, ...] = ()
    excludes: Sequence[Any] = ()
    plain: tuple[bool, ...] = ()


# RE2 caches DFA states per compiled pattern within `max_mem` (8 MiB by default). The OR of every
# eager pattern and their RE2 set outgrow that on a log dense with matches: the DFA cache is then
# reset on every search and RE2 falls back to its NFA, 25x slower (a dense 2 MB log: 800 ms instead
# of 30 ms). The combined indexes get a larger budget; it is an upper bound, used only as states are
# built. 64 MiB ran out on the 2 MB dense corpus log once round 18 grew the corpus (the line finder's
# DFA reset past 1.95 MB of it: 2.2 s instead of 0.9 s), while 256 MiB cost 7 MiB more peak RSS there.
COMBINED_MAX_MEM = 256 << 20


def _options(max_mem: int | None = None, *, never_nl: bool = False) -> Any:
    options = re2.Options()
    options.log_errors = False
    if max_mem is not None:
        options.max_mem = max_mem
    options.never_nl = never_nl
    return options


OPTIONS = _options()
COMBINED_OPTIONS = _options(COMBINED_MAX_MEM)
# The OR-ed prefilter only finds lines: a line is a candidate when a pattern matches inside it. RE2's
# never_nl takes the newline out of every class (`\s`, `[^)]`), so a match stops at its line's end
# instead of running on through the text (each match then costs its line, not the rest of the paste);
# a match inside one line is the same match either way.
LINE_OPTIONS = _options(COMBINED_MAX_MEM, never_nl=True)


def set_form(pattern: str) -> str:
    """Drop a leading `^` and turn named groups into plain groups so many patterns can be OR-ed."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    return re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", body)


def prefilter_form(pattern: str) -> str:
    """The pattern cut before its first group: a looser, group-free form that keeps the whole-text
    DFA small. It matches every line the pattern matches; too short a cut keeps the full form."""
    body = set_form(pattern)
    for index, char in syntax_chars(body):
        if char == "(":
            cut = body[:index]
            return cut if len(cut) >= 12 and not cut.endswith("|") else body
    return body


def syntax_chars(pattern: str) -> Iterator[tuple[int, str]]:
    """The characters of `pattern` that are its syntax, with their offsets: neither escaped nor
    inside a character class (where `(` and `{` are literals)."""
    escaped = in_class = False
    for index, char in enumerate(pattern):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]" or pattern[index - 1] == "["
        elif char == "[":
            in_class = True
        else:
            yield index, char


# A bounded repeat `x{m,n}` is compiled as n copies of `x`: the few wide ones (`[^)]{0,120}`,
# `.{0,300}`) were four fifths of what compiling the eager RE2 set cost. The set takes them as
# `x{m,}`, which matches wherever `x{m,n}` does, and a line the loosened form matches is checked
# against the exact one (`CheckedSet`), so the set answers what the exact set would.
WIDE_REPEAT = 16  # n - m above which a repeat is loosened
# A line finder with loosened forms checks every line it finds (`CheckedLineFinder`), not only the
# lines a loosened form matches, so it loosens only the repeats that cost much to compile.
WIDE_LINE_REPEAT = 32
_REPEAT = first_use_re(r"\{(\d+),(\d+)\}")


def unbounded_form(pattern: str, wider_than: int = WIDE_REPEAT) -> str:
    """`pattern` with each bounded repeat wider than `wider_than` made open-ended (`{3,200}` ->
    `{3,}`); a brace inside a class or escaped is a literal and stays."""
    if "\\Q" in pattern:  # quoted text (\Q...\E) is left to RE2's own reading
        return pattern
    if all(int(high) - int(low) <= wider_than for low, high in _REPEAT.findall(pattern)):
        return pattern  # no wide repeat anywhere, literal or not: nothing to loosen (most patterns)
    pieces: list[str] = []
    done = 0
    for index, char in syntax_chars(pattern):
        if char == "{" and (repeat := _REPEAT.match(pattern, index)) is not None:
            low, high = int(repeat.group(1)), int(repeat.group(2))
            if high - low > wider_than:
                pieces.append(pattern[done:index] + f"{{{low},}}")
                done = repeat.end()
    return "".join(pieces) + pattern[done:]


def _is_plain(pattern: str) -> bool:
    """A pattern with no groups to read and no anchors: its prefilter hit on the raw line suffices."""
    return "(?P<" not in pattern and not pattern.startswith("^") and not pattern.endswith("$")


def _compile(pattern: str, file: str, path: str, text: str, rule_id: str) -> Any:
    try:
        return re2.compile(pattern, OPTIONS)
    except re2.error as exc:
        line = locate(text, path)[0] if text else None
        raise PackError(
            file, f"RE2 cannot compile the pattern ({_reason(exc)})", path=path, line=line, rule_id=rule_id
        ) from exc


def _reason(exc: Exception) -> str:
    return exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)


class Regexes(Sequence[Any]):
    """A rule's patterns (or excludes), each compiled by RE2 the first time it is asked for.

    Compiling every full pattern cost a CLI run about 40 ms, while a paste reaches a few dozen of
    them; the prefilter and the RE2 set, which every scan runs, stay compiled at load. Every pattern
    was compiled once when its pack was validated (`_validated`, remembered in the pack cache), so a
    pattern RE2 rejects is a load error, never a request's."""

    __slots__ = ("_compiled", "_field", "_file", "_patterns", "_rule_id")

    def __init__(self, patterns: Sequence[str], *, file: str, rule_id: str, field: str) -> None:
        self._patterns = tuple(patterns)
        self._compiled: list[Any] = [None] * len(self._patterns)
        self._file, self._rule_id, self._field = file, rule_id, field

    def __len__(self) -> int:
        return len(self._patterns)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        regex = self._compiled[index]
        if regex is None:
            # a list slot written once with the same value: a racing thread compiles it twice at worst
            regex = self._compiled[index] = _compile(
                self._patterns[index], self._file, f"{self._field}[{index % len(self)}]", "", self._rule_id
            )
        return regex

    def __iter__(self) -> Iterator[Any]:
        return (self[index] for index in range(len(self._patterns)))

    def __repr__(self) -> str:
        return f"Regexes({list(self._patterns)!r})"


def _validated(text: str, file: str) -> SignaturePackFile:
    """Decode one pack file and check what the Structs cannot: unique rule ids, and every pattern
    and exclude compiled by RE2 with no named group that lacks a fact."""
    pack = parse_yaml(text, SignaturePackFile, file=file)
    seen: set[str] = set()
    for r_index, rule in enumerate(pack.rules):
        if rule.id in seen:
            path = f"$.rules[{r_index}].id"
            raise PackError(file, f"duplicate rule id {rule.id!r}", path=path, line=locate(text, path)[0])
        seen.add(rule.id)
        for x_index, pattern in enumerate(rule.exclude):
            _compile(pattern, file, f"$.rules[{r_index}].exclude[{x_index}]", text, rule.id)
        for p_index, pattern in enumerate(rule.patterns):
            path = f"$.rules[{r_index}].patterns[{p_index}]"
            groups = set(_compile(pattern, file, path, text, rule.id).groupindex)
            unknown = sorted(groups - set(rule.facts) - RESERVED_GROUPS)
            if unknown:
                raise PackError(
                    file,
                    f"named group(s) {', '.join(unknown)} have no entry under facts",
                    path=path,
                    line=locate(text, path)[0],
                    rule_id=rule.id,
                )
    return pack


def compile_pack(text: str, file: str) -> list[CompiledRule]:
    """Decode one pack file, validated (see `_validated`) or read from the pack cache where these
    bytes were validated before; any problem is a PackError that locates it. Full patterns are
    compiled on first use (`Regexes`)."""
    pack = cached_decode(
        text.encode("utf-8"), SignaturePackFile, lambda: _validated(text, file), salt=re2_build()
    )
    compiled: list[CompiledRule] = []
    for r_index, rule in enumerate(pack.rules):
        where = f"$.rules[{r_index}]"
        compiled.append(
            CompiledRule(
                rule=rule,
                pack=pack.pack,
                file=file,
                regexes=Regexes(rule.patterns, file=file, rule_id=rule.id, field=f"{where}.patterns"),
                prefilter=tuple(prefilter_form(p) for p in rule.patterns),
                set_forms=tuple(set_form(p) for p in rule.patterns),
                excludes=(
                    Regexes(rule.exclude, file=file, rule_id=rule.id, field=f"{where}.exclude")
                    if rule.exclude
                    else ()
                ),
                plain=tuple(_is_plain(p) and not rule.exclude for p in rule.patterns),
            )
        )
    return compiled


def _size_gib(raw: str, unit: str | None) -> float | None:
    match = _SIZE.match(raw)
    if not match:
        return None
    number = float(match.group(1).replace(",", ""))
    written = match.group(2)
    if unit in (None, "auto"):
        if written is None:
            return None
        scale = {"B": 1, "TiB": 2**40}.get(written) or _UNIT_BYTES[written]
    else:
        scale = _UNIT_BYTES[unit]
    return number * scale / 2**30


def convert_fact(spec_fact: str, unit: str | None, raw: str) -> object | None:
    """Turn one captured string into the fact's type and unit; None when it cannot be read."""
    text = raw.strip().strip("'\"")
    kind = FACT_TYPES[spec_fact]
    try:
        if kind == "float" and spec_fact.endswith("_gib"):
            return _size_gib(text, unit)
        if kind == "float":
            value = float(text.rstrip("x%").replace(",", ""))
            return value / 100 if unit == "percent" else value
        if kind == "int":
            return int(float(text.replace(",", "")))
        if kind == "bool":
            return {"true": True, "false": False}.get(text.lower())
        if kind == "str":
            return string_fact(spec_fact, text)
    except ValueError:
        return None
    return None


# A Hugging Face id is ASCII, `org/name`: a sentence in another script typed right after it, with no
# space between (Chinese and Japanese prose has none), is not part of the id.
_HUB_ID = first_use_re(r"[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*")
_DTYPES = {"half": "float16", "fp16": "float16", "float": "float32", "bf16": "bfloat16", "fp32": "float32"}


def string_fact(name: str, text: str) -> str | None:
    """Strings as DESIGN §3.2 spells them: dtype 'bfloat16' (not torch.bfloat16/half), capability '8.6'."""
    if text in ("", "None", "null"):
        return None
    if name == "dtype":
        text = text.removeprefix("torch.")
        return None if text == "auto" else _DTYPES.get(text, text)
    if name == "model" and not text.isascii() and (hub_id := _HUB_ID.match(text)):
        return hub_id.group() if not text[hub_id.end()].isascii() else text
    if name == "compute_capability" and text.isdigit() and len(text) in (2, 3):
        return f"{text[:-1]}.{text[-1]}"
    return text


def other_process(pid: str, used: str, unit: str | None) -> OtherProcess | None:
    """One `Process {pid} has {M} memory in use` sentence as a typed record."""
    used_gib = _size_gib(used, unit)
    if used_gib is None or not pid.isdigit():
        return None
    return OtherProcess(pid=int(pid), used_gib=used_gib)


def pack_files(root: Path, suffixes: tuple[str, ...] = (".yaml", ".yml")) -> list[Path]:
    """Files under `root` with these suffixes, sorted by relative path (the digest and load order)."""
    found = (p for p in root.rglob("*") if p.suffix in suffixes and p.is_file())
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())
