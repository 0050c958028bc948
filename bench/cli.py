"""Wall time of `vramdoc diagnose` and `vramdoc estimate` on a small input, against `python -c pass`.

Each command runs as a whole process, as a person runs it; 3 rounds of each, interleaved so a noisy
neighbour slows every side alike, and min/median/max printed with the ratio of medians to the bare
interpreter start measured in the same run. Target (issue 15): diagnose at most 8x a bare interpreter.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
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


def wall_time(command: list[str]) -> float:
    """Seconds from spawn to exit; a command that fails to run at all (exit 2) stops the bench."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1 is "failure diagnosed" / "does not fit" (DESIGN §3.7)
        raise SystemExit(f"{' '.join(command[1:])} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed


def main() -> int:
    for command in COMMANDS.values():  # warm the page cache and bytecode caches once
        wall_time(command)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(ROUNDS):
        for name, command in COMMANDS.items():
            samples[name].append(wall_time(command))
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
