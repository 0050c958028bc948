"""Each image installs exactly the third-party packages its part imports, nothing it lacks.

The images install `docker/requirements/<part>.txt` and then the project with `--no-deps`, so a
package missing from that list is an ImportError in production only. Two checks close the gap:
the project modules a part can reach (from its CLI handlers, lazy imports included) are read with
`ast`, and then imported for real in a fresh interpreter that refuses every distribution outside the
part's requirements and their own dependencies (which catches imports made inside those packages).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.requirements import Requirement

from service.cli import _HANDLERS

from .conftest import PARTS, REPO_ROOT

PROJECT_PACKAGES = ("service", "bot")
_MODULE_REFERENCE_RE = re.compile(r"(?:service|bot)(?:\.\w+)+(?::\w+)?")

# Which CLI subcommands each image runs: the service image also serves the offline commands.
# Packages a part needs that no import in our code names and that the packages we import do not
# declare either; each is proven needed by test_undeclared_runtime_needs_are_really_needed.
UNDECLARED_RUNTIME_NEEDS = {
    "bot": {
        "aiohttp": "slack-bolt's AsyncSocketModeHandler runs on slack-sdk's aiohttp client",
        "pyyaml": "msgspec.yaml, which reads the hosts file, imports PyYAML only when it decodes",
    },
}

PART_SUBCOMMANDS = {
    "service": ("serve", "diagnose", "estimate", "rules"),
    "bot": ("bot",),
    "agent": ("agent", "snapshot"),
}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _module_path(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _is_optional_import_block(node: ast.AST) -> bool:
    """`try: import x / except ImportError:` marks x as optional."""
    if not isinstance(node, ast.Try):
        return False
    names = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
    return bool(names & {"ImportError", "ModuleNotFoundError", "(ImportError, ModuleNotFoundError)"})


def _imports(path: Path, module: str) -> Iterator[tuple[str, bool]]:
    """(absolute name, optional) for everything `module` imports, anywhere in the file.

    An import under `try: … except ImportError` is optional: the code copes without it.
    Imports only for type checkers are skipped.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, optional: bool) -> Iterator[tuple[str, bool]]:
        if _is_type_checking_block(node):
            return
        optional = optional or _is_optional_import_block(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, optional
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target, optional
            for alias in node.names:
                yield f"{target}.{alias.name}", optional
        elif (
            module != "service.cli"
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _MODULE_REFERENCE_RE.fullmatch(node.value)
        ):
            # "service.api.app:create_app_from_env" handed to uvicorn is an import too (the CLI's
            # own handler table is not: each part's handlers are chosen in PART_SUBCOMMANDS).
            yield node.value.partition(":")[0], optional
        for child in ast.iter_child_nodes(node):
            yield from visit(child, optional)

    yield from visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)


class Reach(NamedTuple):
    modules: set[str]  # project modules
    required: set[str]  # third-party top-level names imported unconditionally
    optional: set[str]  # third-party top-level names imported under `except ImportError`


@cache
def reachable(part: str) -> Reach:
    """What the part's CLI handlers can reach, lazy imports included."""
    roots = ["service.cli"] + [_HANDLERS[sub].split(":")[0] for sub in PART_SUBCOMMANDS[part]]
    reach = Reach(set(), set(), set())
    queue = list(roots)
    while queue:
        module = queue.pop()
        if module in reach.modules:
            continue
        path = _module_path(module)
        if path is None:
            continue
        reach.modules.add(module)
        queue.extend(".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1))
        for name, optional in _imports(path, module):
            top = name.split(".")[0]
            if top in PROJECT_PACKAGES:
                queue.append(name)
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                (reach.optional if optional else reach.required).add(top)
    reach.optional.difference_update(reach.required)
    missing = sorted({root for root in roots if root not in reach.modules})
    assert not missing, f"the {part} image runs handlers whose modules do not exist: {missing}"
    return reach


@cache
def _dependencies(distribution: str, extras: frozenset[str]) -> frozenset[str]:
    """`distribution` and everything it requires at run time (with `extras`), by installed metadata."""
    result = {distribution}
    for text in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})
        ):
            continue
        name = _normalize(requirement.name)
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a dependency for another platform or Python version
        result |= _dependencies(name, frozenset(requirement.extras))
    return frozenset(result)


def requirements(part: str) -> list[Requirement]:
    text = (REPO_ROOT / "docker" / "requirements" / f"{part}.txt").read_text(encoding="utf-8")
    return [Requirement(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


@cache
def installed_closure(part: str) -> frozenset[str]:
    """Every distribution the part's image ends up with: its requirements and their dependencies."""
    closure: set[str] = set()
    for requirement in requirements(part):
        closure |= _dependencies(_normalize(requirement.name), frozenset(requirement.extras))
    return frozenset(closure)


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _distributions_of(top_level: str) -> set[str]:
    mapping = _packages_distributions()
    assert top_level in mapping, f"{top_level} is imported but no installed distribution provides it"
    return {_normalize(d) for d in mapping[top_level]}


@pytest.mark.parametrize("part", PARTS)
def test_image_installs_every_package_the_part_imports(part: str) -> None:
    closure = installed_closure(part)
    for top in sorted(reachable(part).required):
        assert _distributions_of(top) & closure, f"the {part} image lacks {top}: add it to {part}.txt"


@pytest.mark.parametrize("part", PARTS)
def test_image_installs_nothing_the_part_does_not_use(part: str) -> None:
    reach = reachable(part)
    used = {d for top in reach.required | reach.optional for d in _distributions_of(top)}
    used |= set(UNDECLARED_RUNTIME_NEEDS.get(part, {}))
    for requirement in requirements(part):
        name = _normalize(requirement.name)
        assert name in used, f"the {part} image installs {name}, which the {part} never imports"


@pytest.mark.parametrize(
    ("part", "distribution"),
    [(part, dist) for part, needs in UNDECLARED_RUNTIME_NEEDS.items() for dist in needs],
)
def test_undeclared_runtime_needs_are_really_needed(part: str, distribution: str) -> None:
    result = _guarded_import(part, installed_closure(part) - {distribution})
    assert result.returncode != 0, f"the {part} imports cleanly without {distribution}: drop it"
    assert "is not installed in this image" in result.stderr


_GUARDED_IMPORT = """
import importlib, importlib.abc, importlib.metadata, json, re, sys
allowed = set(json.loads(sys.argv[1]))
modules = json.loads(sys.argv[2])
owners = importlib.metadata.packages_distributions()
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        dists = {norm(d) for d in owners.get(top, [])}
        if dists and not dists & allowed and top not in ("service", "bot"):
            raise ModuleNotFoundError(f"{name} (from {sorted(dists)}) is not installed in this image")
        return None
sys.meta_path.insert(0, Refuse())
for module in modules:
    importlib.import_module(module)
"""


def _guarded_import(part: str, allowed: frozenset[str]) -> subprocess.CompletedProcess[str]:
    """Import every project module the part reaches, in a fresh interpreter, with only `allowed`."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            _GUARDED_IMPORT,
            json.dumps(sorted(allowed)),
            json.dumps(sorted(reachable(part).modules)),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("part", PARTS)
def test_part_imports_cleanly_with_only_its_images_packages(part: str) -> None:
    result = _guarded_import(part, installed_closure(part))
    assert result.returncode == 0, result.stderr[-2000:]
