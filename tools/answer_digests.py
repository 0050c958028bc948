"""A digest of every `/v1/diagnose` answer on the corpus, to show a change leaves the answers alone.

Each corpus and healthy log is posted raw to an in-process app (with its case's hints as query
parameters), then again raw (a cache hit) and as JSON (the same cache entry); the three answers
must be the same bytes. Prints `name sha256-of-the-answer` per log and a digest of them all, so two
revisions compare with `diff`. The answer's `rules_version` (a digest of the rule packs, which any
edit of a YAML comment moves) is left out of what is hashed, so the digest moves only when an answer
does:

    python tools/answer_digests.py > after.txt     # on the branch
    python tools/answer_digests.py > before.txt    # on the base; then: diff before.txt after.txt
"""

from __future__ import annotations

import hashlib
import sys

import msgspec
from corpus_files import all_logs, case_hints, sidecar
from litestar.testing import TestClient

from service.api.app import create_app
from service.api.settings import Settings


def _without_rules_version(answer: bytes) -> bytes:
    try:
        decoded = msgspec.json.decode(answer)
    except msgspec.DecodeError:
        return answer
    if isinstance(decoded, dict):
        decoded.pop("rules_version", None)
    return msgspec.json.encode(decoded)


def main() -> int:
    logs = sorted(all_logs())  # by path, as earlier revisions digested them
    total = hashlib.sha256()
    failures = 0
    with TestClient(create_app(Settings(rate_limit=None, cache_ttl_s=300))) as client:
        for log in logs:
            body, hints = log.read_bytes(), case_hints(sidecar(log))
            answers = [
                client.post("/v1/diagnose", params=hints, content=body),
                client.post("/v1/diagnose", params=hints, content=body),
                client.post(
                    "/v1/diagnose",
                    content=msgspec.json.encode({"log": body.decode("utf-8", errors="replace"), **hints}),
                    headers={"content-type": "application/json"},
                ),
            ]
            name = f"{log.parent.name}/{log.name}"
            first = answers[0].content
            if any(a.status_code != answers[0].status_code or a.content != first for a in answers[1:]):
                failures += 1
                print(f"{name}: the cached or JSON answer differs from the computed one", file=sys.stderr)
            digest = hashlib.sha256(
                b"%d\0" % answers[0].status_code + _without_rules_version(first)
            ).hexdigest()
            total.update(f"{name} {digest}\n".encode())
            print(name, digest)
    print(f"all {len(logs)} answers {total.hexdigest()}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
