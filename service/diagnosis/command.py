"""Reading a pasted `vllm serve …` or `python -m vllm.entrypoints.openai.api_server …` command.

The command states the configuration the person asked for (facts), and may name flags that do not
exist in their vLLM version: `--disable-cuda-graphs` never existed, `--swap-space` was removed in
0.18.0 (fact sheet §6). Those become findings, so no advice ever builds on a flag vLLM rejects.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from service.packs.signatures import parse_version, string_fact
from service.schemas import Severity

__all__ = ["FLAGS", "FlagIssue", "ParsedCommand", "human_int", "parse_command"]


@dataclass(frozen=True, slots=True)
class Flag:
    """A vLLM CLI flag: the fact it sets, its value type, and the releases that accept it."""

    fact: str | None
    kind: str  # "int", "float", "str", "bool", "none"
    since: str | None = None
    until: str | None = None
    aliases: tuple[str, ...] = ()


# Fact sheet §6; `until` is the last release that still had the flag.
FLAGS: dict[str, Flag] = {
    "--model": Flag("model", "str"),
    "--gpu-memory-utilization": Flag("gpu_memory_utilization", "float"),
    "--device-memory-utilization": Flag("gpu_memory_utilization", "float", since="0.31.0"),
    "--max-model-len": Flag("max_model_len", "int"),
    "--max-num-seqs": Flag("max_num_seqs", "int"),
    "--max-num-batched-tokens": Flag("max_num_batched_tokens", "int"),
    "--block-size": Flag("block_size", "int"),
    "--tensor-parallel-size": Flag("tensor_parallel_size", "int", aliases=("-tp",)),
    "--pipeline-parallel-size": Flag("pipeline_parallel_size", "int", aliases=("-pp",)),
    "--dtype": Flag("dtype", "str"),
    "--quantization": Flag("quantization", "str", aliases=("-q",)),
    "--kv-cache-dtype": Flag("kv_cache_dtype", "str", since="0.3.3"),
    "--enforce-eager": Flag("enforce_eager", "bool"),
    "--no-enforce-eager": Flag("enforce_eager", "none"),
    "--cpu-offload-gb": Flag(None, "str", since="0.5.5"),
    "--enable-chunked-prefill": Flag(None, "none", since="0.4.0"),
    "--enable-prefix-caching": Flag(None, "none", since="0.4.0"),
    "--kv-cache-memory-bytes": Flag(None, "str", since="0.10.2"),
    "--num-gpu-blocks-override": Flag(None, "str", since="0.4.3"),
    "--kv-offloading-size": Flag(None, "str", since="0.12.0"),
    "--cudagraph-capture-sizes": Flag(None, "str", since="0.12.0"),
    "--max-cudagraph-capture-size": Flag(None, "str", since="0.12.0"),
    "--compilation-config": Flag(None, "str", since="0.6.6", aliases=("-cc",)),
    "--performance-mode": Flag(None, "str", since="0.17.0"),
    "--swap-space": Flag(None, "str", until="0.17.0"),
    "--calculate-kv-scales": Flag(None, "none", since="0.7.0", until="0.27.0"),
    "--max-context-len-to-capture": Flag(None, "str", until="0.6.3"),
    "--max-seq-len-to-capture": Flag(None, "str", since="0.4.3", until="0.10.2"),
    "--cuda-graph-sizes": Flag(None, "str", since="0.9.2", until="0.11.0"),
    "--preemption-mode": Flag(None, "str", since="0.5.5", until="0.10.2"),
    "--use-v2-block-manager": Flag(None, "none", since="0.4.0", until="0.9.2"),
    "--num-lookahead-slots": Flag(None, "str", since="0.4.3", until="0.11.0"),
}

# Spellings people copy from forum advice that no vLLM release (0.2.7-0.33.0) ever accepted.
NEVER_EXISTED: dict[str, str] = {
    "--disable-cuda-graphs": "--enforce-eager (or -cc.cudagraph_mode=none)",
    "--disable-cuda-graph": "--enforce-eager (or -cc.cudagraph_mode=none)",
    "--disable-cudagraph": "--enforce-eager (or -cc.cudagraph_mode=none)",
}

_ALIASES = {alias: name for name, flag in FLAGS.items() for alias in flag.aliases}
_VLLM_START = re.compile(r"\bvllm\s+serve\b|-m\s+vllm\.entrypoints\.(?:openai\.)?api_server\b|vllm-openai\S*")
_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")


@dataclass(frozen=True, slots=True)
class FlagIssue:
    """A flag the command uses that vLLM does not accept (in that version)."""

    rule: str
    flag: str
    severity: Severity
    message: str


@dataclass(slots=True)
class ParsedCommand:
    facts: dict[str, object] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    issues: list[FlagIssue] = field(default_factory=list)


def human_int(text: str) -> int | None:
    """vLLM's human-readable ints: 32k = 32000, 32K = 32768, 1m = 10**6, 1M = 2**20; -1/auto -> None."""
    match = _HUMAN.match(text.strip())
    if not match:
        return None
    scale = {"": 1, "k": 10**3, "K": 2**10, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _tokens(command: str) -> list[str]:
    command = command.split("`", 1)[0]  # an inline code span ends the command
    joined = re.sub(r"\\\s*\n", " ", command).replace("\n", " ")
    try:
        return shlex.split(joined)
    except ValueError:
        return joined.split()


def _value(flag: Flag, raw: str) -> object | None:
    if flag.kind == "int":
        return human_int(raw)
    if flag.kind == "float":
        try:
            return float(raw)
        except ValueError:
            return None
    return string_fact(flag.fact, raw) if flag.fact else raw or None


def parse_command(command: str, version: str | None = None) -> ParsedCommand:
    """Facts and flag issues of one pasted command; `version` enables removed/added checks."""
    parsed = ParsedCommand()
    tokens = _tokens(command)
    start = _vllm_start(tokens)
    rest = tokens[start:]
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            if i == 1 and start > 0 and _looks_like_model(token):
                parsed.facts.setdefault("model", token)
            continue
        name, _, inline = token.partition("=")
        name = _ALIASES.get(name, name)
        parsed.flags.append(name)
        flag = FLAGS.get(name)
        if name in NEVER_EXISTED:
            parsed.issues.append(
                FlagIssue(
                    "vllm-flag-never-existed",
                    name,
                    "error",
                    f"{name} is not a vLLM flag in any release; use {NEVER_EXISTED[name]}.",
                )
            )
        if flag is None:
            continue
        issue = _version_issue(name, flag, version)
        if issue:
            parsed.issues.append(issue)
        if flag.kind in ("bool", "none"):
            if flag.fact == "enforce_eager":
                parsed.facts["enforce_eager"] = name == "--enforce-eager"
            continue
        raw = inline
        if not inline and i < len(rest) and not rest[i].startswith("--"):
            raw = rest[i]
            i += 1
        if flag.fact:
            value = _value(flag, raw)
            if value is not None:
                parsed.facts[flag.fact] = value
    return parsed


def _looks_like_model(token: str) -> bool:
    return bool(re.match(r"^[\w.\-~/]+$", token))


def _vllm_start(tokens: list[str]) -> int:
    """Index just after `vllm serve` / `-m vllm.entrypoints…api_server` / the docker image name."""
    for index, token in enumerate(tokens):
        if token == "serve" and index > 0 and tokens[index - 1].endswith("vllm"):
            return index + 1
        if re.match(r"vllm\.entrypoints\.(?:openai\.)?api_server$", token):
            return index + 1
        if re.match(r"^(?:[\w.\-]+/)*vllm-openai(?::\S+)?$", token):
            return index + 1
    return 0


def _version_issue(name: str, flag: Flag, version: str | None) -> FlagIssue | None:
    if flag.until is None and flag.since is None:
        return None
    if version is None:
        if flag.until is not None:
            after = _next_minor(flag.until)
            return FlagIssue(
                "vllm-flag-removed",
                name,
                "warning",
                f"{name} was removed in vLLM {after}; only {flag.until} and older accept it.",
            )
        return None
    current = parse_version(version)
    if flag.until is not None and current > parse_version(flag.until):
        after = _next_minor(flag.until)
        return FlagIssue(
            "vllm-flag-removed",
            name,
            "error",
            f"{name} was removed in vLLM {after}, so {version} rejects it.",
        )
    if flag.since is not None and current < parse_version(flag.since):
        return FlagIssue(
            "vllm-flag-not-yet-added",
            name,
            "error",
            f"{name} first appeared in vLLM {flag.since}, so {version} rejects it.",
        )
    return None


def _next_minor(version: str) -> str:
    major, minor, _ = parse_version(version)
    return f"{major}.{minor + 1}.0"


def find_command(text: str) -> bool:
    """Whether `text` holds a vLLM launch command."""
    return bool(_VLLM_START.search(text))
