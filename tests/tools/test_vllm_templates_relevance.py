"""tools/vllm_templates.py's relevance filter (data in the tool): which of vLLM's messages the
inventory must map to a rule. The templates here are written for the test, in vLLM's own phrasing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    sys.path.insert(0, str(REPO / "tools"))
    spec = importlib.util.spec_from_file_location("vllm_templates", REPO / "tools" / "vllm_templates.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_templates"] = module
    spec.loader.exec_module(module)
    return module


templates = _tool()


def _entry(text: str, level: str = "raise") -> object:
    return templates.Entry(level, "ValueError", text, (), "vllm/executor/ray_utils.py", "_verify_bundles")


@pytest.mark.parametrize(
    "text",
    [
        "Ray does not allocate any XPUs on the driver node. Consider adjusting the Ray placement group.",
        "Placement group bundle cannot have more than 1 {}.",
        "The number of required {}s exceeds the total number of available {}s in the placement group.",
        "Not enough resources to allocate {} placement groups, only created {} placement groups.",
    ],
)
def test_a_message_about_placing_parallel_workers_on_devices_is_relevant(text: str) -> None:
    subjects, reason = templates.classify(_entry(text))
    assert reason is None and "parallelism" in subjects


@pytest.mark.parametrize(
    "text",
    [
        "VLLM_RAY_BUNDLE_INDICES cannot have duplicate values, but got bundle_indices={}",
        "Connecting to existing Ray cluster at address: {}",
    ],
)
def test_ray_messages_that_state_no_unmet_placement_are_not(text: str) -> None:
    _, reason = templates.classify(_entry(text))
    assert reason is not None


@pytest.mark.parametrize(
    "text",
    [
        "No enough gpu memory for kv cache.",
        "No enough gpu memory for state cache. Please reduce max_batch_size.",
    ],
)
def test_a_memory_failure_in_a_wrappers_no_enough_wording_is_relevant(text: str) -> None:
    subjects, reason = templates.classify(_entry(text))
    assert reason is None and "memory" in subjects


def test_every_pinned_plugin_and_wrapper_is_in_the_plugins_inventory() -> None:
    from service.packs import default_rules_dir
    from service.packs.inventory import load_inventories

    listed = {row.rsplit(" ", 1)[0] for row in load_inventories(default_rules_dir())["plugins.yaml"].releases}
    assert set(templates.SOURCES) <= listed
