"""Route handlers: decode the request, redact it, call the core (or the cache), return a Struct.

`/v1/diagnose` and `/v1/classify` take a JSON `DiagnoseRequest`, a multipart upload
(`curl -F log=@vllm.log`: the `log` field, else the first file part), or the raw log in any other
content type, with the hints as query parameters (`curl --data-binary @vllm.log '...?model=...'`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import ResponseHeader, State, UploadFile
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.types import Scope

from service import core
from service.api.access import admit
from service.api.hits import RawKey, raw_key
from service.api.json_bytes import JsonBytes
from service.api.models import resolve_model
from service.api.monitoring import count_diagnosis, count_preflight
from service.api.openapi import EstimateBodyOperation, LogBodyOperation, PreflightBodyOperation
from service.api.problems import PROBLEM_MEDIA_TYPE, FieldError, Problem, ProblemError, decode_error
from service.api.stores import SharedState
from service.api.team import calibrated_note, record_calibration
from service.api.views import GpuEntry, Health, Loaded, ModelInfo, Readiness, RulesInfo, loaded
from service.diagnosis.normalize import decode_bytes
from service.models.chain import ResolvedModel, cite
from service.packs import RulePacks
from service.redacted import redacted_diagnose, redacted_estimate, redacted_preflight
from service.schemas import (
    MAX_TOP,
    Budget,
    DiagnoseRequest,
    Diagnosis,
    EstimateRequest,
    Preflight,
    PreflightRequest,
)
from service.serving import trim_freed_memory

__all__ = ["V1_HANDLERS", "health_handlers"]

T = TypeVar("T", Diagnosis, Budget, Preflight)


# Logs above this size are diagnosed on a worker thread so health probes still answer meanwhile.
_THREAD_ABOVE_BYTES = 256 * 1024

_PROBLEMS = {
    status: ResponseSpec(data_container=Problem, media_type=PROBLEM_MEDIA_TYPE, description=text)
    for status, text in {
        400: "Malformed body or parameter; `errors` names the field.",
        401: "Missing or wrong bearer token (only when the service has API tokens).",
        408: "The body stopped arriving for 30 s.",
        413: "Body larger than VRAMDOC_MAX_BODY_BYTES.",
        422: "Input the core cannot use: empty log, unknown model or GPU (with `suggestions`).",
        429: "Rate limit reached; see Retry-After.",
    }.items()
}

_Hint = Annotated[str | None, Parameter(required=False, max_length=4096)]
_Top = Annotated[int | None, Parameter(required=False, ge=0, le=MAX_TOP, description="fixes to return")]


# --- decoding ----------------------------------------------------------------------------------


def _media_type(scope: Scope) -> str:
    """The media type of the request's first `content-type` header, read from the ASGI scope as
    Litestar's `request.headers.get` would (latin-1), without building its header mapping."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            return value.decode("latin-1").split(";", 1)[0].strip().lower()
    return ""


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")


class LogHints(msgspec.Struct, frozen=True):
    """The query parameters of a log request; they fill in what a JSON body leaves out."""

    model: str | None
    gpu: str | None
    command: str | None
    vllm_version: str | None
    top: int | None


R = TypeVar("R", DiagnoseRequest, EstimateRequest, PreflightRequest)


def _decode_body(body: bytes, type_: type[R]) -> R:
    """Strict JSON decoding; a bad field, bad JSON or absurd nesting is a 400 naming the problem."""
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    except RecursionError:
        detail = "The body nests arrays or objects too deeply to be a request."
        raise ProblemError(400, "invalid-json", "Invalid JSON", detail) from None


def _json_log_request(body: bytes, hints: LogHints) -> DiagnoseRequest:
    """A JSON DiagnoseRequest, its empty fields filled in from the hints."""
    req = _decode_body(body, DiagnoseRequest)
    return msgspec.structs.replace(
        req,
        model=req.model or hints.model,
        gpu=req.gpu or hints.gpu,
        command=req.command or hints.command,
        vllm_version=req.vllm_version or hints.vllm_version,
    )  # its top is bounded by DiagnoseRequest's Meta, a query's by _Top


