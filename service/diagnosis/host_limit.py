"""A host memory limit the paste states as a setting, read against what vLLM keeps in host RAM.

People paste the limit their run had, not a failure: `docker run -m 16g` (service.launch reads the
command), compose's `mem_limit: 8g` or `deploy.resources.limits.memory`, a Kubernetes container's
`limits: memory: 12Gi`, systemd's `MemoryMax=16G`, SLURM's `--mem=32G`, `ulimit -v` (KiB), or words
("a 6GB container", "my pod has 8Gi"). Each tool's own units are read by `service.quantities`.

What has to fit under it (vLLM's sources): every worker reads the whole checkpoint through host memory
while loading (model_loader/weight_utils.py: safetensors shards memory-mapped or read whole, `.bin`
shards torch.load-ed to the CPU), `--cpu-offload-gb` keeps that many GiB of weights per GPU in host RAM
(models/utils.py, pinned where it can be), and V0's `--swap-space` pins that many GiB per GPU when the
KV cache is allocated (V1, the default from 0.8.0, never swaps). A limit below that sum says memory that
ran out with no side named was the host's; a limit holding it `plenty` times over says the opposite.
The limit stays internal to this reading: DESIGN §3.2 names no fact for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from service.diagnosis.hints import checkpoint_gib
from service.diagnosis.placement import HostRoom
from service.first_use import first_use_re
from service.launch import LaunchCommand, parse_launch
from service.packs.catalog import Catalog
from service.quantities import memory_gib
from service.versions import parse_version

__all__ = ["HostRoom", "host_room", "told_limit_gib"]

_SIZE = r"""["']?(\d+(?:\.\d+)?\s*[kKmMgGtT]?i?[bB]?)["']?"""
# (pattern, Kubernetes' decimal letters, bytes a bare number counts)
_SETTINGS: tuple[tuple[re.Pattern[str], bool, int], ...] = (
    (first_use_re(rf"^\s*mem_limit\s*:\s*{_SIZE}\s*$"), False, 1),  # compose
    (first_use_re(rf"^\s*Memory(?:Max|Limit)\s*=\s*{_SIZE}\s*$"), False, 1),  # systemd
    (first_use_re(rf"(?:^#SBATCH|\b(?:srun|sbatch|salloc)\b).*?\s--mem(?:=|\s+){_SIZE}(?!\S)"), False, 2**20),
    (first_use_re(r"\bulimit\s+(?:-\w*v\w*\s+)(\d+)\b"), False, 2**10),
    # the host's RAM in words: "a box with 64 GB of RAM", "32GB system memory"
    (
        first_use_re(
            rf"\b{_SIZE}\s*(?:of\s+)?(?:system\s+|host\s+|cpu\s+)?(?:ram|system memory|host memory)\b",
            re.IGNORECASE,
        ),
        False,
        1,
    ),
    # a person's words: "a 6GB container", "my pod has 8Gi", "container with 16 GB of RAM"
    (
        first_use_re(
            rf"\b{_SIZE}\s*(?:of\s+)?(?:ram\s+|memory\s+)?(?:containers?|pods?|vms?)\b"
            r"|\b(?:containers?|pods?|vms?)\s+(?:has|have|had|with|of|(?:is\s+)?limited to)\s+"
            rf"(?:only\s+)?{_SIZE}"
            r"(?:\s+(?:of\s+)?(?:ram|memory))?(?![\w.])",
            re.IGNORECASE,
        ),
        False,
        1,
    ),
)
# `memory:` under a `limits:` key (Kubernetes resources, compose's deploy.resources.limits)
_LIMITS_KEY = first_use_re(r"^(\s*)limits\s*:\s*$")
_MEMORY_KEY = first_use_re(rf"^(\s*)memory\s*:\s*{_SIZE}\s*$")
_KEY = first_use_re(r"^(\s*)[\w.\-/]+\s*:")
_DOCKER = first_use_re(r"\b(?:docker|podman)\s+run\b")
_V1_DEFAULT = (0, 8, 0)


def told_limit_gib(lines: Iterable[str]) -> float | None:
    """The smallest host memory limit the lines state (a container's limit binds under a node's)."""
    found: list[float] = []
    lines = list(lines)
    compose = any(line.strip() == "deploy:" for line in lines)
    for number, line in enumerate(lines):
        for pattern, si_letters, bare in _SETTINGS:
            match = pattern.search(line)
            if match is not None:
                told = next(g for g in match.groups() if g is not None)
                size = memory_gib(told, si_letters=si_letters, bare=bare)
                found += [size] if size else []
        if _DOCKER.search(line):
            size = _docker_limit(lines, number)
            found += [size] if size else []
        memory = _MEMORY_KEY.match(line)
        if memory is not None and _under_limits(lines, number, len(memory.group(1))):
            size = memory_gib(memory.group(2), si_letters=not compose)
            found += [size] if size else []
    return min(found) if found else None


def _docker_command(lines: list[str], number: int) -> str:
    """The `docker run …` command starting on line `number`, over its `\\` continuation lines."""
    text = lines[number]
    while text.rstrip().endswith("\\") and number + 1 < len(lines):
        number += 1
        text = text.rstrip()[:-1] + " " + lines[number].strip()
    start = _DOCKER.search(text)
    return text[start.start() :] if start is not None else text


def _docker_limit(lines: list[str], number: int) -> float | None:
    typed = parse_launch(_docker_command(lines, number)).memory_limit
    return memory_gib(typed) if typed else None


def _under_limits(lines: list[str], number: int, indent: int) -> bool:
    """Whether the key on line `number` sits directly under a `limits:` key."""
    for above in range(number - 1, max(-1, number - 8), -1):
        key = _KEY.match(lines[above])
        if key is None or len(key.group(1)) >= indent:
            continue
        return _LIMITS_KEY.match(lines[above]) is not None
    return False


def _flag_gib(commands: Iterable[LaunchCommand], flag: str) -> float:
    for command in commands:
        value = command.value(flag)
        try:
            return float(value) if value is not None else 0.0
        except ValueError:
            continue
    return 0.0


def host_room(
    lines: list[str],
    facts: dict[str, object],
    commands: list[str],
    catalog: Catalog,
    plenty: float,
    swap_removed: str | None,
) -> HostRoom | None:
    """Whether the stated host limit is below what loading, CPU offload and V0's swap space keep in host
    RAM (`short`), holds all of it `plenty` times over, or says neither (None: no limit, no model)."""
    limit = told_limit_gib(lines)
    if limit is None:
        return None
    checkpoint = checkpoint_gib(facts, catalog)
    if checkpoint is None:
        return None
    docker = [_docker_command(lines, n) for n, line in enumerate(lines) if _DOCKER.search(line)]
    parsed = [parse_launch(c) for c in [*commands, *docker]]
    gpus = 1
    for name in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = facts.get(name)
        gpus *= value if isinstance(value, int) and value > 0 else 1
    version = facts.get("vllm_version")
    known = parse_version(version) if isinstance(version, str) else None
    swap = _flag_gib(parsed, "--swap-space") if known is None or known < _V1_DEFAULT else 0.0
    # the release that took `--swap-space` away: rules/fixes/flags.yaml, the one flag table
    removed = parse_version(swap_removed) if swap_removed else None
    if known is not None and removed is not None and known >= removed:
        swap = 0.0
    need = checkpoint + (_flag_gib(parsed, "--cpu-offload-gb") + swap) * gpus
    if limit < need:
        return "short"
    return "plenty" if limit >= plenty * need else None
