"""The resolution chain: catalog → pasted config.json → local path / HF cache → Hub → agent report.

Each step that answers is named in the budget's `sources["model"]`; a step that fails leaves a note and
the next is tried, except where the failure is the answer (a gated repo, a name the Hub does not have).
Resolved models are cached (Redis or process memory in the service, a folder for the CLI) with a TTL,
so a repeated question does not touch the Hub.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from service.budget import find_model, in_catalog
from service.errors import InputError, ModelAccessError, ModelUnavailableError, UnknownModelError
from service.models.gguf import read_tensor_types
from service.models.hub import HubSettings, fetch_from_hub
from service.models.local import cached_repo, hf_cache_dir, looks_like_path, read_folder
from service.packs.catalog import Catalog
from service.schemas import Budget, EstimateRequest, FigureSource, Snapshot

__all__ = [
    "DiskModelCache",
    "ModelCache",
    "ModelResolver",
    "ModelSettings",
    "ResolvedModel",
    "apply",
    "cache_key",
    "cite",
    "with_suggestions",
]

Source = Literal["catalog", "config", "local", "hf_cache", "hub", "agent"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_TRUE = {"1", "true", "yes", "on"}


class ResolvedModel(msgspec.Struct, frozen=True, kw_only=True):
    """A model name turned into what the core sizes, and which step of the chain said so."""

    name: str
    source: Source
    location: str | None = None
    config: dict[str, object] | None = None
    parameters: dict[str, int] | None = None
    notes: list[str] = msgspec.field(default_factory=list)

    def describe(self) -> str:
        """One phrase for the answer's sources: where the config.json and the weight bytes came from."""
        weights = " with its safetensors totals" if self.parameters else ""
        return {
            "catalog": "the catalog",
            "config": "the pasted config.json",
            "local": f"config.json in {self.location}{weights}",
            "hf_cache": f"config.json in the Hugging Face cache ({self.location}){weights}",
            "hub": f"config.json from the Hugging Face Hub ({self.location}){weights}",
            "agent": f"config.json the agent on {self.location} read from disk{weights}",
        }[self.source]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """The chain's settings, from the environment Hugging Face tools already use."""

    endpoint: str = "https://huggingface.co"
    token: str | None = None
    offline: bool = False
    cache_dir: str | None = None
    timeout_s: float = 5.0
    ttl_s: int = 24 * 3600
    local_paths: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, local_paths: bool = True) -> ModelSettings:
        """Read from the environment: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE/HF_HOME."""
        env = os.environ if env is None else env
        cache = hf_cache_dir(env)
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/"),
            token=env.get("HF_TOKEN") or None,
            offline=env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE,
            cache_dir=cache,
            timeout_s=_positive(env.get("VRAMDOC_HUB_TIMEOUT_S"), 5.0),
            ttl_s=int(_positive(env.get("VRAMDOC_MODEL_TTL_S"), 24 * 3600)),
            local_paths=local_paths,
        )

    @property
    def hub(self) -> HubSettings:
        return HubSettings(
            endpoint=self.endpoint, token=self.token, cache_dir=self.cache_dir, timeout_s=self.timeout_s
        )


def _positive(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


class ModelCache(Protocol):
    """Bytes by key with a time to live (the CLI's folder; the service uses its shared state)."""

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: int) -> None: ...


