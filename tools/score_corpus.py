"""Score the classifier on the real-world corpus rounds (tests/corpus/REALWORLD.md), case by case.

For every selected case it prints the expected and the classified phase, the asserted facts that came
out exact, and, on a miss, one sentence saying what the classifier got instead. Totals are split by
the case's `carried_by` (what decides the phase: the message `line`, only a traceback `frame`, or
only the person's `words`), because a bare paste and a paste carried by prose are different targets.
Healthy excerpts (tests/diagnosis/healthy_excerpts) count as flagged when they give anything but
`no_failure` or raise an error-severity finding.

Two probes repeat the earlier rounds' robustness checks: the leave-out windows (each excerpt cut to
±k lines around its deciding line: the `decisive_line` key, else the first backticked quote of the
note found in the log, else, for a case classified right, the line its diagnosis says decided
it) and the terminal re-wrap probe (every line hard-wrapped at W columns).

    python tools/score_corpus.py gh4-                       # one round, by name prefix
    python tools/score_corpus.py 'gh[23]-*' --windows 8,3,1 --wrap 80
    python tools/score_corpus.py gh4- --code ../before      # classify with another checkout's code
    python tools/score_corpus.py gh4- --update-known-misses # rewrite the `known_miss` keys

`--update-known-misses` writes `known_miss: "<what the classifier misses>"` into every selected case
(and healthy excerpt sidecar) the run gets wrong and removes it from those it now gets right, so the
xfail marks in tests/diagnosis/test_corpus.py follow the classifier without hiding a miss.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from corpus_files import case_hints, excerpt_folder, failing_folder

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
GROUPS = ("line", "frame", "words", "unset")
KNOWN_MISS = re.compile(r"^known_miss:.*(?:\n(?=[ \t]).*)*\n?", re.MULTILINE)

Classify = Callable[[str, dict[str, str]], "Outcome"]
DECIDED = re.compile(r"Decided by line (\d+)")


@dataclass(frozen=True)
class Case:
    """One excerpt and what a correct diagnosis says about it."""

    name: str
    log: str
    phase: str
    facts: dict[str, Any]
    hints: dict[str, str]
    carried_by: str
    decisive: int | None
    yaml_path: Path | None
    known_miss: str | None


@dataclass(frozen=True)
class Outcome:
    """What the classifier said about one text."""

    phase: str
    facts: dict[str, Any]
    error_finding: bool
    summary: str
    decided_line: int | None


@dataclass
class Result:
    case: Case
    phase: str
    facts_ok: int
    facts_wrong: list[str] = field(default_factory=list)
    reason: str = ""
    decided_line: int | None = None

    @property
    def phase_ok(self) -> bool:
        return self.phase == self.case.phase

    @property
    def ok(self) -> bool:
        return self.phase_ok and not self.facts_wrong


def _classifier(code: Path) -> Classify:
    """The classifier of the checkout at `code` (its own service package and rule packs)."""
    sys.path.insert(0, str(code))
    import msgspec

    import service
    from service.core import classify
    from service.packs import load_packs
    from service.schemas import DiagnoseRequest

    if Path(service.__file__).resolve().parent != code / "service":
        raise SystemExit(f"imported {service.__file__}, not {code}/service: run without an installed copy")
    packs = load_packs(code / "rules")

    def run(log: str, hints: dict[str, str]) -> Outcome:
        diagnosis = classify(DiagnoseRequest(log=log, **hints), packs)  # type: ignore[arg-type]
        decided = DECIDED.search(diagnosis.summary)
        root = [f.line for f in diagnosis.findings if f.phase == diagnosis.phase and f.line]
        return Outcome(
            phase=diagnosis.phase,
            facts=msgspec.to_builtins(diagnosis.facts),
            error_finding=any(f.severity == "error" for f in diagnosis.findings),
            summary=diagnosis.summary,
            decided_line=int(decided.group(1)) if decided else (root[0] if root else None),
        )

    return run


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _decisive(lines: Sequence[str], key: str | None, note: str) -> int | None:
    """Index of the line that decides the phase: the `decisive_line` key, else a quote from the note."""
    candidates = [key] if key else []
    for quote in re.findall(r"`([^`]+)`", note):
        candidates.append(quote.strip(" .…").removesuffix("...").strip())
    for fragment in candidates:
        if not fragment:
            continue
        for probe in (fragment, fragment[:40]):
            for index, line in enumerate(lines):
                if probe in line:
                    return index
    return None


def _load(tests: Path, patterns: Sequence[str]) -> list[Case]:
    def wanted(stem: str) -> bool:
        return any(fnmatch.fnmatch(stem, p if any(c in p for c in "*?[") else p + "*") for p in patterns)

    cases: list[Case] = []
    for log_path in sorted(failing_folder(tests).glob("*.log")):
        if wanted(log_path.stem):
            cases.append(_case(log_path, log_path.with_suffix(".yaml"), healthy=False))
    for log_path in sorted(excerpt_folder(tests).glob("*.log")):
        if wanted(log_path.stem):
            sidecar = log_path.with_suffix(".yaml")
            cases.append(_case(log_path, sidecar if sidecar.exists() else None, healthy=True))
    return cases


def _case(log_path: Path, yaml_path: Path | None, *, healthy: bool) -> Case:
    data: dict[str, Any] = yaml.safe_load(yaml_path.read_text(encoding="utf-8")) if yaml_path else {}
    log = _text(log_path)
    return Case(
        name=log_path.stem,
        log=log,
        phase="no_failure" if healthy else str(data["phase"]),
        facts=dict(data.get("facts") or {}),
        hints=case_hints(data),
        carried_by=str(data.get("carried_by") or "unset"),
        decisive=_decisive(log.splitlines(), data.get("decisive_line"), str(data.get("note", ""))),
        yaml_path=yaml_path,
        known_miss=data.get("known_miss"),
    )


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(expected, int) and isinstance(actual, float) and not isinstance(expected, bool):
        return math.isclose(float(expected), actual, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _same(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_same(expected[k], actual[k]) for k in expected)
    return bool(expected == actual)


def _score(case: Case, log: str, classify: Classify) -> Result:
    outcome = classify(log, case.hints)
    phase, facts, summary = outcome.phase, outcome.facts, outcome.summary
    if case.phase == "no_failure" and phase == "no_failure" and outcome.error_finding:
        phase = "no_failure+error-finding"
    wrong = [
        f"{name} {expected!r} (got {facts.get(name)!r})"
        for name, expected in case.facts.items()
        if not _same(expected, facts.get(name))
    ]
    result = Result(case, phase, len(case.facts) - len(wrong), wrong, decided_line=outcome.decided_line)
    parts = []
    if not result.phase_ok:
        gist = " ".join(summary.split()).split(". ")[0].rstrip(".")
        parts.append(f"gives {phase} instead of {case.phase}" + (f" ({gist})" if gist else ""))
    if wrong:
        parts.append("misses " + "; ".join(wrong))
    result.reason = "; ".join(parts)
    return result


def _deciding(result: Result) -> int | None:
    """The case's own deciding line, else (when the full excerpt is classified right) the line the
    diagnosis says decided it: the earlier rounds' notes rarely quote their line."""
    if result.case.decisive is not None:
        return result.case.decisive
    if result.phase_ok and result.decided_line:
        return result.decided_line - 1
    return None


