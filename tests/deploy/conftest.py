"""Fixtures that read the deployment files as the tools would: Dockerfiles, compose, kustomize.

No Docker engine runs on these machines, so the Dockerfiles and the compose file are parsed, not
built. The Kubernetes manifests are rendered by a small Python implementation of the kustomize
features `docker/k8s/kustomization.yaml` uses (resources, namespace, labels, images); where `kubectl`
is installed a test checks that this rendering equals `kubectl kustomize docker/k8s`.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
PARTS = ("service", "bot", "agent")

# Kinds kustomize leaves without a namespace (the ones these manifests could plausibly use).
CLUSTER_SCOPED_KINDS = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "RuntimeClass", "PriorityClass", "PersistentVolume"}
)
WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet"})

_SETTING_RE = re.compile(r"(?:VRAMDOC|SLACK)_[A-Z0-9_]+")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str
    line: int

    @property
    def exec_form(self) -> list[str] | None:
        """The JSON-array (exec) form of CMD/ENTRYPOINT/RUN, or None for the shell form."""
        if not self.value.startswith("["):
            return None
        parsed = json.loads(self.value)
        assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), self.value
        return parsed


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        """ENV key=value pairs of this stage, later ones winning (values unexpanded)."""
        result: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for token in shlex.split(instruction.value):
                key, sep, value = token.partition("=")
                assert sep, f"ENV on line {instruction.line} is not in key=value form"
                result[key] = value
        return result


@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str]
    stages: list[Stage]

    @property
    def runtime(self) -> Stage:
        return self.stages[-1]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations, drop comments and blank lines; keep each line's first number."""
    result: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        result.append((start, " ".join(part for part in pending if part)))
        pending = []
    assert not pending, "the Dockerfile ends inside a line continuation"
    return result


def parse_dockerfile(path: Path) -> Dockerfile:
    """Parse a Dockerfile into global ARGs and stages, resolving `${ARG}` in FROM lines."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in _logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, value = text.partition(" ")
        instruction = Instruction(keyword.upper(), value.strip(), line)
        if instruction.keyword == "FROM":
            words = instruction.value.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            assert instruction.keyword == "ARG", f"{path.name}:{line}: only ARG may precede FROM"
            key, _, default = instruction.value.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append(instruction)
    return Dockerfile(path=path, args=args, stages=stages)


def parse_healthcheck(instruction: Instruction) -> tuple[dict[str, str], list[str]]:
    """Split `HEALTHCHECK --opt=v ... CMD [...]` into its options and the exec-form command."""
    options: dict[str, str] = {}
    rest = instruction.value
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        key, _, value = option[2:].partition("=")
        options[key] = value
        rest = rest.strip()
    keyword, _, command = rest.partition(" ")
    assert keyword == "CMD", f"HEALTHCHECK on line {instruction.line} must run CMD"
    parsed = json.loads(command)
    assert isinstance(parsed, list), "HEALTHCHECK CMD must use the exec (JSON) form"
    return options, [str(x) for x in parsed]


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore pattern syntax (Go filepath.Match plus `**`) as a regex."""
    pattern = pattern.strip("/")
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Whether Docker leaves `path` (relative to the context) out of the build context."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _dockerignore_regex(pattern[1:] if negate else pattern)
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def _load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    assert all(isinstance(doc, dict) for doc in docs), f"{path} holds a document that is not a mapping"
    return docs


def _split_image(image: str) -> tuple[str, str | None]:
    """`name[:tag]` → (name, tag); a registry port (`host:5000/x`) is not a tag."""
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, None
    return name, tag


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj.get("kind") in WORKLOAD_KINDS:
        spec: dict[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    return None


def render_kustomization(directory: Path) -> list[dict[str, Any]]:
    """Render `directory/kustomization.yaml` with the subset of kustomize it is written in."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    supported = {"apiVersion", "kind", "namespace", "labels", "resources", "images"}
    unsupported = set(kustomization) - supported
    assert not unsupported, f"teach render_kustomization these fields first: {sorted(unsupported)}"
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        objects.extend(_load_yaml_documents(directory / resource))
    namespace = kustomization.get("namespace")
    images = {entry["name"]: entry for entry in kustomization.get("images", [])}
    for obj in objects:
        metadata = obj.setdefault("metadata", {})
        if namespace and obj["kind"] not in CLUSTER_SCOPED_KINDS:
            metadata["namespace"] = namespace
        for entry in kustomization.get("labels", []):
            assert not entry.get("includeSelectors"), "selector labels are not rendered here"
            metadata.setdefault("labels", {}).update(entry["pairs"])
            if entry.get("includeTemplates") and obj["kind"] in WORKLOAD_KINDS:
                template_meta = obj["spec"]["template"].setdefault("metadata", {})
                template_meta.setdefault("labels", {}).update(entry["pairs"])
        pod = _pod_spec(obj)
        for container in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
            name, tag = _split_image(container["image"])
            if name in images:
                entry = images[name]
                new_tag = entry.get("newTag", tag)
                container["image"] = entry.get("newName", name) + (f":{new_tag}" if new_tag else "")
    return objects


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def dockerfiles() -> dict[str, Dockerfile]:
    """Each part's Dockerfile, parsed."""
    return {part: parse_dockerfile(DOCKER_DIR / f"{part}.Dockerfile") for part in PARTS}


@pytest.fixture(scope="session")
def dockerignore() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER_DIR / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="session")
def manifests() -> list[dict[str, Any]]:
    """docker/k8s rendered as `kubectl kustomize docker/k8s` would."""
    return render_kustomization(DOCKER_DIR / "k8s")


@pytest.fixture(scope="session")
def pyproject() -> dict[str, Any]:
    with (REPO_ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


@pytest.fixture(scope="session")
def env_example() -> dict[str, str]:
    """The variables docker/.env.example documents, with their example values."""
    result: dict[str, str] = {}
    for raw in (DOCKER_DIR / ".env.example").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            # A commented-out assignment documents an optional variable.
            line = line.lstrip("#").strip()
            if not re.match(r"^[A-Z][A-Z0-9_]*=", line):
                continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f".env.example line is not KEY=value: {raw!r}"
        result[key] = value
    return result


@pytest.fixture(scope="session")
def code_settings() -> set[str]:
    """Every VRAMDOC_* and SLACK_* environment variable the shipped code (service/, bot/) reads.

    A setting is a string literal that is exactly such a name (`env.get("VRAMDOC_REDIS_URL")`);
    identifiers like `SLACK_TEXT_LIMIT` and names quoted inside messages are not settings.
    """
    names: set[str] = set()
    for package in ("service", "bot"):
        for path in (REPO_ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
                if is_text and _SETTING_RE.fullmatch(node.value):
                    names.add(node.value)
    return names
