"""The classifier's whole output on every corpus log, healthy log and healthy excerpt, to compare two
versions of the code: a structural change (the scan, the prose reader, memoisation) must leave every
answer identical.

Each log is classified as it is, pasted twice in a row, and with every line repeated three times (so
the paths that read a repeated line once are exercised); the corpus cases take their hints. The
logs bench/classify.py times (sparse and dense 2 MB, one OOM line repeated, a 300-line paste) are
classified too. The snapshot is a JSON object {case: the Diagnosis as JSON}; `--compare` prints every
case that differs.

    python tools/diagnosis_snapshot.py --write before.json     # on the old code
    python tools/diagnosis_snapshot.py --compare before.json   # on the new code: exit 1 on a change
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
from corpus_files import all_logs, case_hints, sidecar

REPO = Path(__file__).resolve().parent.parent


def _variants(text: str) -> Iterator[tuple[str, str]]:
    yield "as is", text
    yield "twice", text + ("" if text.endswith("\n") else "\n") + text
    yield "lines x3", "\n".join(line for line in text.split("\n") for _ in range(3))


def _bench_logs() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("bench_classify", REPO / "bench" / "classify.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    size = 2 * bench.MB
    return {
        "sparse 2 MB": bench.synthetic_log(size),
        "dense 2 MB": bench.dense_log(size),
        "repeated OOM 2 MB": bench.repeated_oom(size),
        "300-line paste": bench.excerpt(),
    }


def snapshot() -> dict[str, str]:
    """{'<folder>/<log> <variant>': the Diagnosis as JSON} for every log."""
    sys.path.insert(0, str(REPO))
    from service.core import classify
    from service.packs import load_packs
    from service.schemas import DiagnoseRequest

    packs = load_packs()
    out: dict[str, str] = {}
    for log in all_logs():
        text = log.read_text(encoding="utf-8", errors="replace")
        hints = case_hints(sidecar(log))
        for variant, body in _variants(text):
            diagnosis = classify(DiagnoseRequest(log=body, **hints), packs)  # type: ignore[arg-type]
            out[f"{log.parent.name}/{log.name} {variant}"] = _answer(diagnosis)
    for name, body in _bench_logs().items():
        out[f"bench {name}"] = _answer(classify(DiagnoseRequest(log=body), packs))
    return out


def _answer(diagnosis: object) -> str:
    """The Diagnosis as JSON without `rules_version`: that is the rules' digest, so a rule edit that
    leaves every answer the same would otherwise change every entry."""
    answer = msgspec.to_builtins(diagnosis)
    answer.pop("rules_version", None)
    return json.dumps(answer, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="write the snapshot to this file")
    action.add_argument("--compare", type=Path, help="compare with a snapshot written before")
    args = parser.parse_args(argv)
    now = snapshot()
    if args.write:
        args.write.write_text(json.dumps(now, indent=0, sort_keys=True), encoding="utf-8")
        print(f"{len(now)} diagnoses written to {args.write}")
        return 0
    before = json.loads(args.compare.read_text(encoding="utf-8"))
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for key in changed:
        print(f"changed: {key}")
        print(f"  before: {str(before.get(key))[:600]}")
        print(f"  now:    {str(now.get(key))[:600]}")
    print(f"{len(now)} diagnoses, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