def _window(log: str, index: int, k: int) -> str:
    lines = log.splitlines()
    return "\n".join(lines[max(0, index - k) : index + k + 1])


def _rewrap(log: str, width: int) -> str:
    """Every line hard-wrapped at `width` columns, mid-word, as a terminal would."""
    out: list[str] = []
    for line in log.splitlines():
        out.extend([line[i : i + width] for i in range(0, len(line), width)] or [""])
    return "\n".join(out)


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else "0/0"


def _report(results: Sequence[Result]) -> list[str]:
    out = []
    failing = [r for r in results if r.case.phase != "no_failure"]
    healthy = [r for r in results if r.case.phase == "no_failure"]
    for r in results:
        mark = "ok  " if r.ok else ("FACT" if r.phase_ok else "MISS")
        facts = f"facts {r.facts_ok}/{len(r.case.facts)}" if r.case.facts else "facts -"
        line = f"{mark} {r.case.name}  [{r.case.carried_by}]  {r.case.phase} -> {r.phase}  {facts}"
        out.append(line + (f"\n       {r.reason}" if r.reason else ""))
    out.append("")
    groups: dict[str, list[Result]] = {g: [r for r in failing if r.case.carried_by == g] for g in GROUPS}
    bare = groups["line"] + groups["frame"]
    out.append(f"phase, all failing cases:      {_pct(sum(r.phase_ok for r in failing), len(failing))}")
    out.append(f"phase, line+frame:             {_pct(sum(r.phase_ok for r in bare), len(bare))}")
    for group in GROUPS:
        if groups[group]:
            members = groups[group]
            score = _pct(sum(r.phase_ok for r in members), len(members))
            out.append(f"phase, carried_by={group + ':':<9}     {score}")
    asserted = sum(len(r.case.facts) for r in failing)
    exact = sum(r.facts_ok for r in failing)
    with_facts = [r for r in failing if r.case.facts]
    out.append(f"facts exact (of asserted):     {_pct(exact, asserted)}")
    out.append(
        f"cases with all facts right:    {_pct(sum(not r.facts_wrong for r in with_facts), len(with_facts))}"
    )
    flagged = [r for r in healthy if r.phase != "no_failure"]
    out.append(f"healthy excerpts flagged:      {len(flagged)}/{len(healthy)}")
    return out


