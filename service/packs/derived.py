"""Values derived from a loaded pack, built once per pack object and kept while it lives.

A pack is immutable and lives as long as the process (a service holds one; tests load a few), so what
a function builds from it (a combined pattern, an index) can be kept beside it instead of rebuilt per
request. msgspec Structs take no weak references: the pack is keyed by identity and kept with its value,
so an id a collected pack left is never taken for another pack's, and the table starts over when it
holds `bound` packs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ByIdentity", "per_pack"]

Owner = TypeVar("Owner")
Value = TypeVar("Value")


class _PerPack(Generic[Owner, Value]):
    def __init__(self, build: Callable[[Owner], Value], bound: int) -> None:
        self._build = build
        self._bound = bound
        self._built: dict[int, tuple[Owner, Value]] = {}
        functools.update_wrapper(self, build)

    def __call__(self, owner: Owner) -> Value:
        known = self._built.get(id(owner))
        if known is not None and known[0] is owner:
            return known[1]
        value = self._build(owner)
        if len(self._built) >= self._bound:
            self._built = {}  # replaced, not cleared: a concurrent reader keeps the table it holds
        self._built[id(owner)] = (owner, value)
        return value


def per_pack(bound: int = 8) -> Callable[[Callable[[Owner], Value]], Callable[[Owner], Value]]:
    """Decorate `build(pack)` so that each pack object is built from once."""

    def wrap(build: Callable[[Owner], Value]) -> Callable[[Owner], Value]:
        return _PerPack(build, bound)

    return wrap


class ByIdentity(Generic[Value]):
    """Values derived from several pack objects (a model spec, the engine facts) and plain hashable
    parameters, for functions the budget calls with the same catalog entries on every request.

    Keyed like `per_pack`: by the objects' identity, each kept with its value and compared by `is`,
    so an object built for one request (a config.json read from disk) is a miss, never another's
    hit; the table starts over when it holds `bound` values.
    """

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._values: dict[tuple[tuple[int, ...], Hashable], tuple[tuple[object, ...], Value]] = {}

    def get(self, owners: tuple[object, ...], params: Hashable) -> Value | None:
        known = self._values.get((tuple(map(id, owners)), params))
        if known is None or any(a is not b for a, b in zip(known[0], owners, strict=True)):
            return None
        return known[1]

    def put(self, owners: tuple[object, ...], params: Hashable, value: Value) -> None:
        if len(self._values) >= self._bound:
            self._values = {}  # replaced, not cleared: a concurrent reader keeps the table it holds
        self._values[tuple(map(id, owners)), params] = (owners, value)
