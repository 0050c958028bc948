"""Resolving a model the catalog does not know, for the service: shared cache, thread, deadline.

The chain's blocking steps (HF cache, Hub) run on a worker thread under a deadline, so a slow Hub
costs a request at most that long and then a sentence saying so; resolved models are kept in the
shared state (Redis when configured, else process memory) for the chain's TTL.
"""

from __future__ import annotations

import anyio
import anyio.to_thread
import msgspec

from service.api.views import Loaded
from service.errors import ModelUnavailableError, UnknownModelError
from service.models.chain import ResolvedModel, apply, cache_key, with_suggestions
from service.schemas import EstimateRequest, Snapshot

__all__ = ["resolve_model"]

# The Hub steps are a HEAD, a download and a model-info call, each bounded by the timeout.
_DEADLINE_CALLS = 2


async def resolve_model(
    ready: Loaded, request: EstimateRequest, snapshots: tuple[Snapshot, ...] = ()
) -> tuple[EstimateRequest, ResolvedModel]:
    """The request with its model's config.json and checkpoint totals, and where they came from."""
    resolver = ready.resolver
    known = resolver.known(request, ready.packs.catalog)
    if known is not None:
        return request, known
    assert request.model is not None
    name = request.model.strip()
    key = cache_key(name, resolver.settings)
    held = await ready.shared.cached(key)
    if held is not None:
        try:
            resolved = msgspec.json.decode(held, type=ResolvedModel)
            return apply(request, resolved), resolved
        except msgspec.DecodeError:
            pass
    deadline = resolver.settings.timeout_s * _DEADLINE_CALLS
    try:
        with anyio.fail_after(deadline):
            resolved = await anyio.to_thread.run_sync(
                resolver.resolve_uncached, name, snapshots, abandon_on_cancel=True
            )
    except TimeoutError:
        raise ModelUnavailableError(
            f"The Hugging Face Hub ({resolver.settings.endpoint}) did not answer for {name} within "
            f"{deadline:g} s; paste its config.json, or ask again shortly."
        ) from None
    except UnknownModelError as exc:
        raise with_suggestions(exc, ready.packs.catalog) from exc
    if resolved.source in ("hub", "hf_cache"):
        await ready.shared.store(key, msgspec.json.encode(resolved), resolver.settings.ttl_s)
    return apply(request, resolved), resolved