def _probes(
    results: Sequence[Result], classify: Classify, windows: Iterable[int], widths: Iterable[int]
) -> list[str]:
    out = []
    failing = [r for r in results if r.case.phase != "no_failure"]
    located = [(r, index) for r in failing if (index := _deciding(r)) is not None]
    counts = [f"full {sum(r.phase_ok for r, _ in located)}"]
    for k in windows:
        kept = sum(_score(r.case, _window(r.case.log, i, k), classify).phase_ok for r, i in located)
        counts.append(f"±{k} {kept}")
    out.append(
        f"leave-out windows ({len(located)} of {len(failing)} cases with a deciding line): "
        + ", ".join(counts)
    )
    healthy = [r.case for r in results if r.case.phase == "no_failure"]
    for width in widths:
        wrapped = [_score(r.case, _rewrap(r.case.log, width), classify) for r in failing]
        facts = sum(w.facts_ok for w in wrapped)
        asserted = sum(len(w.case.facts) for w in wrapped)
        calm = sum(_score(c, _rewrap(c.log, width), classify).phase == "no_failure" for c in healthy)
        out.append(
            f"re-wrap at {width} columns: phase {_pct(sum(w.phase_ok for w in wrapped), len(wrapped))}, "
            f"facts {_pct(facts, asserted)}, healthy still no_failure {calm}/{len(healthy)}"
        )
    return out


def _table(results: Sequence[Result]) -> list[str]:
    out = ["| case | carried_by | expected | got | what the classifier misses |", "|---|---|---|---|---|"]
    for r in results:
        if not r.ok:
            reason = r.reason.replace("|", "\\|")
            out.append(f"| {r.case.name} | {r.case.carried_by} | {r.case.phase} | {r.phase} | {reason} |")
    return out


def _update_known_misses(results: Sequence[Result]) -> int:
    """Rewrite the `known_miss` key of each case file from this run; returns the files changed."""
    changed = 0
    for r in results:
        path = r.case.yaml_path
        if path is None:
            if not r.ok:
                print(
                    f"note: {r.case.name} is missed but has no sidecar .yaml to record it in", file=sys.stderr
                )
            continue
        text = path.read_text(encoding="utf-8")
        new = KNOWN_MISS.sub("", text)
        if not r.ok:
            new = new.rstrip("\n") + "\nknown_miss: " + json.dumps(r.reason, ensure_ascii=False) + "\n"
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("patterns", nargs="+", help="case-name prefixes or globs (gh4-, 'gh[23]-*')")
    parser.add_argument(
        "--tests", type=Path, default=REPO / "tests", help="the tests/ folder to read cases from"
    )
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose classifier to run")
    parser.add_argument(
        "--windows", type=_ints, default=[8, 3, 1], help="leave-out half-widths (default 8,3,1)"
    )
    parser.add_argument("--wrap", type=_ints, default=[80], help="re-wrap widths (default 80)")
    parser.add_argument("--no-probes", action="store_true", help="skip the leave-out and re-wrap probes")
    parser.add_argument("--table", action="store_true", help="also print the misses as a markdown table")
    parser.add_argument("--update-known-misses", action="store_true", help="rewrite the known_miss keys")
    args = parser.parse_args(argv)
    for folder in (args.tests / "corpus", args.code / "service"):
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder; pass --tests/--code pointing at a vramdoc checkout")
    cases = _load(args.tests, args.patterns)
    if not cases:
        parser.error(f"no case in {args.tests} matches {' '.join(args.patterns)}")
    classify = _classifier(args.code.resolve())
    print(f"classifier: {args.code.resolve()}  cases: {len(cases)}\n")
    results = [_score(c, c.log, classify) for c in cases]
    print("\n".join(_report(results)))
    if not args.no_probes:
        print("\n".join(_probes(results, classify, args.windows, args.wrap)))
    if args.table:
        print("\n" + "\n".join(_table(results)))
    if args.update_known_misses:
        print(f"known_miss rewritten in {_update_known_misses(results)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
