"""What the team has met: recurring failures from team memory (`GET /v1/fingerprints`).

The bot records each failure it answers in the shared Redis (service.team_memory); the service
reads the same store. Without Redis there is no team memory, and the endpoint says so (503).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from service.api.problems import PROBLEM_MEDIA_TYPE, Problem, ProblemError
from service.api.views import loaded
from service.team_memory import Recent, TeamMemory

__all__ = ["TEAM_HANDLERS", "RecurringFailures"]

MAX_DAYS = 366
MAX_FAILURES = 100


class RecurringFailures(msgspec.Struct, frozen=True):
    """The most frequent failures of the last `days`, most sightings first."""

    days: int
    failures: list[Recent]


_UNAVAILABLE = {
    503: ResponseSpec(
        data_container=Problem,
        media_type=PROBLEM_MEDIA_TYPE,
        description="No team memory: the service has no Redis (VRAMDOC_REDIS_URL).",
    )
}


def team_memory(state: State) -> TeamMemory:
    """The shared team memory, or a 503 saying why there is none."""
    memory = loaded(state).memory
    if memory is None:
        raise ProblemError(
            503,
            "no-team-memory",
            "No team memory",
            "Team memory lives in Redis and this service has none: set VRAMDOC_REDIS_URL to the "
            "Redis the bot uses.",
        )
    return memory


@get(
    "/fingerprints",
    summary="Recurring failures: the most frequent fingerprints of the last days, with hosts and the fix "
    "that worked",
    responses=_UNAVAILABLE,
    tags=["team"],
)
async def fingerprints(
    state: State,
    days: Annotated[int, Parameter(ge=1, le=MAX_DAYS, description="look back this many days")] = 7,
    limit: Annotated[int, Parameter(ge=1, le=MAX_FAILURES, description="failures to list")] = 10,
) -> RecurringFailures:
    rows = await team_memory(state).recent(days, limit=limit)
    return RecurringFailures(days=days, failures=rows)


TEAM_HANDLERS = [fingerprints]
