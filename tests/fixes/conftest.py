"""Fixtures for the fixes tests: the repository's fix pack and budgets that `estimate()` computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core import estimate
from service.fixes.lookup import CatalogLookup
from service.packs import RulePacks
from service.packs.catalog import load_catalog
from service.packs.fixes import FixPack, load_fix_recipes
from service.schemas import Budget, EstimateRequest

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture(scope="session")
def pack() -> FixPack:
    return load_fix_recipes(RULES)


@pytest.fixture(scope="session")
def llama70b_on_a100(packs: RulePacks) -> Budget:
    """Llama-3.1-70B-Instruct, bf16, TP=1 on one of four A100-80GB at 0.90: the weights cannot fit.

    Built by `estimate()`, so the fixes are tested on budgets the estimator really produces.
    """
    return estimate(
        EstimateRequest(
            model="meta-llama/Llama-3.1-70B-Instruct",
            gpu="A100-SXM4-80GB",
            gpus=4,
            tensor_parallel_size=1,
            max_model_len=8192,
            gpu_memory_utilization=0.9,
            vllm_version="0.11.0",
        ),
        packs,
    )


@pytest.fixture(scope="session")
def llama8b_on_a10(packs: RulePacks) -> Budget:
    """Llama-3.1-8B-Instruct on an A10 at 0.90 asking for 131,072 tokens: weights fit, context not."""
    return estimate(
        EstimateRequest(
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu="A10",
            max_model_len=131_072,
            gpu_memory_utilization=0.9,
            vllm_version="0.10.2",
        ),
        packs,
    )


@pytest.fixture(scope="session")
def lookup() -> CatalogLookup:
    """The fixes' view of the repository's real catalog (models, GPUs, checkpoints) and estimator."""
    return CatalogLookup(load_catalog(RULES))
