"""Decoding YAML rule-pack files into msgspec Structs, with errors that point at the bad field.

msgspec names the `$.path` of a bad value; walking the `yaml.compose()` node tree along that path
gives the line, so an author sees `rules/signatures/kv.yaml:42 rule vllm-kv-... $.rules[3].phase`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from service.errors import PackError

__all__ = ["PackError", "decode_yaml", "load_yaml_file", "yaml_line"]

T = TypeVar("T")

_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[['\"](.+?)['\"]\]")


def _path_parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for key, index, quoted in _PATH_PART.findall(path.removeprefix("$")):
        if index:
            parts.append(int(index))
        else:
            parts.append(key or quoted)
    return parts


def yaml_line(node: yaml.Node | None, path: str) -> tuple[int | None, str | None]:
    """The 1-based line of the node at `path` and the id of the enclosing rule, if any."""
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


def decode_yaml(text: str, type_: type[T], *, file: str) -> T:
    """Decode one YAML document into `type_`, raising PackError that locates any bad field."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw: Any = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PackError(file, f"is not valid YAML ({getattr(exc, 'problem', exc)})", line=line) from exc
    try:
        return msgspec.convert(raw, type_, strict=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        path = None
        match = re.search(r"at `(\$[^`]*)`", message)
        if match:
            path = match.group(1)
            message = message[: match.start()].rstrip(" -")
        line, rule_id = yaml_line(node, path or "$")
        raise PackError(file, message, path=path, line=line, rule_id=rule_id) from exc


def load_yaml_file(path: Path, type_: type[T], *, root: Path | None = None) -> T:
    """Read and decode one pack file; the error names the file relative to `root`."""
    shown = str(path.relative_to(root)) if root is not None and path.is_relative_to(root) else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackError(shown, f"cannot be read ({exc})") from exc
    return decode_yaml(text, type_, file=shown)
