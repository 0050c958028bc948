"""Wall time of `vramdoc diagnose` and `vramdoc estimate` on a small input, against `python -c pass`.

Each command runs as a whole process, as a person runs it; 3 rounds of each, interleaved so a noisy
neighbour slows every side alike, and min/median/max printed with the ratio of medians to the bare
interpreter start measured in the same run. Target (issue 15): diagnose at most 8x a bare interpreter.

Commands run with bytecode, as an installed package does (pip compiles it at install time): where
this checkout's environment sets PYTHONDONTWRITEBYTECODE, every import would compile its source
again, so the bench writes bytecode to a scratch folder (PYTHONPYCACHEPREFIX) for every side alike.
"""

from __future__ import annotations

import os
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
    """This environment, with bytecode written to (and read from) `scratch`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = scratch
    return env


def wall_time(command: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to exit; a command that fails to run at all (exit 2) stops the bench."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1 is "failure diagnosed" / "does not fit" (DESIGN §3.7)
        raise SystemExit(f"{' '.join(command[1:])} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed


def main() -> int:
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="vramdoc-bench-pyc-") as scratch:
        env = bytecode_env(scratch)
        for command in COMMANDS.values():  # warm the page cache, bytecode and pack caches once
            wall_time(command, env)
        for _ in range(ROUNDS):
            for name, command in COMMANDS.items():
                samples[name].append(wall_time(command, env))
    bare = statistics.median(samples["python -c pass"])
    print(f"{'command':18} {'min ms':>8} {'median':>8} {'max ms':>8} {'x bare':>7}  target")
    for name, times in samples.items():
        ratio = statistics.median(times) / bare
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:g}x ({'met' if ratio <= target else 'not met'})"
        print(
            f"{name:18} {min(times) * 1000:8.0f} {statistics.median(times) * 1000:8.0f} "
            f"{max(times) * 1000:8.0f} {ratio:7.1f}  {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