def _raw_log_request(hints: LogHints) -> DiagnoseRequest:
    """The request of a raw log, without the log: its bytes are decoded only if the answer is computed."""
    return DiagnoseRequest(
        log="",
        model=hints.model,
        gpu=hints.gpu,
        command=hints.command,
        vllm_version=hints.vllm_version,
        top=5 if hints.top is None else hints.top,
    )


_HINT_FIELDS = ("model", "gpu", "command", "vllm_version")


async def _uploaded_log(request: Request[Any, Any, Any], hints: LogHints) -> tuple[bytes, LogHints]:
    """The log of a multipart upload (its `log` field, else its first file part) and the hints.

    Text fields named like the query parameters fill in hints the query left out.
    """
    form = await request.form()
    named: bytes | None = None
    first_file: bytes | None = None
    fields: dict[str, str] = {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            data = await value.read()
            if name == "log" and named is None:
                named = data
            elif first_file is None:
                first_file = data
        elif name == "log" and named is None:
            named = str(value).encode()
        elif name in _HINT_FIELDS and isinstance(value, str):
            fields.setdefault(name, value[:4096])
    log = named if named is not None else first_file
    if log is None:
        detail = "The multipart body has no `log` field and no file part; send the log as `-F log=@vllm.log`."
        raise ProblemError(
            400, "missing-log", "No log in the upload", detail, [FieldError("form.log", detail)]
        )
    filled = LogHints(
        model=hints.model or fields.get("model"),
        gpu=hints.gpu or fields.get("gpu"),
        command=hints.command or fields.get("command"),
        vllm_version=hints.vllm_version or fields.get("vllm_version"),
        top=hints.top,
    )
    return log, filled


# --- answering ---------------------------------------------------------------------------------


# Bumped whenever what a cache entry holds changes, so a shared Redis never serves an old layout.
_CACHE_LAYOUT = "2"


@functools.lru_cache(maxsize=64)
def _key_prefix(endpoint: str, digest: str) -> Any:
    """sha256 of what every key of `endpoint` starts with, to be copied per request."""
    return hashlib.sha256(f"{endpoint}\0{digest}\0{_CACHE_LAYOUT}".encode())


def _cache_key(shared: SharedState, endpoint: str, packs: RulePacks, *parts: bytes) -> str:
    """The endpoint and a one-way hash of the rules digest and the canonical request (no text is kept).

    A key that never leaves this process (no Redis) is Python's own hash of the parts: SipHash,
    keyed at random per process, at about half sha256's cost on a 37 KB log; a request cannot
    choose another request's key without that key. Keys shared through Redis are sha256, the same
    in every worker and service version with this cache layout.
    """
    if shared.redis is None:
        return f"{endpoint}:{hash((packs.digest, *parts)):x}:{sum(map(len, parts))}"
    digest = _key_prefix(endpoint, packs.digest).copy()
    for part in parts:
        digest.update(b"\0%d\0" % len(part))
        digest.update(part)
    return f"{endpoint}:{digest.hexdigest()}"


def _label(result: Diagnosis | Budget | Preflight) -> str:
    """What the metrics count an answer by: a diagnosis's phase, a pre-flight's outcome."""
    if isinstance(result, Diagnosis):
        return result.phase
    return result.outcome if isinstance(result, Preflight) else ""


def _count(endpoint: str, type_: type[Diagnosis | Budget | Preflight], label: str) -> None:
    if type_ is Diagnosis:
        count_diagnosis(endpoint, label)
    elif type_ is Preflight:
        count_preflight(label)


def _json(body: bytes, status: str) -> Response[Any]:
    """The answer's JSON bytes as they are: a cache hit is sent without decoding it again."""
    return JsonBytes(body, status)


def _stored(cached: bytes | None) -> tuple[str, bytes] | None:
    """A cache entry's metrics label and answer JSON (see `_answer`), or None for no usable entry."""
    if cached is None:
        return None
    label, newline, body = cached.partition(b"\n")
    return (label.decode(), body) if newline else None


async def _answer(
    ready: Loaded,
    endpoint: str,
    key_parts: tuple[bytes, ...],
    compute: Callable[[], T],
    type_: type[T],
    *,
    large: bool = False,
    computed: Callable[[T], Awaitable[None]] | None = None,
    amend: Callable[[T], Awaitable[T]] | None = None,
    raw: RawKey | None = None,
) -> Response[Any]:
    """The cached answer for an identical request, else compute it and cache it.

    The key hashes the request before redaction, so a repeat is answered without redacting or
    diagnosing it again; only the answer, computed from the redacted request, is stored: its
    metrics label, a newline (msgspec's JSON never holds a raw one), its JSON. A hit is sent as
    those bytes, unless `amend` adds what is not cached (calibration notes). `computed` sees each
    answer that was computed, not one served from the cache. `raw` (the raw request's key, see
    service/api/hits.py) is remembered as answered by this entry, so its next repeat is a hit
    before the handler's parsing (`_answered_before`).
    """
    ttl_s = ready.settings.cache_ttl_s
    key = _cache_key(ready.shared, endpoint, ready.packs, *key_parts) if ttl_s else None
    stored = _stored(await ready.shared.cached(key)) if key else None
    if stored is not None:
        status = "hit"
        label, body = stored
        _count(endpoint, type_, label)
        if raw is not None and key:
            ready.hits.answered(raw, key)
        if amend is None:
            return _json(body, status)
        result = msgspec.json.decode(body, type=type_)
    else:
        status = "miss" if key else "off"
        result = await anyio.to_thread.run_sync(compute, limiter=ready.large_logs) if large else compute()
        if large:
            trim_freed_memory()
        body = msgspec.json.encode(result)
        if key:
            await ready.shared.store(key, _label(result).encode() + b"\n" + body, ttl_s)
            if raw is not None:
                ready.hits.answered(raw, key)
        _count(endpoint, type_, _label(result))
        if computed is not None:
            await computed(result)
        if amend is None:
            return _json(body, status)
    return Response(await amend(result), headers={"X-Cache": status})


async def _answer_log(
    request: Request[Any, Any, Any],
    state: State,
    endpoint: str,
    hints: LogHints,
    run: Callable[[DiagnoseRequest, RulePacks], Diagnosis],
    computed: Callable[[Diagnosis], Awaitable[None]] | None = None,
) -> Response[Any]:
    ready = loaded(state)
    # the handler runs: Litestar validated this query string
    ready.hits.accept_query(endpoint, request.scope["query_string"])
    body = body_read = await request.body()
    media = _media_type(request.scope)
    if media == "multipart/form-data":
        body, hints = await _uploaded_log(request, hints)
    parsed = _json_log_request(body, hints) if _is_json(media) else None
    if parsed is not None:
        log, rest = parsed.log.encode(), msgspec.structs.replace(parsed, log="")
    else:  # any bytes, decoded with replacement, and only when the answer is computed
        log, rest = body, _raw_log_request(hints)

    def whole() -> DiagnoseRequest:
        if parsed is not None:
            return parsed
        return msgspec.structs.replace(rest, log=decode_bytes(body))

    packs = ready.packs
    raw: RawKey | None = _request_state(request.scope).get(_RAW_KEY)
    if raw is None and ready.settings.cache_ttl_s:  # a query string new to the index: no body was read
        raw = raw_key(packs.digest, endpoint, request.scope, body_read)
    return await _answer(
        ready,
        endpoint,
        # The canonical request, so a raw log and the same log as JSON share one cache entry: the
        # log's UTF-8 (a raw body as it came) and the other fields as JSON (escaping the log as JSON
        # only to hash it costs half as much again as hashing it).
        (log, msgspec.json.encode(rest)),
        lambda: run(redacted_diagnose(whole()), packs),
        Diagnosis,
        large=len(body) > _THREAD_ABOVE_BYTES,
        computed=computed,
        raw=raw,
    )


_RAW_KEY = "vramdoc_raw_key"  # the raw request's key, in the request's state (hook -> handler)


def _request_state(scope: Scope) -> dict[str, Any]:
    """The request's state as the dict it is in the scope: what `request.state` wraps in a new
    `State` (and a new lock) on every access."""
    state: dict[str, Any] = scope.setdefault("state", {})
    return state


def _answered_before(endpoint: str) -> Callable[[Request[Any, Any, Any]], Awaitable[Response[Any] | None]]:
    """The `before_request` hook of a log endpoint: `admit`, then the stored answer of a repeat.

    A request whose raw form (content type, query string, body) was answered before is sent the
    stored bytes without parsing its parameters, running the handler or building a request
    (Litestar skips both when the hook returns a response). It reads the body only when the query
    string is one the endpoint validated before, so anything the full path refuses before reading
    the body (a bad `top`) it still refuses first; the body is read with the same size limit, under
    the same stalled-body guard, and a refused or failing request never reaches the index. Anything
    else returns None, and the full path answers, with the raw key kept for it to remember.
    """

    async def before_request(request: Request[Any, Any, Any]) -> Response[Any] | None:
        await admit(request)
        ready = loaded(request.app.state)
        scope = request.scope
        if not ready.settings.cache_ttl_s or not ready.hits.query_valid(endpoint, scope["query_string"]):
            return None
        raw = raw_key(ready.packs.digest, endpoint, scope, await request.body())
        key = ready.hits.canonical(raw)
        stored = _stored(await ready.shared.cached(key)) if key is not None else None
        if stored is None:
            _request_state(scope)[_RAW_KEY] = raw
            return None
        label, body = stored
        count_diagnosis(endpoint, label)
        return _json(body, "hit")

    return before_request


_CACHE_HEADER = ResponseHeader(
    name="X-Cache",
    value="miss",
    description="`hit` when an identical request was answered from the response cache, else `miss` (`off`).",
    documentation_only=True,
)
_LOG_ROUTE: dict[str, Any] = {
    "operation_class": LogBodyOperation,
    "status_code": 200,
    "responses": _PROBLEMS,
    "response_headers": [_CACHE_HEADER],
    "tags": ["diagnosis"],
}


@post(
    "/diagnose",
    summary="Diagnose a vLLM log: failing phase, evidence, facts, budget and ranked fixes",
    description=(
        "Send a JSON DiagnoseRequest, or the raw log in any other content type with the hints as "
        "query parameters, e.g. `curl --data-binary @vllm.log '/v1/diagnose?model=Qwen/Qwen2.5-7B'`."
    ),
    before_request=_answered_before("diagnose"),
    **_LOG_ROUTE,
)
async def diagnose(
    request: Request[Any, Any, Any],
    state: State,
    model: _Hint = None,
    gpu: _Hint = None,
    command: _Hint = None,
    vllm_version: _Hint = None,
    top: _Top = None,
) -> Response[Diagnosis]:
    hints = LogHints(model, gpu, command, vllm_version, top)
    ready = loaded(state)

    async def record(diagnosis: Diagnosis) -> None:
        await record_calibration(ready, diagnosis)

    # a cached answer's sample was kept when it was computed (one sample per log, SET NX)
    recorded = record if ready.calibration is not None else None
    return await _answer_log(request, state, "diagnose", hints, core.diagnose, recorded)


@post(
    "/classify",
    summary="Classify a vLLM log: failing phase, evidence and facts only (no budget, no fixes)",
    description="Same body as /v1/diagnose; faster when only the phase and the stated numbers are needed.",
    before_request=_answered_before("classify"),
    **_LOG_ROUTE,
)
async def classify(
    request: Request[Any, Any, Any],
    state: State,
    model: _Hint = None,
    gpu: _Hint = None,
    command: _Hint = None,
    vllm_version: _Hint = None,
    top: _Top = None,
) -> Response[Diagnosis]:
    hints = LogHints(model, gpu, command, vllm_version, top)
    return await _answer_log(request, state, "classify", hints, core.classify)


@post(
    "/estimate",
    summary="Estimate the per-GPU memory budget of a model on a GPU",
    operation_class=EstimateBodyOperation,
    status_code=200,
    responses=_PROBLEMS,
    response_headers=[_CACHE_HEADER],
    tags=["budget"],
)
async def estimate(request: Request[Any, Any, Any], state: State) -> Response[Budget]:
    data = redacted_estimate(_decode_body(await request.body(), EstimateRequest))
    ready = loaded(state)
    data, resolved = await resolve_model(ready, data)

    async def with_note(budget: Budget) -> Budget:
        note = await calibrated_note(ready, budget, data.model)
        return budget if note is None else msgspec.structs.replace(budget, notes=[*budget.notes, note])

    return await _answer(
        ready,
        "estimate",
        (msgspec.json.encode(data), msgspec.json.encode(resolved)),
        lambda: cite(core.estimate(data, ready.packs), resolved),
        Budget,
        amend=with_note if ready.calibration is not None else None,
    )


async def _resolved_preflight(
    ready: Loaded, data: PreflightRequest
) -> tuple[PreflightRequest, ResolvedModel]:
    """The pre-flight with its model resolved as an estimate's is (catalog, config.json, the host's
    agent, the HF cache, the Hub)."""
    name = core.launch_model(data, ready.packs)
    wanted = EstimateRequest(model=name, config=data.config, parameters=data.parameters)
    snapshots = (data.snapshot,) if data.snapshot is not None else ()
    wanted, resolved = await resolve_model(ready, wanted, snapshots)
    return msgspec.structs.replace(data, config=wanted.config, parameters=wanted.parameters), resolved


@post(
    "/preflight",
    summary="Pre-flight a `vllm serve` command on a host: will it start there now, and if not, what will",
    description=(
        "Send the command and the host's snapshot (the agent's `GET /v1/snapshot`; the bot and "
        "`vramdoc preflight --host` fetch it through the registry), or a catalog `gpu` to size it on "
        "an empty GPU. The flags are checked for the host's vLLM version, the estimator sizes the "
        "command on the GPUs' current free memory, and the answer gives the verdict, the corrected "
        "command and what is uncertain."
    ),
    operation_class=PreflightBodyOperation,
    status_code=200,
    responses=_PROBLEMS,
    response_headers=[_CACHE_HEADER],
    tags=["budget"],
)
async def preflight(request: Request[Any, Any, Any], state: State) -> Response[Preflight]:
    data = redacted_preflight(_decode_body(await request.body(), PreflightRequest))
    ready = loaded(state)
    data, resolved = await _resolved_preflight(ready, data)

    def compute() -> Preflight:
        result = core.preflight(data, ready.packs)
        return msgspec.structs.replace(result, budget=cite(result.budget, resolved))

    async def with_note(result: Preflight) -> Preflight:
        note = await calibrated_note(ready, result.budget, data.model)
        return (
            result if note is None else msgspec.structs.replace(result, uncertain=[*result.uncertain, note])
        )

    return await _answer(
        ready,
        "preflight",
        (msgspec.json.encode(data), msgspec.json.encode(resolved)),
        compute,
        Preflight,
        amend=with_note if ready.calibration is not None else None,
    )


@get("/models", summary="Models in the catalog (ids and aliases accepted by `model`)", tags=["catalog"])
async def models(state: State) -> list[ModelInfo]:
    return loaded(state).models


@get("/gpus", summary="GPUs in the catalog (names and aliases accepted by `gpu`)", tags=["catalog"])
async def gpus(state: State) -> list[GpuEntry]:
    return loaded(state).gpus


@get("/rules", summary="Loaded rule packs, their sizes and the digest every answer names", tags=["catalog"])
async def rules(state: State) -> RulesInfo:
    return loaded(state).rules


@get("/healthz", summary="Liveness: the process answers", tags=["operations"])
async def healthz() -> Health:
    return Health("ok")


@get("/readyz", summary="Readiness: rule packs loaded; Redis reachable when configured", tags=["operations"])
async def readyz(state: State) -> Readiness:
    ready = loaded(state)
    redis = await ready.shared.redis_status()
    status = "ready" if redis in {"ok", "not configured"} else "degraded"
    return Readiness(status=status, rules_version=ready.packs.digest, redis=redis)


V1_HANDLERS = [diagnose, classify, estimate, preflight, models, gpus, rules]
health_handlers = [healthz, readyz]
