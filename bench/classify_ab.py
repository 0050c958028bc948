"""The same diagnosis work timed on several checkouts of this project, alternating, in one run.

Each `--code DIR` is a checkout (a `git worktree add` of the commit to compare); each is imported in
a subprocess of its own (the checkout first on `sys.path`, this interpreter's packages otherwise),
loads its own rule packs, and times `service.core.diagnose` (or `classify`, `--call classify`) on the
same input: a paste of `--lines` lines (bench/classify.py's excerpt of a healthy start-up, serving lines
and a runtime OOM) renumbered per call, every line's timestamp and the request ids changed, so no
process-wide memo of a line's reading answers it. CPU time (`time.process_time`) of each call; a
subprocess reports the best and the median of `--calls` calls after `--warm` untimed ones.

`--instructions` counts instructions instead (valgrind's cachegrind, immune to the machine's load):
each checkout runs once with `--calls` calls and once with none, and the difference is divided by
the calls (slow: about 20 s of start-up under valgrind per run).

Rounds alternate the checkouts (A B C, then B C A, ...), so a change in the machine's load falls on
all of them. Printed: per checkout min/median/max over the rounds of the per-round best and median,
and the ratio of each checkout's median-of-medians (and best-of-bests) to the first one's.

    python bench/classify_ab.py --code ../ab-7ef3b0f --code ../ab-75993f4 --code .
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/service.py would shadow the `service` package when this file runs as a script
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

_STAMP = re.compile(r"\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_REQUEST = re.compile(r"chatcmpl-\d+")

# Run inside each subprocess: the checkout's own code, timed on the pastes the parent wrote.
_CHILD = r"""
import gc, json, statistics, sys, time
root, pastes_file, call = sys.argv[1], sys.argv[2], sys.argv[5]
calls, warm = int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
import service
assert service.__file__.startswith(root), (service.__file__, root)
from service.core import classify, diagnose
from service.packs import load_packs
from service.schemas import DiagnoseRequest
packs = load_packs()
# the collector paused for the calls: when its collections fall depends on everything allocated
# before (the packs, every earlier call), not on the call timed, and one full collection landing in
# one run of --instructions and not the other moved a call's count by tens of millions either way
gc.collect()
gc.freeze()
gc.disable()
action = diagnose if call == "diagnose" else classify
pastes = json.loads(open(pastes_file, encoding="utf-8").read())
requests = [DiagnoseRequest(log=text) for text in pastes]
assert len(requests) >= calls + warm
for request in requests[:warm]:
    action(request, packs)
times, phases = [], set()
for request in requests[warm : warm + calls]:
    start = time.process_time()
    answer = action(request, packs)
    times.append(time.process_time() - start)
    phases.add(answer.phase)
if times:
    print(json.dumps({"best": min(times), "median": statistics.median(times), "phases": sorted(phases)}))