class DiskModelCache:
    """One file per resolved model under a folder, its expiry stored alongside (for the CLI)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        return self.folder / (re.sub(r"[^A-Za-z0-9._-]", "_", key)[:200] + ".json")

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            expires, _, value = path.read_bytes().partition(b"\n")
            if float(expires) > time.time():
                return value
        except (OSError, ValueError):
            return None
        return None

    def set(self, key: str, value: bytes, ttl_s: int) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary = self._path(key).with_suffix(".tmp")
            temporary.write_bytes(f"{time.time() + ttl_s}\n".encode() + value)
            temporary.replace(self._path(key))
        except OSError:
            return  # a cache that cannot be written only costs the next lookup


def cache_key(name: str, settings: ModelSettings) -> str:
    """The key of one resolution: the name and the Hub it was asked of (another Hub may differ)."""
    return f"model:{settings.endpoint}:{name.strip()}"


class ModelResolver:
    """Runs the chain for names the catalog does not know (blocking I/O: the service runs it on a thread)."""

    def __init__(self, settings: ModelSettings, cache: ModelCache | None = None) -> None:
        self.settings = settings
        self.cache = cache

    def resolve(self, name: str, snapshots: Iterable[Snapshot] = ()) -> ResolvedModel:
        """Local path → HF cache → Hub → agent; raises an InputError that says what each step found."""
        name = name.strip()
        key = cache_key(name, self.settings)
        if self.cache is not None:
            held = self.cache.get(key)
            if held is not None:
                try:
                    return msgspec.json.decode(held, type=ResolvedModel)
                except msgspec.DecodeError:
                    pass
        resolved = self.resolve_uncached(name, snapshots)
        if self.cache is not None and resolved.source in ("hub", "hf_cache"):
            self.cache.set(key, msgspec.json.encode(resolved), self.settings.ttl_s)
        return resolved

    def resolve_uncached(self, name: str, snapshots: Iterable[Snapshot] = ()) -> ResolvedModel:
        snapshots = list(snapshots)
        notes: list[str] = []
        if looks_like_path(name) and not _REPO_ID.match(name):
            if not self.settings.local_paths:
                raise ModelUnavailableError(
                    f"{name!r} is a path; the service does not read its own disk. Paste the folder's "
                    "config.json, or name the Hugging Face id."
                )
            local = read_folder(Path(name).expanduser())
            if local is not None:
                return ResolvedModel(
                    name=name,
                    source="local",
                    location=local.folder,
                    config=local.config,
                    parameters=local.parameters,
                    notes=local.notes,
                )
            agent = _from_agents(name, snapshots)
            if agent is not None:
                return agent
            raise ModelUnavailableError(f"{name!r} is not a folder holding a config.json on this machine.")
        if not _REPO_ID.match(name):
            agent = _from_agents(name, snapshots)
            if agent is not None:
                return agent
            raise UnknownModelError(name, [])
        cached = cached_repo(name, self.settings.cache_dir)
        if cached is not None and (cached.parameters is not None or self.settings.offline):
            return ResolvedModel(
                name=name,
                source="hf_cache",
                location=cached.folder,
                config=cached.config,
                parameters=cached.parameters,
                notes=cached.notes,
            )
        if self.settings.offline:
            agent = _from_agents(name, snapshots)
            if agent is not None:
                return agent
            raise UnknownModelError(
                name,
                [],
                searched="the catalog or the Hugging Face cache "
                "(HF_HUB_OFFLINE is set: the Hub was not asked)",
            )
        try:
            hub = fetch_from_hub(name, self.settings.hub)
        except ModelAccessError:
            agent = _from_agents(name, snapshots)
            if agent is not None:
                return agent
            raise
        except InputError as exc:
            agent = _from_agents(name, snapshots)
            if agent is not None:
                return msgspec.structs.replace(agent, notes=[*agent.notes, str(exc)])
            if cached is not None:  # the config is on disk; only the weight totals are missing
                notes.append(f"{exc} The config.json in the Hugging Face cache is used.")
                return ResolvedModel(
                    name=name, source="hf_cache", location=cached.folder, config=cached.config, notes=notes
                )
            raise
        return ResolvedModel(
            name=name,
            source="hub",
            location=self.settings.endpoint,
            config=hub.config,
            parameters=hub.parameters,
            notes=hub.notes,
        )

    def known(self, request: EstimateRequest, catalog: Catalog) -> ResolvedModel | None:
        """The first steps of the chain, which need no I/O: a pasted config.json, or the catalog.

        None when the chain has to look further (the name is not in the catalog).
        """
        if request.config is not None:
            return ResolvedModel(name=request.model or "config.json", source="config")
        if not request.model or not request.model.strip():
            return ResolvedModel(name="", source="catalog")
        if not in_catalog(catalog, request.model):
            return None
        return ResolvedModel(name=request.model, source="catalog")

    def prepare(
        self, request: EstimateRequest, catalog: Catalog, snapshots: Iterable[Snapshot] = ()
    ) -> tuple[EstimateRequest, ResolvedModel]:
        """The request the core can size, and where its model came from (the whole chain, blocking)."""
        request = self._with_gguf_header(request, catalog)
        known = self.known(request, catalog)
        if known is not None:
            return request, known
        assert request.model is not None
        try:
            resolved = self.resolve(request.model, snapshots)
        except UnknownModelError as exc:
            raise with_suggestions(exc, catalog) from exc
        return apply(request, resolved), resolved

    def _with_gguf_header(self, request: EstimateRequest, catalog: Catalog) -> EstimateRequest:
        """A local GGUF file's tensor types as the checkpoint totals (the name says which model it is)."""
        name = (request.model or "").strip()
        if not self.settings.local_paths or request.parameters is not None or not name.endswith(".gguf"):
            return request
        path = Path(name).expanduser()
        if not path.is_file():
            return request
        names = {t.ggml_type: t.id for t in catalog.dtypes.gguf_types}
        return msgspec.structs.replace(request, parameters=read_tensor_types(path, names))


def with_suggestions(exc: UnknownModelError, catalog: Catalog) -> UnknownModelError:
    """The same miss, naming the closest catalog ids as the catalog's own miss does."""
    try:
        find_model(catalog, exc.model)
    except UnknownModelError as missing:
        return UnknownModelError(exc.model, missing.suggestions, searched=exc.searched)
    return exc


def apply(request: EstimateRequest, resolved: ResolvedModel) -> EstimateRequest:
    """The request with the resolved config.json and checkpoint totals (a given `parameters` wins)."""
    if resolved.config is None:
        return request
    parameters = request.parameters if request.parameters is not None else resolved.parameters
    return msgspec.structs.replace(request, config=resolved.config, parameters=parameters)


def _from_agents(name: str, snapshots: Iterable[Snapshot]) -> ResolvedModel | None:
    """The model a GPU host's agent serves under this name (or path), with what it read from disk."""
    wanted = name.strip().rstrip("/")
    for snapshot in snapshots:
        for server in snapshot.vllm:
            names = {server.model, server.model_path}
            if wanted in names and server.model_config is not None:
                return ResolvedModel(
                    name=name,
                    source="agent",
                    location=snapshot.host,
                    config=server.model_config,
                    parameters=server.model_parameters,
                )
    return None


def cite(budget: Budget, resolved: ResolvedModel) -> Budget:
    """The budget with the chain's step in `sources["model"]` and its notes added."""
    kind: Literal["catalog", "given"] = "catalog" if resolved.source == "catalog" else "given"
    sources = {**budget.sources, "model": FigureSource(kind=kind, note=resolved.describe())}
    return msgspec.structs.replace(budget, sources=sources, notes=[*budget.notes, *resolved.notes])
