"""Classifier throughput against GNU grep over the same patterns, and latency on a typical excerpt.

Prints, in one run: MB/s of a full `classify` on 1 MB and 20 MB synthetic vLLM logs; MB/s of
`grep -E -c -f patterns` over the same files, with the patterns exported from the packs (RE2 syntax
grep cannot take is translated, and any pattern that still cannot be is skipped and counted); the
ratio of the two; and the median time to classify a typical 300-line excerpt.
Targets (issue 2): at least 1/3 of grep's throughput on 20 MB; under 2 ms median per excerpt.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/service.py would shadow the `service` package when this file runs as a script
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from service.core import classify  # noqa: E402
from service.packs import RulePacks, default_rules_dir, load_packs  # noqa: E402
from service.schemas import DiagnoseRequest  # noqa: E402

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


_CLASS = {"d": "0-9", "w": "A-Za-z0-9_", "s": "[:space:]"}


def _bracket(body: str) -> str:
    """Translate the inside of one RE2 bracket expression to POSIX."""
    out, hyphen, i = [], False, 0
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
            else:
                out.append(nxt)
            i += 2
            continue
        out.append(char)
        i += 1
    inner = "".join(out)
    if "]" in inner:
        inner = "]" + inner.replace("]", "")
    return "[" + ("^" if negate else "") + inner + ("-" if hyphen else "") + "]"


def to_ere(pattern: str) -> str | None:
    """A GNU grep -E form of one RE2 pattern, or None when it has no faithful translation."""
    text = pattern.removeprefix("^")
    text = re.sub(r"\(\?P<\w+>", "(", text).replace("(?:", "(")
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "[":
            end = text.find("]", i + 2 if text[i + 1 : i + 2] in ("]", "^") else i + 1)
            if end < 0:
                return None
            out.append(_bracket(text[i + 1 : end]))
            i = end + 1
            continue
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "d":
                out.append("[0-9]")
            elif nxt == "w":
                out.append("[A-Za-z0-9_]")
            elif nxt == "s":
                out.append("[[:space:]]")
            elif nxt == "S":
                out.append("[^[:space:]]")
            elif nxt == "b":
                out.append("\\b")
            elif nxt in ".()[]{}*+?|^$\\/\"'-":
                out.append("\\" + nxt if nxt not in "/\"'-" else nxt)
            else:
                return None
            i += 2
            continue
        out.append(char)
        i += 1
    result = "".join(out)
    return None if "(?" in result else result


def export_patterns(packs: RulePacks) -> tuple[list[str], int]:
    """(grep-compatible patterns, number skipped) for every active rule pattern."""
    exported, skipped = [], 0
    for compiled in packs.signatures.rules:
        for pattern in compiled.rule.patterns:
            ere = to_ere(pattern)
            if ere is None:
                skipped += 1
            else:
                exported.append(ere)
    return exported, skipped


def _best_of(runs: int, action: object) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    grep = shutil.which("grep")
    if grep is None:
        print("GNU grep is not installed; install it to compare throughput.", file=sys.stderr)
        return 2
    packs = load_packs()
    patterns, skipped = export_patterns(packs)
    total_patterns = len(patterns) + skipped
    print(f"patterns: {total_patterns} in the packs, {len(patterns)} exported to grep -E, {skipped} skipped")
    with tempfile.TemporaryDirectory() as folder:
        pattern_file = Path(folder) / "patterns.txt"
        pattern_file.write_text("\n".join(patterns) + "\n", encoding="utf-8")
        check = subprocess.run([grep, "-E", "-c", "-f", str(pattern_file), "/dev/null"], capture_output=True)
        if check.returncode == 2:
            print(f"grep rejected the exported patterns: {check.stderr.decode().strip()}", file=sys.stderr)
            return 2
        for label, size in (("1 MB", 1_000_000), ("20 MB", 20_000_000)):
            text = synthetic_log(size)
            log_file = Path(folder) / f"log-{size}.log"
            log_file.write_text(text, encoding="utf-8")
            mb = len(text.encode()) / 1e6
            request = DiagnoseRequest(log=text)
            ours = _best_of(3, lambda request=request: classify(request, packs))
            command = [grep, "-E", "-c", "-f", str(pattern_file), str(log_file)]
            phase = classify(request, packs).phase
            print(f"{label}: vramdoc {mb / ours:8.1f} MB/s ({ours * 1000:7.1f} ms, phase {phase})")
            for locale in ("C.UTF-8", "C"):
                env = {**os.environ, "LC_ALL": locale}
                theirs = _best_of(
                    3, lambda c=command, e=env: subprocess.run(c, capture_output=True, check=False, env=e)
                )
                print(
                    f"    grep -E (LC_ALL={locale:7}) {mb / theirs:8.1f} MB/s ({theirs * 1000:7.1f} ms); "
                    f"ratio vramdoc/grep {theirs / ours:.2f} (target >= 0.33)"
                )
    request = DiagnoseRequest(log=excerpt())
    classify(request, packs)
    samples = []
    for _ in range(300):
        start = time.perf_counter()
        classify(request, packs)
        samples.append(time.perf_counter() - start)
    lines = request.log.count("\n") + 1
    print(f"{lines}-line excerpt: median {statistics.median(samples) * 1000:.2f} ms (target < 2 ms)")
    generated_data_cost(request)
    return 0


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
    """What the generated frame table (rules/frames/) and inventory (rules/inventory/) cost: the
    same excerpt and the same pack load with and without them, measured in this run."""
    root = default_rules_dir()
    with tempfile.TemporaryDirectory() as folder:
        bare = Path(folder) / "rules"
        shutil.copytree(root, bare, ignore=shutil.ignore_patterns("frames", "inventory"))
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
    sys.exit(main())