"""


def renumbered(paste: str, call: int) -> str:
    """`paste` with every line's timestamp and request id made unique to this call and line."""
    lines = paste.split("\n")
    out = []
    for number, line in enumerate(lines):
        second = call * len(lines) + number
        day, hour, minute = 1 + second // 86400 % 28, second // 3600 % 24, second // 60 % 60
        stamp = f"{day:02d}-01 {hour:02d}:{minute:02d}:{second % 60:02d}"
        line = _STAMP.sub(stamp, line)
        out.append(_REQUEST.sub(f"chatcmpl-{call:05d}{number:04d}", line))
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", action="append", required=True, help="a checkout to time (repeat)")
    parser.add_argument("--calls", type=int, default=41, help="timed calls per subprocess (>= 31)")
    parser.add_argument("--warm", type=int, default=5, help="untimed calls first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--call", choices=("diagnose", "classify"), default="diagnose")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind)")
    parser.add_argument(
        "--paste",
        choices=("renumbered", "repeated", "dense"),
        default="renumbered",
        help="the renumbered paste, or bench/classify.py's 2 MB repeated OOM or dense log (same each call)",
    )
    args = parser.parse_args()
    roots = [str(Path(code).resolve()) for code in args.code]
    sys.path.insert(0, str(HERE.parent))
    from bench.classify import dense_log, excerpt, repeated_oom

    base = excerpt(args.lines)
    total = args.calls + args.warm
    if args.paste != "renumbered":
        fixed = (repeated_oom if args.paste == "repeated" else dense_log)(2_000_000)
        globals()["renumbered"] = lambda paste, call: fixed
    results: dict[str, list[dict[str, object]]] = {root: [] for root in roots}
    if args.instructions:
        return instructions(roots, base, args)
    with tempfile.TemporaryDirectory() as folder:
        for round_no in range(args.rounds):
            # fresh pastes every round: what a round's subprocess reads, none saw before
            pastes = [renumbered(base, round_no * total + i) for i in range(total)]
            pastes_file = Path(folder) / f"pastes-{round_no}.json"
            pastes_file.write_text(json.dumps(pastes), encoding="utf-8")
            order = roots[round_no % len(roots) :] + roots[: round_no % len(roots)]
            for root in order:
                command = [sys.executable, "-c", _CHILD, root, str(pastes_file)]
                command += [str(args.calls), str(args.warm), args.call]
                done = subprocess.run(command, capture_output=True, text=True, cwd=root, check=False)
                if done.returncode != 0:
                    print(f"{root}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                results[root].append(json.loads(done.stdout.strip().splitlines()[-1]))
    what = f"a {args.lines}-line paste renumbered per call" if args.paste == "renumbered" else args.paste
    print(
        f"{args.call} of {what}; CPU ms per call, "
        f"{args.calls} calls per subprocess, {args.rounds} rounds (min/median/max over rounds)"
    )
    print(f"{'checkout':40} {'best of calls':>26} {'median of calls':>26}  ratio (median, best)")
    first_median = first_best = 0.0
    for index, root in enumerate(roots):
        bests = [float(r["best"]) * 1000 for r in results[root]]  # type: ignore[arg-type]
        medians = [float(r["median"]) * 1000 for r in results[root]]  # type: ignore[arg-type]
        median, best = statistics.median(medians), min(bests)
        if index == 0:
            first_median, first_best = median, best
        phases = sorted({p for r in results[root] for p in r["phases"]})  # type: ignore[attr-defined]
        label = _label(root)
        print(
            f"{label:40} {min(bests):8.3f} {statistics.median(bests):8.3f} {max(bests):8.3f} "
            f"{min(medians):8.3f} {median:8.3f} {max(medians):8.3f}  "
            f"{median / first_median:5.2f}x {best / first_best:5.2f}x  {','.join(phases)}"
        )
    return 0


_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(roots: list[str], base: str, args: argparse.Namespace) -> int:
    """Instructions per call of each checkout: a run with the calls less a run without them."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed; --instructions needs it.", file=sys.stderr)
        return 2
    pastes = [renumbered(base, i) for i in range(args.calls + args.warm)]
    per_call: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        pastes_file = Path(folder) / "pastes.json"
        pastes_file.write_text(json.dumps(pastes), encoding="utf-8")
        for root in roots:
            counts = []
            for calls in (args.calls, 0):
                command = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
                command += [sys.executable, "-c", _CHILD, root, str(pastes_file)]
                command += [str(calls), str(args.warm), args.call]
                env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in every run
                done = subprocess.run(command, capture_output=True, text=True, cwd=root, check=False, env=env)
                found = _REFS.search(done.stderr)
                if done.returncode != 0 or found is None:
                    print(f"{root}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                counts.append(int(found.group(1).replace(",", "")))
            per_call[root] = (counts[0] - counts[1]) / args.calls
    what = f"a {args.lines}-line paste renumbered per call" if args.paste == "renumbered" else args.paste
    print(f"{args.call} of {what}; instructions per call (cachegrind)")
    first = per_call[roots[0]]
    for root in roots:
        print(f"{_label(root):40} {per_call[root] / 1e6:10.2f} M  {per_call[root] / first:5.2f}x")
    return 0


def _label(root: str) -> str:
    head = subprocess.run(
        ["git", "-C", root, "log", "-1", "--format=%h"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return f"{Path(root).name} ({head})" if head else Path(root).name


if __name__ == "__main__":
    sys.exit(main())
