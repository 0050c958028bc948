"""Fixtures for pack tests: the real packs, and a scratch rules folder to break on purpose."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from service.packs import default_rules_dir


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    """A writable copy of the repository's rules folder."""
    target = tmp_path / "rules"
    shutil.copytree(default_rules_dir(), target)
    return target
