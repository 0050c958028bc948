"""Schemathesis reads /schema/openapi.json as a generic client would and fuzzes every operation
with valid and invalid input: no generated request may get a 5xx."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import hypothesis
import hypothesis.errors
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error

from service.api.settings import Settings

EXAMPLES_PER_OPERATION = 40


@pytest.fixture
def client_with_redis(
    serve: Callable[[Settings], httpx.Client], redis_url: str, key_prefix: str
) -> httpx.Client:
    """The service with Redis, so every operation answers from its input (without Redis, team memory
    and calibration answer 503 by design, whatever the request)."""
    return serve(Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":")))


def test_generated_requests_never_get_a_server_error(client_with_redis: httpx.Client) -> None:
    client = client_with_redis
    schema = schemathesis.openapi.from_url(f"{client.base_url}/schema/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9, "the schema lost operations"
    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
            )
            def never_a_server_error(case: schemathesis.Case) -> None:
                case.call_and_validate(checks=[not_a_server_error])

            try:
                never_a_server_error()
            except hypothesis.errors.Unsatisfiable:
                # An operation without parameters or body has no invalid input to generate.
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
