"""Every memory figure vLLM prints in a wording the rules match comes out as a fact.

Each inventory template with rules is rendered with a distinct size for every hole followed by
`GiB` (the other holes take the inventory's placeholders) and classified; each of those sizes must
be one of the facts, unless it is listed below as a figure no DESIGN §3.2 fact holds, with why.
"""

from __future__ import annotations

import re

import msgspec
import pytest

from service.diagnosis import classify_text
from service.packs import RulePacks, default_rules_dir
from service.packs.inventory import PLACEHOLDER, Template, load_inventories, pieces

# template text prefix -> {hole index: why that size is no fact}
NOT_A_FACT: dict[str, dict[int, str]] = {
    "Estimated CUDA graph memory:": {0: "an estimate before capture; the graphs' size is read after it"},
    "CUDA graph pool memory:": {1: "the estimate, not what the graphs took", 2: "estimate minus actual"},
    "Free memory on device ({}/{} GiB) on startup. Desired": {
        8: "the suggested --kv-cache-memory, not a state of the run",
        9: "the suggested --kv-cache-memory, not a state of the run",
        10: "the suggested --kv-cache-memory, not a state of the run",
        11: "the suggested --kv-cache-memory, not a state of the run",
    },
    "Free memory on device {} ({}/{} GiB) on startup is less than the engine's budget": {
        4: "the engine's budget after other processes' weights, not the requested memory"
    },
    "Error in memory profiling.": {1: "free memory after profiling; free_gib is the start-up reading"},
    "Free memory grew by": {
        0: "profiling's correction",
        1: "profiling's correction",
        2: "profiling's correction",
        3: "profiling's correction",
    },
    "Available memory on node": {
        3: "host memory of the CPU backend",
        4: "host memory of the CPU backend",
    },
    "Memory profiling results:": {
        1: "usage before profiling, which no fact holds",
        2: "torch peak including the weights: not the activation peak",
    },
}

_SIZE_AFTER = re.compile(r"^ ?GiB")


def _excused(template: Template, index: int) -> bool:
    return any(template.text.startswith(prefix) and index in holes for prefix, holes in NOT_A_FACT.items())


def _rendered(template: Template) -> tuple[str, dict[int, float]]:
    """The template printed with a distinct size per GiB hole (index -> size), other holes as placeholders."""
    parts = pieces(template.text)
    out: list[str] = []
    sizes: dict[int, float] = {}
    for index, piece in enumerate(parts):
        out.append(piece)
        if index == len(parts) - 1:
            break
        if _SIZE_AFTER.match(parts[index + 1]):
            sizes[index] = 101.25 + 2 * index
            out.append(f"{sizes[index]:.2f}")
        else:
            shape = template.holes[index] if index < len(template.holes) else "text"
            out.append(PLACEHOLDER[shape])
    text = "".join(out)
    if template.level in ("raise", "assert") and template.exception:
        text = f"{template.exception}: {text}"
    return text, sizes


def _cases() -> list[Template]:
    seen: set[str] = set()
    cases: list[Template] = []
    # vLLM's and the allocators' own wordings; the plugins' (plugins.yaml) are held to their rules by
    # test_inventory.py, their numbers not yet read as facts (tests/corpus/REALWORLD.md, plugins4)
    for name, inventory in load_inventories(default_rules_dir()).items():
        if name == "plugins.yaml":
            continue
        for template in inventory.templates:
            if not template.decision.rules or template.text in seen:
                continue
            seen.add(template.text)
            if _rendered(template)[1]:
                cases.append(template)
    return cases


_CASES = _cases()


@pytest.mark.parametrize("template", _CASES, ids=[t.text[:60] for t in _CASES])
def test_every_memory_figure_of_a_matched_wording_is_a_fact(packs: RulePacks, template: Template) -> None:
    text, sizes = _rendered(template)
    facts = msgspec.to_builtins(classify_text(text, packs).facts)
    stated = {round(value, 6) for value in facts.values() if isinstance(value, float)}
    missing = [i for i, size in sizes.items() if round(size, 6) not in stated and not _excused(template, i)]
    assert not missing, f"holes {missing} of {text!r} state no fact (facts: {facts})"


@pytest.mark.parametrize(
    "wording",
    [
        "Free memory on device ({}/{} GiB) on startup. Desired GPU memory utilization is",
        "Memory profiling takes {} seconds\nthe current vLLM instance can use total_gpu_memory",
        "Memory profiling results: total_gpu_memory=",
        "Free memory on device ({}/{} GiB) on startup is less than desired",
        "To serve at least one request with the model",
    ],
)
def test_the_start_up_and_profile_lines_of_every_era_are_checked(wording: str) -> None:
    assert any(t.text.startswith(wording) for t in _CASES)
