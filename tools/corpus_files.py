"""Where the corpus keeps its logs and which hints a case passes: one home for the tools that walk it.

Failing cases are `tests/corpus/<case>.log` with a `<case>.yaml` sidecar, healthy logs
`tests/healthy/<case>.log`, healthy excerpts with prose `tests/diagnosis/healthy_excerpts/<case>.log`
with an optional sidecar (tests/corpus/README.md). A sidecar's `hints` are what a person would pass as
the request's hints; every hint is a string in the request, whatever YAML made of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

TESTS = Path(__file__).resolve().parent.parent / "tests"
HINTS = ("model", "gpu", "vllm_version", "command")


def failing_folder(tests: Path = TESTS) -> Path:
    return tests / "corpus"


def excerpt_folder(tests: Path = TESTS) -> Path:
    return tests / "diagnosis" / "healthy_excerpts"


def log_folders(tests: Path = TESTS) -> tuple[Path, ...]:
    """Every folder of logs, failing first: the order the tools print and digest them in."""
    return (failing_folder(tests), tests / "healthy", excerpt_folder(tests))


def all_logs(tests: Path = TESTS) -> Iterator[Path]:
    for folder in log_folders(tests):
        yield from sorted(folder.glob("*.log"))


def sidecar(log: Path) -> dict[str, Any]:
    """The case's YAML beside its log, or {} for a log without one."""
    path = log.with_suffix(".yaml")
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def case_hints(data: dict[str, Any]) -> dict[str, str]:
    """The request hints a sidecar gives, as the strings a request carries."""
    given = data.get("hints") or {}
    return {name: str(given[name]) for name in HINTS if given.get(name) is not None}
