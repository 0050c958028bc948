"""What a person asked the bot, read from Slack message text (pure: no I/O).

A message may carry a pasted log (inside or outside code fences, Slack-escaped), a `vllm serve`
command, host names ("on gpu-07 and gpu-08") and a sizing question ("will Llama-3.1-70B fit on
2×A100-80GB at 32k?"). Host names found here are only lookup keys: the bot resolves them through
the registry, so nothing typed in Slack ever becomes a URL.
"""

from __future__ import annotations

import re

import msgspec

from service.quantities import sentence_tokens
from service.redact import redact
from service.registry import HOST_NAME
from service.schemas import EstimateRequest

__all__ = [
    "HOST_NAME",
    "Ask",
    "parse_ask",
    "parse_length",
    "parse_preflight",
    "parse_sizing",
    "split_log",
    "unescape_slack",
]


_MENTION = re.compile(r"<[@!][^>]*>")
_CHANNEL = re.compile(r"<#[A-Z0-9]+\|([^>]*)>")
_LINK = re.compile(r"<((?:https?|mailto|ftp):[^>|]*)(?:\|([^>]*))?>")
_FENCE = re.compile(r"```(.*?)(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
# a launch command, after any `KEY=value` environment words (`CUDA_VISIBLE_DEVICES=1 vllm serve …`)
_COMMAND = re.compile(
    r"^\s*(?:\$\s*)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:vllm\s+serve\b|python3?\s+-m\s+vllm\.entrypoints\.)",
    re.IGNORECASE,
)
_LOG_MARKER = re.compile(
    r"(?i)(?:error|warning|traceback|exception|out of memory|tried to allocate|raise)\b"
    r"|\bINFO\b|\d{2}:\d{2}:\d{2}|\d\s*GiB\b|File \"|gpu_memory_utilization=|max_model_len="
)
_WORD_SPLIT = re.compile(r"[\s,;!?()\[\]{}\"'“”]+")
_LIST_HOSTS = frozenset({"hosts", "list hosts", "which hosts", "show hosts", "known hosts"})
_HOST_KEYWORDS = frozenset({"on", "host", "hosts", "node", "nodes", "machine", "server", "box", "check"})
_STOPWORDS = frozenset(
    {"and", "or", "the", "a", "an", "is", "are", "of", "to", "in", "on", "at", "for", "with", "please"}
    | {"what", "why", "how", "check", "host", "hosts", "node", "nodes", "gpu", "gpus", "now", "it", "me"}
    | {"machine", "server", "box", "status", "state", "memory", "vramdoc", "help", "again", "also"}
    | {"my", "our", "your", "their", "this", "that", "these", "those", "there", "here", "its"}
)
_VERSION_WORD = re.compile(r"^v?\d+(?:\.\d+)+[a-z0-9.+-]*$|^\d+$")
_GPU_WORD = re.compile(r"^(?:[abhltv]\d{1,3}[a-z]?|rtx[\w-]*|mi\d+\w*|a10g|gh200|gb200)(?:-\d+g(?:i?b)?)?$")
_SIZING_TRIGGER = re.compile(r"(?i)^\s*(?:estimate|size|sizing)\b|\bfits?\b")
_SIZING = re.compile(
    r"""(?ix)
    ^\s*(?:(?:will|would|does|do|can|could)\s+)?(?:estimate|size|sizing)?\s*:?\s*
    (?P<model>[a-z0-9][\w./:-]*)\s+
    (?:fit\s+)?(?:on|in|into|across)\s+
    (?:(?P<count>\d+)\s*[x×*]\s*|(?P<count_spaced>\d+)\s+)?
    (?P<gpu>[a-z0-9][\w.-]*)
    (?P<rest>.*)$
    """
)
# The same question typed the way people talk: "will llama 3.1 70b fit on 2x a100 80gb at 32k?".
# Up to three words each for the model (one with a digit) and the GPU (starting like a GPU name);
# the words are joined with '-' into the catalog's spelling.
_SIZING_SPACED = re.compile(
    r"""(?ix)
    ^\s*(?:(?:will|would|does|do|can|could)\s+)?(?:estimate|size|sizing)?\s*:?\s*
    (?P<model>[a-z0-9][\w./:-]*(?:\s+(?!fits?\b)[a-z0-9][\w./:-]*){0,2})\s+
    (?:fits?\s+)?(?:on|in|into|across)\s+
    (?:(?P<count>\d+)\s*[x×*]\s*|(?P<count_spaced>\d+)\s+)?
    (?P<gpu>[a-z0-9][\w.-]*(?:\s+(?!(?:at|with|for|using|and|or)\b)[a-z0-9][\w.-]*){0,2}?)
    (?P<rest>(?:\s+(?:at|with|for|using)\b.*)?)[\s?.!]*$
    """
)
_LENGTH_AT = re.compile(r"(?i)\b(?:at|with|for)\s+(\d+(?:\.\d+)?\s*[km]?)\b(?!\s*gi?b)")
_LENGTH_WORD = re.compile(r"(?i)\b(\d+(?:\.\d+)?\s*[km]?)\s*(?:context|ctx|tokens|token context|len)\b")
_TP = re.compile(r"(?i)\b(?:tp|tensor[- _]parallel(?:[- _]size)?)\s*[=:]?\s*(\d+)\b")
_UTIL = re.compile(
    r"(?i)\b(?:util(?:ization)?|gpu[-_]memory[-_]utilization)\s*[=:]?\s*(0?\.\d+|1(?:\.0+)?)\b"
)
_KV_FP8 = re.compile(r"(?i)\b(?:fp8\s+kv(?:[- ]cache)?|kv(?:[- ]cache)?\s*(?:dtype\s*)?[=:]?\s*(fp8\w*))\b")
_QUANT = re.compile(r"(?i)\b(awq|gptq|fp8|bitsandbytes|bnb|gguf|int4|int8)\b")
_DTYPE = re.compile(r"(?i)\b(bf16|bfloat16|fp16|float16|half|fp32|float32)\b")
# "will `vllm serve …` start on gpu-07?": a launch question about a command, on a host
_PREFLIGHT = re.compile(
    r"(?i)\b(?:will|would|does|do|can|could)\b.*\b(?:start|run|launch|boot|come\s+up|work)\b"
)
# the command typed without code formatting: from `vllm serve` up to the question's verb
_BARE_COMMAND = re.compile(
    r"(?i)((?:\b[A-Z_][A-Z0-9_]*=\S+\s+)*(?:vllm\s+serve|python3?\s+-m\s+vllm\.entrypoints\.\S+)\b.*?)"
    r"\s+(?:start|run|launch|boot|come\s+up|work)\b"
)
_VLLM_VERSION = re.compile(r"(?i)\bvllm\s*(?:==|v)?\s*(\d+\.\d+(?:\.\d+)?)\b")
_GIB = re.compile(r"(?i)^(\d+(?:\.\d+)?)\s*gi?b$")
_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32"}


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one message asked for; empty fields mean the message did not say."""

    log: str | None = None
    command: str | None = None
    hosts: tuple[str, ...] = ()
    estimate: EstimateRequest | None = None
    vllm_version: str | None = None
    help: bool = False
    list_hosts: bool = False
    # a pre-flight question: the command to check on `hosts`
    preflight: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.log or self.hosts or self.estimate or self.help or self.list_hosts or self.preflight)


def unescape_slack(text: str) -> str:
    """Slack's wire text back to what the person typed: mentions dropped, links and entities undone."""
    text = _MENTION.sub("", text)
    text = _CHANNEL.sub(lambda m: "#" + m.group(1), text)
    text = _LINK.sub(lambda m: m.group(2) or m.group(1).removeprefix("mailto:"), text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def split_log(text: str) -> tuple[str | None, str]:
    """(log, prose): with fences, the log is the whole message, the person's words around the fenced
    paste included, because the service reads those words as a channel of their own ("it crashed
    while loading the weights" places a bare OOM); the prose returned (for host names and the
    version) is the text outside the fences. Without fences, log-looking text is the log and only
    the short lines before its first log line are prose ("gpu-07 crashed:" then the paste)."""
    fenced = [m.group(1).strip("\n") for m in _FENCE.finditer(text)]
    if fenced:
        prose = _FENCE.sub(" ", text)
        if not any(block.strip() for block in fenced):
            return None, prose
        return (text.strip() if prose.strip() else "\n".join(b for b in fenced if b.strip())), prose
    lines = [line for line in text.splitlines() if line.strip()]
    is_log = [bool(_LOG_MARKER.search(line) or _COMMAND.match(line)) for line in lines]
    if not any(is_log):
        return (text.strip(), "") if len(lines) >= 3 else (None, text)
    lead = lines[: is_log.index(True)]
    return text.strip(), "\n".join(line for line in lead if len(line) < 120)


def _command(log: str | None) -> str | None:
    if log is None:
        return None
    lines = log.replace("```", "\n").splitlines()
    for i, line in enumerate(lines):
        if _COMMAND.match(line):
            parts = [line.strip().removeprefix("$").strip()]
            j = i
            while parts[-1].endswith("\\") and j + 1 < len(lines):
                parts[-1] = parts[-1][:-1].rstrip()
                j += 1
                parts.append(lines[j].strip())
            return " ".join(part for part in parts if part)
    return None


# A message names a few hosts at most; more words of that shape are not hosts (a pasted table, a key).
MAX_HOSTS = 5
# A run this long of letters and digits with no separator is a key or token, not a host name.
_TOKEN_RUN = re.compile(r"[a-z0-9]{20,}")


def looks_secret(word: str) -> bool:
    """Whether a word may be a credential: redaction would change it, or it is one long token run."""
    return redact(word) != word or _TOKEN_RUN.search(word.lower()) is not None


def _hosts(prose: str) -> tuple[str, ...]:
    """Words shaped like host names (letters and digits), or any word right after "on"/"host"/"and".

    Never a word that may be a secret (an unfenced bearer token is not a host), never more than
    MAX_HOSTS: these names are looked up and may be named back in the reply.
    """
    words = [w.strip(".:").lower() for w in _WORD_SPLIT.split(_INLINE_CODE.sub(r"\1", prose))]
    found: list[str] = []
    slot = False
    last_was_host = False
    for word in words:
        if not word:
            continue
        shaped = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        if (
            (shaped or (slot and word not in _STOPWORDS))
            and HOST_NAME.match(word)
            and not _VERSION_WORD.match(word)
            and not _GPU_WORD.match(word)
            and not looks_secret(word)
        ):
            if word not in found and len(found) < MAX_HOSTS:
                found.append(word)
            slot, last_was_host = False, True
            continue
        slot = word in _HOST_KEYWORDS or (word in {"and", "or", "&"} and last_was_host)
        last_was_host = False
    return tuple(found)


def parse_length(raw: str) -> int | None:
    """'32k' → 32768, '25.6k' → 26214, '8192' → 8192: a person's context size (service.quantities)."""
    value = sentence_tokens(raw.replace(" ", ""))
    return value if value is not None and value > 0 else None


def _spaced_sizing(flat: str) -> re.Match[str] | None:
    """The spaced form, only when its model names a size or version and its GPU looks like one."""
    match = _SIZING_SPACED.match(flat)
    if match is None:
        return None
    model_words = match.group("model").lower().split()
    gpu_first = match.group("gpu").lower().split()[0]
    if not any(c.isdigit() for c in match.group("model")) or set(model_words) & _STOPWORDS:
        return None
    if not (_GPU_WORD.match(gpu_first) or _GIB.match(gpu_first)):
        return None
    return match


def parse_sizing(text: str) -> EstimateRequest | None:
    """A sizing question as an EstimateRequest, or None when the text is not one."""
    if not _SIZING_TRIGGER.search(text):
        return None
    flat = " ".join(text.replace("`", " ").split())
    match = _SIZING.match(flat)
    if match is None or match.group("model").lower() in {"it", "this", "that", "model"}:
        match = _spaced_sizing(flat)
        if match is None:
            return None
    rest = match.group("rest")
    gpu = "-".join(match.group("gpu").rstrip("?.!,").split())
    total = _GIB.match(gpu)
    length_match = _LENGTH_AT.search(rest) or _LENGTH_WORD.search(rest)
    kv = _KV_FP8.search(rest)
    rest_without_kv = _KV_FP8.sub(" ", rest)
    quant = _QUANT.search(rest_without_kv)
    dtype = _DTYPE.search(rest)
    tp = _TP.search(rest)
    util = _UTIL.search(rest)
    version = _VLLM_VERSION.search(text)
    return EstimateRequest(
        model="-".join(match.group("model").rstrip("?.!,").split()),
        gpu=None if total else gpu,
        gpu_total_gib=float(total.group(1)) if total else None,
        gpus=int(match.group("count") or match.group("count_spaced") or 1) or 1,
        max_model_len=parse_length(length_match.group(1)) if length_match else None,
        kv_cache_dtype=(kv.group(1) or "fp8").lower() if kv else None,
        quantization=quant.group(1).lower().replace("bnb", "bitsandbytes") if quant else None,
        dtype=_DTYPE_NAMES.get(dtype.group(1).lower(), dtype.group(1).lower()) if dtype else None,
        tensor_parallel_size=int(tp.group(1)) if tp else None,
        gpu_memory_utilization=float(util.group(1)) if util else None,
        vllm_version=version.group(1) if version else None,
    )


def parse_preflight(text: str) -> tuple[str, str] | None:
    """(command, the rest of the question) for "will `vllm serve …` start on gpu-07?", else None.

    The command is a code span (inline or fenced) that starts like a launch command, else the words
    from `vllm serve` up to the question's verb.
    """
    if not _PREFLIGHT.search(text):
        return None
    for span in (*_FENCE.finditer(text), *_INLINE_CODE.finditer(text)):
        candidate = span.group(1).strip()
        if _COMMAND.match(candidate):
            rest = text[: span.start()] + " " + text[span.end() :]
            return candidate, rest
    bare = _BARE_COMMAND.search(text)
    if bare is None:
        return None
    return bare.group(1).strip(), text[: bare.start(1)] + " " + text[bare.end(1) :]


def parse_ask(text: str) -> Ask:
    """Read one message (Slack wire text or a slash command's text) into an Ask."""
    plain = unescape_slack(text).strip()
    if plain.lower().strip(" ?!.") in {"help", ""} and plain:
        return Ask(help=True)
    if plain.lower().strip(" ?!.") in _LIST_HOSTS:
        return Ask(list_hosts=True)
    preflight = parse_preflight(plain) if len(plain.splitlines()) <= 8 else None
    if preflight is not None:
        command, rest = preflight
        version = _VLLM_VERSION.search(rest)
        return Ask(
            preflight=redact(command),
            hosts=_hosts(rest),
            vllm_version=version.group(1) if version else None,
        )
    if "```" not in plain and len(plain.splitlines()) <= 2:
        estimate = parse_sizing(plain)
        if estimate is not None:
            return Ask(estimate=estimate)
    log, prose = split_log(plain)
    version = _VLLM_VERSION.search(prose)
    return Ask(
        log=log,
        command=_command(log),
        hosts=_hosts(prose),
        vllm_version=version.group(1) if version else None,
    )
