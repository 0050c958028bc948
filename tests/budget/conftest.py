"""Fixtures for the budget tests: the repository's catalog, loaded once."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.packs.catalog import Catalog, load_catalog

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    """The catalog shipped in rules/catalog."""
    return load_catalog(RULES)
