"""The message-template inventory (`rules/inventory/*.yaml`): every wording vLLM and PyTorch print
about GPU memory and start-up, and the signature rule that matches each one.

`tools/vllm_templates.py` writes `vllm.yaml` from vLLM's released sources; `torch.yaml` is written by
hand for messages that are not in vLLM's wheels (PyTorch's allocator, ROCm, Ascend, XPU, TPU), each
naming its source file and release range. The inventory is read by the tests and the generator only,
not by `load_packs()`: diagnosing never needs it (the rules it points at are the runtime home of each
wording), and loading thousands of templates per CLI run would slow every `vramdoc diagnose`.

A template's holes are written `{}` (literal braces doubled); `holes` gives each hole's shape, so a
test can render the template with values of that shape and run the rules over the result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import msgspec

from service.errors import PackError
from service.packs.signatures import CompiledRule, Spec

__all__ = [
    "HOLE",
    "Decision",
    "HoleShape",
    "InventoryFile",
    "Template",
    "dump_inventory",
    "load_inventories",
    "pieces",
    "read_inventory",
    "render",
    "rules_matching",
    "template_regex",
    "version_key",
]

HOLE = "{}"
HoleShape = Literal["int", "float", "size", "text"]
# how a template is printed: raised, asserted, logged at a level, or built without a raise of its own
# (`construct` an exception stored, returned or handed on; `response` an HTTP error body; `exit` a
# message the interpreter prints as it exits), or PyTorch's (`torch`)
Level = Literal[
    "raise",
    "assert",
    "construct",
    "response",
    "exit",
    "debug",
    "info",
    "warning",
    "warn",
    "error",
    "exception",
    "critical",
    "fatal",
    "torch",
]
# the levels printed with their exception's (or a warning's category's) name before the message
_HEADED = ("raise", "assert", "construct", "warning")
# Values a placeholder is rendered with. A hole of unknown shape is printed as a number too: that
# satisfies a rule's `\d+` as well as its `\S+` or `\w+`, and most unnamed holes are numbers.
PLACEHOLDER: dict[str, str] = {"int": "2048", "float": "12.34", "size": "12.34 GiB", "text": "2048"}
# Rules that say nothing about a wording itself: a generic exception line, traceback frames, and what
# a person writes around a paste.
_NOT_A_WORDING_RULE = ("exception", "frame")


class Decision(Spec, frozen=True, kw_only=True):
    """What a template is to the classifier: matched by `rules`, a known `gap`, or `irrelevant`.

    None of them set means nobody decided yet; the inventory test fails on it."""

    rules: list[str] = msgspec.field(default_factory=list)
    gap: str | None = None
    irrelevant: str | None = None

    def __post_init__(self) -> None:
        if sum(bool(x) for x in (self.rules, self.gap, self.irrelevant)) > 1:
            raise ValueError("a template is matched by rules, a known gap, or irrelevant: one of them")

    def is_open(self) -> bool:
        return not (self.rules or self.gap or self.irrelevant)


class Template(Spec, frozen=True, kw_only=True):
    """One message template, where it is printed and in which releases ([first, last] runs)."""

    text: str
    holes: list[HoleShape] = msgspec.field(default_factory=list)
    level: Level
    exception: str | None = None
    file: str
    function: str
    versions: list[list[str]]
    subjects: list[str] = msgspec.field(default_factory=list)
    decision: Decision = msgspec.field(default_factory=Decision)

    def __post_init__(self) -> None:
        holes = len(_pieces(self.text)) - 1
        if holes != len(self.holes):
            raise ValueError(f"{len(self.holes)} hole shapes for {holes} holes in {self.text!r}")
        for run in self.versions:
            if len(run) != 2:
                raise ValueError("each versions entry is [first, last]")


class InventoryFile(Spec, frozen=True, kw_only=True):
    source: str
    releases: list[str] = msgspec.field(default_factory=list)
    templates: list[Template]
    irrelevant: dict[str, int] = msgspec.field(default_factory=dict)


def _pieces(text: str) -> list[str]:
    """The literal text between holes, doubled braces read left to right as literal ones."""
    pieces, current, i = [], [], 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in ("{{", "}}"):
            current.append(pair[0])
            i += 2
        elif pair == HOLE:
            pieces.append("".join(current))
            current = []
            i += 2
        else:
            current.append(text[i])
            i += 1
    pieces.append("".join(current))
    return pieces


def pieces(text: str) -> list[str]:
    """The literal segments of a template, between its holes."""
    return _pieces(text)


def version_key(version: str) -> tuple[int, ...]:
    """'0.6.6.post1' -> (0, 6, 6, 1): release folders sort by number, not text."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


