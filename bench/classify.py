"""Classifier throughput against hyperscan and GNU grep over the same eager patterns, on one machine.

The pattern set is the one the scan itself runs over the whole text: the prefilter form of every
eager (non-stage, non-frame) pattern in the packs, case-insensitive ones included. grep gets the
same set translated to POSIX ERE (a `(?i)` pattern has its letters spelled as `[xX]`, since one grep
process takes one case mode); hyperscan compiles the RE2 forms directly. A pattern one side cannot
take is counted and printed, never silently dropped.

Rows, each min/median/max of 3 rounds and ratios of medians from the same run:
- in-process throughput: `service.core.classify` (the whole diagnosis) and hyperscan's block scan;
- whole processes: `vramdoc diagnose --json FILE`, `LC_ALL=C grep -E -c -f`, and a Python process
  that compiles the hyperscan database and scans the file;
- logs: a sparse synthetic log (serving noise, one failure) and a dense log (tests/corpus/*.log
  concatenated and repeated), each at 2 MB and 20 MB;
- a 2 MB paste of one repeated OOM line against a small (300-line) paste, and the dense 2 MB time;
- redaction alone (`service.redact.redact`) on each 2 MB log and on the repeated-OOM paste;
- `vramdoc diagnose` as a process on the 300-line paste against `python -c pass`.
Targets (issue 15): dense 2 MB <= 100 ms in-process; repeated-OOM 2 MB <= 2x a small paste;
classify >= 0.5x hyperscan on the dense log. hyperscan is optional (`--group bench`).
BENCH_CLASSIFY_MB=2 runs the 2 MB logs only (default 2,20).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench/service.py would shadow the `service` package when this file runs as a script
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from service.core import classify  # noqa: E402
from service.packs import RulePacks, default_rules_dir, load_packs  # noqa: E402
from service.redact import redact  # noqa: E402
from service.schemas import DiagnoseRequest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
ROUNDS = 3
MB = 1_000_000
CASELESS = "(?i)"

HEALTHY_LINES = (
    "(APIServer pid=1) INFO {d} [loggers.py:123] Engine 000: Avg prompt throughput: {a}.3 tokens/s, "
    "Avg generation throughput: {b}.1 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "{u}.5%, Prefix cache hit rate: 41.2%",
    '(APIServer pid=1) INFO:     10.0.0.{r}:5{a} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=1) INFO {d} [logger.py:39] Received request chatcmpl-{a}{b}: prompt: '<|im_start|>user "
    "Summarise the following text', params: SamplingParams(n=1, temperature=0.7, max_tokens={b})",
    "(APIServer pid=1) INFO {d} [async_llm.py:261] Added request chatcmpl-{a}{b}.",
    "(EngineCore_DP0 pid=210) DEBUG {d} [core.py:812] EngineCore loop active, {r} requests in flight",
    "(APIServer pid=1) INFO {d} [metrics.py:88] Finished request chatcmpl-{a}{b} in {u}.{r} s",
)
STARTUP = """\
INFO {d} [__init__.py:239] Automatically detected platform cuda.
(APIServer pid=1) INFO {d} [api_server.py:1043] vLLM API server version 0.10.1
(APIServer pid=1) INFO {d} [utils.py:326] non-default args: {{'model': 'Qwen/Qwen2.5-7B-Instruct', \
'max_model_len': 32768, 'gpu_memory_utilization': 0.95}}
(EngineCore_DP0 pid=210) INFO {d} [core.py:71] Initializing a V1 LLM engine (v0.10.1) with config: \
model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, \
pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
(EngineCore_DP0 pid=210) INFO {d} [gpu_model_runner.py:1] Starting to load model Qwen/Qwen2.5-7B-Instruct...
(EngineCore_DP0 pid=210) INFO {d} [default_loader.py:1] Loading weights took 3.21 seconds
(EngineCore_DP0 pid=210) INFO {d} [gpu_model_runner.py:1] Model loading took 14.2488 GiB and 4.102 seconds
(EngineCore_DP0 pid=210) INFO {d} [gpu_worker.py:2] Available KV cache memory: 57.69 GiB
(EngineCore_DP0 pid=210) INFO {d} [kv_cache_utils.py:3] GPU KV cache size: 1,080,320 tokens
(EngineCore_DP0 pid=210) INFO {d} [kv_cache_utils.py:4] Maximum concurrency for 32,768 tokens per request: 32.97x
(EngineCore_DP0 pid=210) INFO {d} [gpu_model_runner.py:5] Graph capturing finished in 12 secs, took 0.54 GiB
(APIServer pid=1) INFO:     Application startup complete.
"""  # noqa: E501
FAILURE = """\
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700]   File "/usr/lib/vllm/v1/engine/core.py", line 1170, in run_busy_loop
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700]     self._process_engine_step()
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700]   File "/usr/lib/vllm/v1/worker/gpu_model_runner.py", line 9, in execute_model
(EngineCore_DP0 pid=210) ERROR {d} [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate \
2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this \
process has 78.12 GiB memory in use. Of the allocated memory 75.2 GiB is allocated by PyTorch, and 1.4 GiB is \
reserved by PyTorch but unallocated.
(APIServer pid=1) ERROR {d} [serving.py:1173] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered \
an issue. See stack trace (above) for the root cause.
"""  # noqa: E501


def synthetic_log(size: int, seed: int = 7) -> str:
    """A healthy startup, then serving noise up to `size` bytes, then a runtime OOM."""
    rng = random.Random(seed)
    stamp = "05-12 10:11:12"
    parts = [STARTUP.format(d=stamp)]
    total = len(parts[0])
    while total < size:
        template = rng.choice(HEALTHY_LINES)
        line = template.format(
            d=stamp,
            a=rng.randint(10, 99),
            b=rng.randint(100, 999),
            r=rng.randint(1, 64),
            u=rng.randint(1, 99),
        )
        parts.append(line + "\n")
        total += len(line) + 1
    parts.append(FAILURE.format(d=stamp))
    return "".join(parts)


def excerpt(lines: int = 300) -> str:
    """A typical pasted excerpt: the startup, some serving lines, the failure with its traceback."""
    text = synthetic_log(200_000, seed=3).splitlines()
    return "\n".join(text[:14] + text[-(lines - 14) :])


def dense_log(size: int) -> str:
    """Real log lines: every corpus log concatenated, repeated to `size` bytes (cut at a line end)."""
    corpus = "".join(
        path.read_text(encoding="utf-8", errors="replace") for path in sorted(CORPUS.glob("*.log"))
    )
    text = corpus * (size // len(corpus) + 1)
    return text[: text.rfind("\n", 0, size) + 1]


def repeated_oom(size: int) -> str:
    """One OOM line pasted over and over (every rank, every retry) up to `size` bytes."""
    line = FAILURE.splitlines()[5].format(d="05-12 10:11:12") + "\n"
    return line * (size // len(line))


_CLASS = {"d": "0-9", "w": "A-Za-z0-9_", "s": "[:space:]"}


def _both_cases(inner: str) -> str:
    """A bracket body that also holds the other case of each letter and letter range."""
    ranges = re.findall(r"[A-Za-z]-[A-Za-z]", inner)
    singles = re.sub(r"[A-Za-z]-[A-Za-z]", "", inner)
    extra = [r.swapcase() for r in ranges] + [c.swapcase() for c in singles if c.isascii() and c.isalpha()]
    return inner + "".join(e for e in extra if e not in inner)


def _bracket(body: str, caseless: bool) -> str:
    """Translate the inside of one RE2 bracket expression to POSIX."""
    out, hyphen, bracket, i = [], False, False, 0
    negate = body.startswith("^")
    if negate:
        body = body[1:]
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in _CLASS:
                out.append(_CLASS[nxt])
            elif nxt == "-":
                hyphen = True
            elif nxt == "]":
                bracket = True  # POSIX takes a literal "]" only first
            else:
                out.append(nxt)
            i += 2
            continue
        out.append(char)
        i += 1
    inner = "".join(out)
    if caseless and "[:" not in inner:
        inner = _both_cases(inner)
    if bracket:
        inner = "]" + inner
    return "[" + ("^" if negate else "") + inner + ("-" if hyphen else "") + "]"


_ESCAPES = {"d": "[0-9]", "w": "[A-Za-z0-9_]", "s": "[[:space:]]", "S": "[^[:space:]]", "b": "\\b"}


def to_ere(pattern: str) -> str | None:
    """A GNU grep -E form of one RE2 pattern, or None when it has no faithful translation."""
    caseless = pattern.startswith(CASELESS)
    text = pattern.removeprefix(CASELESS).removeprefix("^")
    text = re.sub(r"\(\?P<\w+>", "(", text).replace("(?:", "(")
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "[":
            end = i + 2 if text[i + 1 : i + 2] in ("]", "^") else i + 1
            while end < len(text) and text[end] != "]":
                end += 2 if text[end] == "\\" else 1  # an escaped "]" does not close it
            if end >= len(text):
                return None
            out.append(_bracket(text[i + 1 : end], caseless))
            i = end + 1
            continue
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
            elif nxt in ".()[]{}*+?|^$\\":
                out.append("\\" + nxt)
            elif nxt in "/\"'-":
                out.append(nxt)
            else:
                return None
            i += 2
            continue
        if caseless and char.isascii() and char.isalpha():
            # a letter in a {m,n} count cannot occur, so every letter here is a literal
            out.append(f"[{char.lower()}{char.upper()}]")
        else:
            out.append(char)
        i += 1
    result = "".join(out)
    return None if "(?" in result else result


def eager_patterns(packs: RulePacks) -> list[str]:
    """The patterns the scan runs over the whole text: the prefilter form of every eager pattern."""
    return [pattern for compiled in packs.signatures.eager.rules for pattern in compiled.prefilter]


def hyperscan_database(patterns: list[str]) -> tuple[Any, list[str]]:
    """A block-mode database of every pattern hyperscan accepts, and the ones it rejected."""
    import hyperscan

    accepted, rejected = [], []
    for pattern in patterns:
        flags = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        body = pattern.removeprefix(CASELESS)
        if body != pattern:
            flags |= hyperscan.HS_FLAG_CASELESS
        try:
            probe = hyperscan.Database()
            probe.compile(expressions=[body.encode()], flags=[flags])
        except hyperscan.error:
            rejected.append(pattern)
            continue
        accepted.append((body.encode(), flags))
    database = hyperscan.Database()
    database.compile(
        expressions=[a[0] for a in accepted], ids=list(range(len(accepted))), flags=[a[1] for a in accepted]
    )
    return database, rejected


def hyperscan_count(database: Any, data: bytes) -> int:
    """Match events over the whole buffer (every pattern, every end offset hyperscan reports)."""
    events = [0]

    def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
        events[0] += 1

    database.scan(data, match_event_handler=on_match)
    return events[0]


def rounds(action: Callable[[], object]) -> list[float]:
    """Seconds of each of ROUNDS runs of `action`, after one untimed warm-up run."""
    action()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def spread(times: list[float]) -> str:
    return f"{min(times) * 1000:8.1f} {statistics.median(times) * 1000:8.1f} {max(times) * 1000:8.1f}"


def row(label: str, times: list[float], size: int, peer: float | None = None) -> float:
    """Print one row (ms min/median/max, MB/s of the median) and return the median."""
    median = statistics.median(times)
    ratio = f"{peer / median:7.2f}x" if peer else ""
    print(f"  {label:34} {spread(times)} {size / MB / median:9.1f} {ratio}")
    return median


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


def scan_process(pattern_file: str, log_file: str) -> int:
    """The hyperscan side as a whole process: compile the database, scan the file, print events."""
    database, _ = hyperscan_database(json.loads(Path(pattern_file).read_text()))
    print(hyperscan_count(database, Path(log_file).read_bytes()))
    return 0


LOGS: dict[str, Callable[[int], str]] = {"sparse": synthetic_log, "dense": dense_log}


def main() -> int:
    grep = shutil.which("grep")
    if grep is None:
        print("GNU grep is not installed; install it to compare throughput.", file=sys.stderr)
        return 2
    packs = load_packs()
    patterns = eager_patterns(packs)
    caseless = sum(p.startswith(CASELESS) for p in patterns)
    translated = [to_ere(p) for p in patterns]
    ere = [t for t in translated if t is not None]
    print(f"eager patterns: {len(patterns)} ({caseless} case-insensitive); grep -E takes {len(ere)}", end="")
    print(f", {len(patterns) - len(ere)} without a faithful ERE form")
    try:
        database, rejected = hyperscan_database(patterns)
        print(f"hyperscan takes {len(patterns) - len(rejected)}; rejected: {rejected or 'none'}")
    except ImportError:
        database = None
        print("hyperscan is not installed (`pip install --group bench -e .`); its rows are skipped.")
    sizes = [int(size) for size in os.environ.get("BENCH_CLASSIFY_MB", "2,20").split(",")]
    logs = {f"{kind} {size} MB": build(size * MB) for kind, build in LOGS.items() for size in sizes}
    env = {**os.environ, "LC_ALL": "C"}
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        pattern_file = Path(folder) / "patterns.txt"
        pattern_file.write_text("\n".join(ere) + "\n", encoding="utf-8")
        pattern_json = Path(folder) / "patterns.json"
        pattern_json.write_text(json.dumps(patterns), encoding="utf-8")
        check = subprocess.run([grep, "-E", "-c", "-f", str(pattern_file), "/dev/null"], capture_output=True)
        if check.returncode == 2:
            print(f"grep rejected the exported patterns: {check.stderr.decode().strip()}", file=sys.stderr)
            return 2
        print(f"{'':36} {'min ms':>8} {'median':>8} {'max ms':>8} {'MB/s':>9} {'x vramdoc':>9}")
        for label, text in logs.items():
            data = text.encode()
            log_file = Path(folder) / (label.replace(" ", "-") + ".log")
            log_file.write_bytes(data)
            request = DiagnoseRequest(log=text)
            print(f"{label} ({len(data) / MB:.1f} MB, phase {classify(request, packs).phase}):")
            ours = row("in-process classify", rounds(lambda r=request: classify(r, packs)), len(data))
            medians[label] = ours
            if database is not None:
                theirs = row(
                    "in-process hyperscan",
                    rounds(lambda d=data: hyperscan_count(database, d)),
                    len(data),
                    ours,
                )
                medians[f"{label} hyperscan"] = theirs
            cli = [sys.executable, "-m", "service.cli", "diagnose", "--json", str(log_file)]
            process = row(
                "process vramdoc diagnose",
                rounds(lambda c=cli: subprocess.run(c, cwd=REPO, capture_output=True, check=False)),
                len(data),
            )
            grep_cmd = [grep, "-E", "-c", "-f", str(pattern_file), str(log_file)]
            row(
                "process LC_ALL=C grep -E -c -f",
                rounds(lambda c=grep_cmd: subprocess.run(c, capture_output=True, check=False, env=env)),
                len(data),
                process,
            )
            if database is not None:
                hs_cmd = [sys.executable, __file__, "--scan-process", str(pattern_json), str(log_file)]
                row(
                    "process hyperscan (compile+scan)",
                    rounds(lambda c=hs_cmd: subprocess.run(c, cwd=REPO, capture_output=True, check=True)),
                    len(data),
                    process,
                )
    small = DiagnoseRequest(log=excerpt())
    repeated = DiagnoseRequest(log=repeated_oom(2 * MB))
    print("pastes:")
    small_median = row("small paste (300 lines)", rounds(lambda: classify(small, packs)), len(small.log))
    repeated_median = row(
        "one OOM line repeated to 2 MB", rounds(lambda: classify(repeated, packs)), len(repeated.log)
    )
    ratio = repeated_median / small_median
    print("redaction alone (service.redact.redact):")
    for label, text in [
        *((k, v) for k, v in logs.items() if k.endswith(" 2 MB")),
        ("repeated OOM 2 MB", repeated.log),
    ]:
        row(f"redact {label}", rounds(lambda t=text: redact(t)), len(text))
    cli_ratio = diagnose_process_cost(small.log)
    dense = medians["dense 2 MB"] * 1000
    print("targets (issue 15):")
    print(f"  dense 2 MB in-process: {dense:.0f} ms (<= 100 ms: {verdict(dense <= 100)})")
    print(f"  repeated-OOM 2 MB / small paste: {ratio:.1f}x (<= 2x: {verdict(ratio <= 2)})")
    if database is not None:
        for size in (f"{size} MB" for size in sizes):
            share = medians[f"dense {size} hyperscan"] / medians[f"dense {size}"]
            print(
                f"  classify / hyperscan throughput, dense {size}: {share:.3f}x "
                f"(>= 0.5x: {verdict(share >= 0.5)})"
            )
    print(f"  vramdoc diagnose (300 lines) / python -c pass: {cli_ratio:.1f}x")
    generated_data_cost(small)
    return 0


def diagnose_process_cost(log: str) -> float:
    """`vramdoc diagnose FILE` on a typical paste as a whole process, against a bare interpreter."""
    print("process on a 300-line paste:")
    with tempfile.TemporaryDirectory() as folder:
        log_file = Path(folder) / "paste.log"
        log_file.write_text(log, encoding="utf-8")
        bare = [sys.executable, "-c", "pass"]
        cli = [sys.executable, "-m", "service.cli", "diagnose", str(log_file)]
        peer = row("python -c pass", rounds(lambda: subprocess.run(bare, capture_output=True)), len(log))
        ours = row(
            "vramdoc diagnose",
            rounds(lambda: subprocess.run(cli, cwd=REPO, capture_output=True, check=False)),
            len(log),
            peer,
        )
    return ours / peer


def _rounds(action: object, repeat: int) -> list[float]:
    """Per-call seconds of `action`, min/median/max material: 3 rounds of `repeat` calls."""
    out = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            action()  # type: ignore[operator]
        out.append((time.perf_counter() - start) / repeat)
    return sorted(out)


def generated_data_cost(request: DiagnoseRequest) -> None:
    """What the generated data (rules/frames/, rules/inventory/, rules/fragments/) costs: the same
    excerpt and the same pack load with and without it, measured in this run."""
    root = default_rules_dir()
    with tempfile.TemporaryDirectory() as folder:
        bare = Path(folder) / "rules"
        shutil.copytree(root, bare, ignore=shutil.ignore_patterns("frames", "inventory", "fragments"))
        variants = {"without generated data": bare, "with generated data": root}
        loads = {name: _rounds(lambda r=path: load_packs(r), 3) for name, path in variants.items()}
        packs = {name: load_packs(path) for name, path in variants.items()}
        runs = {name: _rounds(lambda p=p: classify(request, p), 200) for name, p in packs.items()}
    for name in variants:
        load, run = loads[name], runs[name]
        print(
            f"{name:24}: classify min/median/max "
            f"{run[0] * 1000:.3f}/{run[1] * 1000:.3f}/{run[2] * 1000:.3f} ms; "
            f"load_packs {load[0] * 1000:.0f}/{load[1] * 1000:.0f}/{load[2] * 1000:.0f} ms"
        )
    before, after = runs["without generated data"][1], runs["with generated data"][1]
    load_before, load_after = loads["without generated data"][1], loads["with generated data"][1]
    ratio_load = load_after / load_before
    print(f"ratio with/without (medians): classify {after / before:.2f}, load_packs {ratio_load:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scan-process"]:
        sys.exit(scan_process(sys.argv[2], sys.argv[3]))
    sys.exit(main())
