"""HTTP clients for the vramdoc service and the GPU-host agents, with short timeouts.

Every failure becomes a ServiceError or HostFailure carrying one sentence the person can act on;
the service's RFC 9457 `detail` is passed through unchanged.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

import httpx
import msgspec

from service.schemas import (
    Budget,
    DiagnoseRequest,
    Diagnosis,
    EstimateRequest,
    Preflight,
    PreflightRequest,
    Snapshot,
)

__all__ = ["AgentClient", "HostFailure", "ServiceClient", "ServiceError"]

T = TypeVar("T")


class ServiceError(Exception):
    """The service could not answer; `str(exc)` is the sentence to show."""


class HostFailure(msgspec.Struct, frozen=True):
    host: str
    reason: str


class _Problem(msgspec.Struct):
    detail: str | None = None
    title: str | None = None


def _problem_sentence(response: httpx.Response) -> str:
    try:
        problem = msgspec.json.decode(response.content, type=_Problem)
    except msgspec.DecodeError:
        problem = _Problem()
    if problem.detail:
        return problem.detail
    if problem.title:
        return f"The vramdoc service refused the request: {problem.title} (HTTP {response.status_code})."
    return f"The vramdoc service answered HTTP {response.status_code} without saying why."


def _transport_reason(exc: httpx.HTTPError, timeout_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"did not answer within {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        return "refused the connection"
    return f"failed ({type(exc).__name__})"


class ServiceClient:
    """Calls `POST /v1/diagnose`, `/v1/estimate` and `/v1/preflight` on the vramdoc service."""

    def __init__(self, base_url: str, *, timeout_s: float = 15.0, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=headers)

    async def _post(self, path: str, body: msgspec.Struct, type_: type[T]) -> T:
        try:
            response = await self._http.post(
                path, content=msgspec.json.encode(body), headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as exc:
            reason = _transport_reason(exc, self._timeout_s)
            raise ServiceError(
                f"The vramdoc service at {self.base_url} {reason}; try again shortly."
            ) from exc
        if response.status_code >= 400:
            raise ServiceError(_problem_sentence(response))
        try:
            return msgspec.json.decode(response.content, type=type_)
        except msgspec.DecodeError as exc:
            raise ServiceError(
                f"The vramdoc service at {self.base_url} sent an answer this bot cannot read ({exc})."
            ) from exc

    async def diagnose(self, request: DiagnoseRequest) -> Diagnosis:
        return await self._post("/v1/diagnose", request, Diagnosis)

    async def estimate(self, request: EstimateRequest) -> Budget:
        return await self._post("/v1/estimate", request, Budget)

    async def preflight(self, request: PreflightRequest) -> Preflight:
        return await self._post("/v1/preflight", request, Preflight)

    async def close(self) -> None:
        await self._http.aclose()


class AgentClient:
    """Fetches `GET /v1/snapshot` from agents, several hosts at once, each within the timeout."""

    def __init__(self, token: str | None, *, timeout_s: float = 3.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=headers, follow_redirects=False)

    async def snapshot(self, host: str, url: str) -> Snapshot | HostFailure:
        try:
            response = await self._http.get(f"{url.rstrip('/')}/v1/snapshot")
        except httpx.HTTPError as exc:
            return HostFailure(host, f"{host} {_transport_reason(exc, self._timeout_s)}")
        if response.status_code in {401, 403}:
            return HostFailure(host, f"{host} refused the bot's agent token (HTTP {response.status_code})")
        if response.status_code != 200:
            return HostFailure(host, f"{host} answered HTTP {response.status_code}")
        try:
            return msgspec.json.decode(response.content, type=Snapshot)
        except msgspec.DecodeError:
            return HostFailure(host, f"{host} sent a snapshot this bot cannot read")

    async def snapshots(self, hosts: dict[str, str]) -> list[Snapshot | HostFailure]:
        """Snapshots in the order given; a slow host costs at most the timeout, not a failure of all."""
        return list(await asyncio.gather(*(self.snapshot(host, url) for host, url in hosts.items())))

    async def close(self) -> None:
        await self._http.aclose()
