"""Fixtures for classifier tests: the real packs and a one-call classifier."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Diagnosis


@pytest.fixture
def run_classify(packs: RulePacks) -> Callable[..., Diagnosis]:
    """classify(log, **hints) with the real packs."""

    def _run(log: str, **hints: str) -> Diagnosis:
        return classify(DiagnoseRequest(log=log, **hints), packs)  # type: ignore[arg-type]

    return _run
