"""`vramdoc rules list|test`: what the rule packs hold, and whether every rule's examples hold."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import msgspec

from service.core import load_rules
from service.diagnosis.examples import check_examples
from service.errors import PackError
from service.fixes.examples import run_recipe_examples
from service.packs import RulePacks

__all__ = ["listing", "run"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class RuleRow(msgspec.Struct, frozen=True):
    id: str
    pack: str
    file: str
    kind: str
    phase: str | None
    severity: str
    status: str
    examples: int


class Listing(msgspec.Struct, frozen=True):
    digest: str
    packs: dict[str, int]
    rules: list[RuleRow]


def listing(packs: RulePacks) -> Listing:
    """Packs with their rule counts, every rule, and the digest."""
    rows = [
        RuleRow(
            id=c.rule.id,
            pack=c.pack,
            file=c.file,
            kind=c.rule.kind,
            phase=c.rule.phase,
            severity=c.rule.severity,
            status=c.rule.status,
            examples=len(c.rule.examples.match) + len(c.rule.examples.no_match),
        )
        for c in packs.signatures.rules
    ]
    return Listing(digest=packs.digest, packs=dict(Counter(r.pack for r in rows)), rules=rows)


def _print_listing(data: Listing) -> None:
    for pack, count in data.packs.items():
        print(f"pack {pack}: {count} rules")
        for row in (r for r in data.rules if r.pack == pack):
            phase = row.phase or "-"
            print(f"  {row.id:40} {row.kind:9} {phase:22} {row.severity:7} {row.examples} examples")
    print(f"{len(data.rules)} rules in {len(data.packs)} packs; digest {data.digest}")


def run(args: argparse.Namespace) -> int:
    """Handler of `vramdoc rules`."""
    try:
        packs = load_rules(Path(args.rules_dir) if args.rules_dir else None)
    except PackError as exc:
        print(f"vramdoc: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "list":
        data = listing(packs)
        if args.json:
            sys.stdout.buffer.write(msgspec.json.encode(data) + b"\n")
        else:
            _print_listing(data)
        return EXIT_OK
    fix_results = run_recipe_examples(packs.fixes)
    failures = [*check_examples(packs), *(r.describe() for r in fix_results if not r.passed)]
    total = sum(len(c.rule.examples.match) + len(c.rule.examples.no_match) for c in packs.signatures.rules)
    total += len(fix_results)
    if args.json:
        payload = {"examples": total, "failures": [str(f) for f in failures], "digest": packs.digest}
        sys.stdout.buffer.write(msgspec.json.encode(payload) + b"\n")
    else:
        for failure in failures:
            print(f"FAIL {failure}")
        print(f"{total - len(failures)}/{total} rule examples hold; {len(failures)} failed")
    return EXIT_FAILURE if failures else EXIT_OK
