"""What the team has met: recurring failures (`GET /v1/fingerprints`) and the estimator's error on the
start-ups people pasted (`GET /v1/calibration`).

The bot records each failure it answers in the shared Redis (service.team_memory); every diagnosis
whose log states its memory profile adds a calibration sample (service.calibration_store). Without
Redis there is neither, and the endpoints say so (503).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from service.api.monitoring import publish_calibration
from service.api.problems import PROBLEM_MEDIA_TYPE, Problem, ProblemError
from service.api.views import Loaded, loaded
from service.calibration import calibration_note, calibration_sample, family_of, summarize
from service.calibration_store import CalibrationStore
from service.schemas import Budget, CalibrationGroup, CalibrationReport, Diagnosis
from service.team_memory import Recent, TeamMemory

__all__ = ["TEAM_HANDLERS", "RecurringFailures", "calibrated_note", "record_calibration"]

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
        description="No team memory or calibration: the service has no Redis (VRAMDOC_REDIS_URL), "
        "or team memory's Redis does not answer right now.",
    )
}


def _no_redis(what: str) -> ProblemError:
    return ProblemError(
        503,
        "no-team-memory",
        "No team memory",
        f"{what} lives in Redis and this service has none: set VRAMDOC_REDIS_URL to the Redis the bot uses.",
    )


def team_memory(state: State) -> TeamMemory:
    """The shared team memory, or a 503 saying why there is none."""
    memory = loaded(state).memory
    if memory is None:
        raise _no_redis("Team memory")
    return memory


def _calibration(state: State) -> CalibrationStore:
    store = loaded(state).calibration
    if store is None:
        raise _no_redis("Calibration")
    return store


async def _groups(ready: Loaded, store: CalibrationStore) -> list[CalibrationGroup]:
    groups = summarize(await store.samples(), ready.settings.calibration_min_samples)
    publish_calibration(groups)
    return groups


async def record_calibration(ready: Loaded, diagnosis: Diagnosis) -> None:
    """Keep the estimator's error on this log's start-up, when the log states its profile."""
    if ready.calibration is None or (sample := calibration_sample(diagnosis, ready.packs)) is None:
        return
    if await ready.calibration.record(sample):
        await _groups(ready, ready.calibration)


async def calibrated_note(ready: Loaded, budget: Budget, model: str | None) -> str | None:
    """The sentence citing calibration for this estimate's family, GPU and vLLM minor, if it has enough."""
    if ready.calibration is None:
        return None
    family = family_of(model or budget.model, ready.packs)
    return calibration_note(budget, family, await _groups(ready, ready.calibration))


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
    if rows is None:
        raise ProblemError(
            503,
            "team-memory-unreachable",
            "Team memory unreachable",
            "The Redis that holds team memory does not answer right now; try again shortly.",
        )
    return RecurringFailures(days=days, failures=rows)


@get(
    "/calibration",
    summary="The estimator's error on pasted vLLM start-ups, by model family, GPU and vLLM minor",
    description=(
        "Each diagnosed log that states its configuration and vLLM's measured memory profile is one "
        "sample: predicted − measured GiB per figure. A group with `enough` samples "
        "(VRAMDOC_CALIBRATION_MIN_SAMPLES) is cited in estimates' notes."
    ),
    responses=_UNAVAILABLE,
    tags=["team"],
)
async def calibration(state: State) -> CalibrationReport:
    ready = loaded(state)
    store = _calibration(state)
    groups = await _groups(ready, store)
    return CalibrationReport(
        min_samples=ready.settings.calibration_min_samples,
        samples=sum(g.samples for g in groups),
        groups=groups,
    )


TEAM_HANDLERS = [fingerprints, calibration]
