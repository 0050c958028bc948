"""Wall time of `vramdoc diagnose` and `vramdoc estimate` on a small input, against `python -c pass`.

Each command runs as a whole process, as a person runs it; 3 rounds of each, interleaved so a noisy
neighbour slows every side alike, and min/median/max printed with the ratio of medians to the bare
interpreter start measured in the same run. Target (issue 15): diagnose at most 8x a bare interpreter.
Beside the wall time, the CPU time of the process (user + sys): on a shared machine the wall time of
a process waiting for a core moves several-fold between rounds, its CPU time much less.

Commands run with bytecode, as an installed package does (pip compiles it at install time): where
this checkout's environment sets PYTHONDONTWRITEBYTECODE, every import would compile its source
again, so the bench writes bytecode to a scratch folder (PYTHONPYCACHEPREFIX) for every side alike.
The compiled-pack cache is a scratch folder too (VRAMDOC_PACK_CACHE), filled by the warm-up run: the
user cache folder is shared with every other checkout on the machine, and the entries their runs add
prune this one's, so a round would now and then start cold.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL_LOG = REPO / "tests" / "api" / "data" / "kv-capacity-v0.32-qwen.log"
ROUNDS = 3
CLI = [sys.executable, "-m", "service.cli"]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "vramdoc diagnose": [*CLI, "diagnose", str(SMALL_LOG)],
    "vramdoc estimate": [*CLI, "estimate", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", "L4"],
}
TARGETS = {"vramdoc diagnose": 8.0}


def bytecode_env(scratch: str) -> dict[str, str]:
    """This environment, with bytecode and compiled packs written to (and read from) `scratch`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = scratch
    env["VRAMDOC_PACK_CACHE"] = os.path.join(scratch, "packs")
    return env


def wall_time(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawn to exit and the CPU seconds the process used; a command that fails to run
    at all (exit 2) stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1 is "failure diagnosed" / "does not fit" (DESIGN §3.7)
        raise SystemExit(f"{' '.join(command[1:])} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def spread(seconds: list[float], first: int) -> str:
    """min / median / max in milliseconds, the first column `first` wide."""
    low, mid, high = (x * 1000 for x in (min(seconds), statistics.median(seconds), max(seconds)))
    return f"{low:{first}.0f} {mid:7.0f} {high:6.0f}"


def main() -> int:
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="vramdoc-bench-pyc-") as scratch:
        env = bytecode_env(scratch)
        for command in COMMANDS.values():  # warm the page cache, bytecode and pack caches once
            wall_time(command, env)
        for _ in range(ROUNDS):
            for name, command in COMMANDS.items():
                wall, cpu = wall_time(command, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
    bare_wall = statistics.median(walls["python -c pass"])
    bare_cpu = statistics.median(cpus["python -c pass"])
    header = f"{'command':18} {'wall ms min':>11} {'median':>7} {'max':>6} {'x bare':>7}"
    print(f"{header}  {'CPU ms min':>10} {'median':>7} {'max':>6} {'x bare':>7}  target (wall)")
    for name in COMMANDS:
        ratio = statistics.median(walls[name]) / bare_wall
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:g}x ({'met' if ratio <= target else 'not met'})"
        cpu_ratio = statistics.median(cpus[name]) / bare_cpu
        wall, cpu = spread(walls[name], 11), spread(cpus[name], 10)
        print(f"{name:18} {wall} {ratio:7.1f}  {cpu} {cpu_ratio:7.1f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
