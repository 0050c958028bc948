"""Models from the Hugging Face Hub through `huggingface_hub`: config.json and safetensors totals.

The config is downloaded into the Hugging Face cache (so the next resolution finds it on disk); the
parameter counts per dtype come from the model info's `safetensors` summary, else from the headers
themselves (`get_safetensors_metadata`, ranged reads). Every call is bounded by the settings' timeout.

`huggingface_hub`'s client (a fifth of a second to import) is imported on the first Hub call: a
catalog model, the CLI's diagnose and most estimates never need it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from service.errors import ModelAccessError, ModelUnavailableError, UnknownModelError
from service.models.local import read_config

if TYPE_CHECKING:
    from huggingface_hub import HfApi

__all__ = ["HubModel", "HubSettings", "fetch_from_hub"]


@dataclass(frozen=True, slots=True)
class HubSettings:
    """Where the Hub is and how to ask it (HF_ENDPOINT, HF_TOKEN, the cache, a timeout per call)."""

    endpoint: str
    token: str | None
    cache_dir: str | None
    timeout_s: float


@dataclass(frozen=True, slots=True)
class HubModel:
    config: dict[str, object]
    parameters: dict[str, int] | None
    notes: list[str]


def _access_error(repo_id: str, settings: HubSettings) -> ModelAccessError:
    if settings.token:
        return ModelAccessError(
            f"The Hugging Face repo {repo_id} is gated or private and the token in HF_TOKEN has no access "
            "to it; accept its terms on the Hub with that account, or paste its config.json."
        )
    return ModelAccessError(
        f"The Hugging Face repo {repo_id} is gated or private; set HF_TOKEN to a token with access to it, "
        "or paste its config.json."
    )


def _parameters(api: HfApi, repo_id: str, settings: HubSettings) -> tuple[dict[str, int] | None, list[str]]:
    """Per-dtype parameter counts: the model info's summary, else the safetensors headers."""
    try:
        info = api.model_info(repo_id, timeout=settings.timeout_s)
        if info.safetensors is not None and info.safetensors.parameters:
            return dict(info.safetensors.parameters), []
        metadata = api.get_safetensors_metadata(repo_id)
        return {str(dtype): count for dtype, count in metadata.parameter_count.items()}, []
    except Exception as exc:  # the counts are optional: any failure leaves the formula, with a note
        # e.g. a .bin-only repo (NotASafetensorsRepoError), or a transport error of huggingface_hub's
        # HTTP client, which has no public base class to name here
        reason = type(exc).__name__
        return None, [
            f"The Hub gave no safetensors totals for {repo_id} ({reason}); weights are from the formula."
        ]


_T = TypeVar("_T")


class _Late(Exception):
    """The call did not finish within its deadline (the thread is left to end on its own)."""


def _within(seconds: float, call: Callable[[], _T]) -> _T:
    """`call()` on a daemon thread, bounded by `seconds`.

    huggingface_hub's own timeouts bound each socket read, not a call: it retries a timed-out HEAD
    and then downloads, so one slow Hub can hold a call for several timeouts. A daemon thread also
    never delays the CLI's exit.
    """
    outcome: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)

    def target() -> None:
        try:
            outcome.put((True, call()))
        except BaseException as exc:  # handed to the caller, who re-raises it
            outcome.put((False, exc))

    threading.Thread(target=target, name="vramdoc-hub", daemon=True).start()
    try:
        ok, value = outcome.get(timeout=seconds)
    except queue.Empty:
        raise _Late from None
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return cast(_T, value)


# A config.json costs a HEAD and a GET; the parameter counts one model-info call (or a few ranged reads).
_CONFIG_CALLS = 2
_PARAMETER_CALLS = 1


def fetch_from_hub(repo_id: str, settings: HubSettings, *, with_parameters: bool = True) -> HubModel:
    """config.json (and parameter counts) of `repo_id`; raises an InputError that says what failed.

    When the config arrives but the counts do not within their deadline, the answer is partial:
    the config, and a note that the weights come from the architecture formula.
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=settings.endpoint, token=settings.token or None)
    deadline = settings.timeout_s * _CONFIG_CALLS
    try:
        config = _within(deadline, lambda: _config(api, repo_id, settings))
    except _Late:
        raise ModelUnavailableError(
            f"The Hugging Face Hub ({settings.endpoint}) did not answer for {repo_id} within {deadline:g} s; "
            "paste its config.json, or try again later."
        ) from None
    if not with_parameters:
        return HubModel(config=config, parameters=None, notes=[])
    late = settings.timeout_s * _PARAMETER_CALLS
    try:
        parameters, notes = _within(late, lambda: _parameters(api, repo_id, settings))
    except _Late:
        parameters, notes = (
            None,
            [f"The Hub sent no safetensors totals for {repo_id} within {late:g} s; weights use the formula."],
        )
    return HubModel(config=config, parameters=parameters, notes=notes)


def _config(api: HfApi, repo_id: str, settings: HubSettings) -> dict[str, object]:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"the Hugging Face Hub ({settings.endpoint})"
    try:
        path = api.hf_hub_download(
            repo_id, "config.json", cache_dir=settings.cache_dir, etag_timeout=settings.timeout_s
        )
    except GatedRepoError as exc:
        raise _access_error(repo_id, settings) from exc
    except RepositoryNotFoundError as exc:
        if exc.response is not None and exc.response.status_code in (401, 403) and settings.token:
            raise _access_error(repo_id, settings) from exc
        private = "" if settings.token else " (a private repo also needs HF_TOKEN)"
        raise UnknownModelError(repo_id, [], searched=f"the catalog or on {where}{private}") from exc
    except (EntryNotFoundError, RevisionNotFoundError) as exc:
        raise ModelUnavailableError(
            f"The Hugging Face repo {repo_id} has no config.json, so vLLM cannot serve it as is."
        ) from exc
    except LocalEntryNotFoundError as exc:
        # raised when the Hub cannot be reached (timeout, connection refused) and nothing is cached
        raise ModelUnavailableError(
            f"{where} could not be reached for {repo_id}; paste its config.json, or try again later."
        ) from exc
    except Exception as exc:  # HTTP errors and huggingface_hub's transport errors (no public base class)
        raise ModelUnavailableError(
            f"{where} failed for {repo_id} ({type(exc).__name__}); paste its config.json, or try again later."
        ) from exc
    return read_config(Path(path))