def render(template: Template | str, holes: list[str] | tuple[str, ...] | None = None) -> str:
    """The template as vLLM would print it, each hole filled with a placeholder of its shape."""
    text = template.text if isinstance(template, Template) else template
    shapes = list(template.holes) if isinstance(template, Template) else list(holes or [])
    out: list[str] = []
    pieces = _pieces(text)
    for index, piece in enumerate(pieces):
        out.append(piece)
        if index < len(pieces) - 1:
            out.append(PLACEHOLDER[shapes[index] if index < len(shapes) else "text"])
    return "".join(out)


def template_regex(template: Template | str) -> re.Pattern[str]:
    """A regex any printing of the template matches: literals exact, holes anything on the line.

    Only the text up to the first line break is used, since a pasted example is one line."""
    text = template.text if isinstance(template, Template) else template
    first = text.split("\n", 1)[0]
    literal = [re.escape(p) for p in _pieces(first)]
    return re.compile(".*?".join(literal).strip())


def _printed(template: Template) -> list[str]:
    """The lines a person would paste: `Error: message` for an exception (raised, asserted or built)
    and a `warnings.warn` (`UserWarning: message`)."""
    body = render(template)
    if template.level in _HEADED and template.exception:
        body = f"{template.exception}: {body}"
    return [line for line in body.splitlines() if line.strip()]


def rules_matching(rules: tuple[CompiledRule, ...], template: Template) -> list[str]:
    """Ids of the wording rules any printed line of the template matches (RE2, as the scanner runs)."""
    found: list[str] = []
    lines = _printed(template)
    for compiled in rules:
        rule = compiled.rule
        if rule.kind in _NOT_A_WORDING_RULE or rule.anywhere or rule.target == "line":
            continue
        for line in lines:
            if any(x.search(line) for x in compiled.excludes):
                continue
            if any(regex.search(line) for regex in compiled.regexes):
                found.append(rule.id)
                break
    return found


def read_inventory(path: Path) -> InventoryFile:
    """msgspec's YAML decoder (libyaml): the generated file is too large for the pure-Python loader
    the hand-written packs use; its errors name the `$.path`, not the line."""
    import msgspec.yaml  # imports PyYAML: only the tests and the generators read an inventory

    try:
        return msgspec.yaml.decode(path.read_bytes(), type=InventoryFile)
    except msgspec.DecodeError as exc:
        raise PackError(path.name, f"is not a valid inventory ({exc})") from exc


def load_inventories(root: Path) -> dict[str, InventoryFile]:
    """Every file under `root/inventory`, by file name."""
    folder = root / "inventory"
    return {p.name: read_inventory(p) for p in sorted(folder.glob("*.yaml"))}


def _dumper() -> type[Any]:
    """PyYAML's dumper with block style for records, flow style for the short lists inside them
    (built on first use: `vramdoc diagnose` imports this module for `pieces`, never to write YAML)."""
    import yaml

    def represent_list(dumper: yaml.SafeDumper, data: list[object]) -> yaml.Node:
        flow = all(isinstance(x, str | int | float) for x in data) or all(isinstance(x, list) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow and len(data) < 40)

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(list, represent_list)
    return Dumper


def dump_inventory(inventory: InventoryFile) -> str:
    """YAML for the inventory, stable across reruns (sorted, defaults left out)."""
    raw = msgspec.to_builtins(inventory)
    for template in raw["templates"]:
        for key in ("holes", "subjects"):
            if not template.get(key):
                template.pop(key, None)
        if template.get("exception") is None:
            template.pop("exception", None)
        decision = {k: v for k, v in template["decision"].items() if v}
        template["decision"] = decision
    header = "# Generated by tools/vllm_templates.py from vLLM's released sources; rerun it, do not edit\n"
    header += "# by hand except a decision's `gap` or `irrelevant` reason (kept across reruns).\n"
    import yaml

    return header + yaml.dump(raw, Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=4096)
