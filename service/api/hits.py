"""What lets a repeated log request be answered from the cache before its parameters are parsed.

A log request's cache key is canonical (the log's bytes and the other fields as JSON, so a raw log
and the same log as JSON share one entry), which needs the query parameters Litestar has parsed
and validated. A repeat of a request already answered is recognised sooner: by the raw request,
the bytes the answer is a function of (content type, query string, body). `HitIndex` maps each raw
request answered so far to its canonical key, and remembers the query strings that passed
validation, so that the hit path reads a body only where the full path would read it next too
(an invalid query is still refused before the body is read, as before).

Both maps live in the worker's memory only: their keys are Python's own keyed hash (SipHash,
seeded per process), which no other process could reproduce; the answers they point to live where
the response cache keeps them (process memory or Redis). Neither needs an expiry of its own: a
canonical key whose entry expired or was evicted is simply a miss.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from litestar.types import Scope

__all__ = ["HitIndex", "RawKey", "raw_key"]

RawKey = tuple[int, int]

# Query strings that passed validation, per endpoint: few in practice (the hints a client sends);
# past this many the oldest is forgotten and its next request takes the full path once. Each is
# kept as its keyed hash, so a long `command` hint costs no more than a short one.
_VALID_QUERIES = 1024


def raw_key(digest: str, endpoint: str, scope: Scope, body: bytes) -> RawKey:
    """The raw request as a key: every `content-type` header (names compared without case), the
    query string and the body, with the rules digest and the endpoint; and the body's length."""
    content_types = tuple(value for name, value in scope["headers"] if name.lower() == b"content-type")
    return hash((digest, endpoint, content_types, scope["query_string"], body)), len(body)


class _Bounded(OrderedDict[Any, Any]):
    """A dict that forgets its oldest entry past `cap` (first in, first out; reads do not reorder)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.cap:
            self.popitem(last=False)


class HitIndex:
    """Raw request -> canonical cache key, and the query strings each endpoint has accepted."""

    def __init__(self, max_entries: int) -> None:
        self._canonical = _Bounded(max_entries)
        self._valid_queries = _Bounded(_VALID_QUERIES)

    def canonical(self, raw: RawKey) -> str | None:
        """The canonical cache key of a raw request answered before, if it is still remembered."""
        key: str | None = self._canonical.get(raw)
        return key

    def answered(self, raw: RawKey, canonical: str) -> None:
        """`raw` was answered with the cache entry `canonical` (computed and stored, or a hit)."""
        self._canonical.put(raw, canonical)

    def query_valid(self, endpoint: str, query: bytes) -> bool:
        """Whether `endpoint` has accepted this query string (validation depends on nothing else).

        By its hash: two query strings alike in hash (about 2^-64 a pair) would at most let an
        invalid one's body be read before it is refused, as an answered request is never one of it.
        """
        return (endpoint, hash(query), len(query)) in self._valid_queries

    def accept_query(self, endpoint: str, query: bytes) -> None:
        """`endpoint` validated this query string (its handler ran)."""
        key = (endpoint, hash(query), len(query))
        if key not in self._valid_queries:
            self._valid_queries.put(key, True)
