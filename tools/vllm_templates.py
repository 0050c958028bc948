"""Inventory every message vLLM can print, from its released sources, into `rules/inventory/`.

Reads the releases `tools/vllm_sources.py fetch` extracted (one folder per release) and, with `ast`,
collects each message template of

- `raise SomethingError(...)` (the first argument; several arguments print as a tuple),
- `logger.debug/info/warning/error/exception/critical(...)` and their `*_once` forms,
- `assert cond, "..."`,
- a message built without a `raise` of its own (`built_kind`): an exception stored, returned or handed
  on (`err = MaxLengthError(...)`, level `construct`), the OpenAI server's returned error responses
  (`return self.create_error_response(f"This model's maximum context length is ...")`, `ErrorResponse`,
  `JSONResponse` with an error body: `response`), `warnings.warn` (`warning`, its category as the
  exception) and `sys.exit("...")`/`SystemExit("...")` (`exit`); a raise or an exception built with
  its message as a keyword (`HTTPException(status_code=400, detail=...)`) reads that keyword,

turning f-strings, `%` formats, `str.format`, string concatenation and a message variable assigned
earlier in the same function into one template whose holes are written `{}`. Each template keeps its
file, function, level and the releases it appears in. `RELEVANCE` below (data, not a list of
messages) decides which templates concern GPU memory and start-up; every relevant one is rendered with
placeholder values and run through the signature packs, and the rule that matches it is recorded.

    python tools/vllm_templates.py            # rewrite rules/inventory/vllm.yaml from the cache
    python tools/vllm_templates.py --check    # exit 1 when the committed inventory is stale
    python tools/vllm_templates.py --plugins  # rules/inventory/plugins.yaml from the plugins' releases

`--plugins` reads the platform plugins and forks `vllm_sources.py plugins` cached (PLUGINS), and the
wrappers that run vLLM (WRAPPERS), the same way: their files are named by their package
(`vllm_ascend/worker/worker.py`), their `versions` are the plugin's own releases, and the folder filter
reads a plugin's module as vLLM's of the same path (a wrapper's as its own).

A new release is one `vllm_sources.py fetch` and one rerun. Decisions a person made by hand (a
`gap` reason, an `irrelevant` reason overriding the filter) are kept across reruns, keyed by the
template's text, file and function.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import multiprocessing
import pickle
import re
import string
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from vllm_sources import PLUGINS, SOURCES, cache_dir, plugin_releases, plugins_dir  # noqa: E402

from service.packs import load_packs  # noqa: E402
from service.packs.inventory import (  # noqa: E402
    HOLE,
    Decision,
    InventoryFile,
    Template,
    dump_inventory,
    read_inventory,
    rules_matching,
    version_key,
)

OUTPUT = ROOT / "rules" / "inventory" / "vllm.yaml"
PLUGIN_OUTPUT = ROOT / "rules" / "inventory" / "plugins.yaml"
LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"}
LOGGER_NAMES = re.compile(r"^_?(?:logger|log|LOGGER|_LOGGER)$")

# --- relevance: data, read by `classify` -----------------------------------------------------------
# A template is relevant when its literal text (holes removed) names one of these subjects and it is
# printed at a level a person would paste (an error, a warning, an assertion, or an info line stating a
# memory quantity). Each subject names the signature area whose rules must match it.
SUBJECTS: dict[str, str] = {
    "memory": r"(?i)out of memory|\bOOM\b|memory profil|free memory|GPU memory|device memory"
    r"|gpu_memory_utilization|memory utilization|not enough (?:GPU |device )?memory|insufficient memory"
    r"|\bGi?B\b.*memory|memory.*\bGi?B\b|available memory|peak (?:torch |activation )?memory",
    "kv_cache": r"(?i)kv[ _-]?cache|cache blocks|num_gpu_blocks|gpu blocks|KV blocks",
    "request_length": r"(?i)max_model_len|max model len|max seq len|model length|context length"
    r"|maximum context|max_num_batched_tokens|prompt \(length|input tokens|too long",
    "parallelism": r"(?i)tensor[ _]parallel|pipeline[ _]parallel|divisible by|number of (?:GPUs|devices)"
    r"|world[ _]size|not enough GPUs|more GPUs"
    # placing the parallel workers on devices: Ray's placement groups and bundles, the driver node
    r"|placement group|placement bundle|driver node",
    # `fp8\w*`: a kernel library names the FP8 formats by their own names (Triton's fp8e4nv, fp8e5)
    "quantization": r"(?i)quantiz|\b(?:awq|gptq|marlin|fp8\w*|bitsandbytes|gguf|compressed.tensors)\b",
    "dtype": r"(?i)bfloat16|\bdtype\b|compute capability|float16 is",
    "preemption": r"(?i)preempt|swap space|swapped|recomputation",
    "profiling": r"(?i)profil|CUDA ?graph|cudagraph|torch\.compile",
    "host_memory": r"(?i)cudaHostRegister|cudaHostAlloc|cudaMallocHost|pinned (?:host |CPU )?(?:memory|buffer)"
    r"|pin_memory|host memory|CPU memory|\bRAM\b",
}
# The function a message is raised in names its subject too: `Cannot find the config file for {}`
# (the method a hole prints) is about quantization because it is raised in `get_quant_config`.
FUNCTION_SUBJECTS: dict[str, str] = {
    "quantization": r"(?i)(?:^|[_.])quant(?:_|$)|quantiz",
}
# A subject is not enough: a relevant template also states a memory failure or figure, or a limit a
# person set that the engine cannot meet. These signals (data) say which wordings do.
SIGNALS: dict[str, str] = {
    # `no enough`: the same failure in lmdeploy's words (`No enough gpu memory for kv cache.`)
    "memory failure": r"(?i)out of memory|\bOOM\b"
    r"|(?:not|no) enough (?:GPU |device |KV cache |cache )?(?:memory|space|blocks)"
    r"|insufficient (?:GPU |device )?memory|No available memory|memory profiling|free memory|"
    r"larger than the available|exceeds? (?:the )?(?:available|capacity)",
    "memory figure": r"(?i)\b(?:GiB|GB|MiB)\b|# ?(?:GPU|CPU) blocks|num_gpu_blocks|KV cache size"
    r"|Maximum concurrency"
    r"|gpu_memory_utilization",
    "length limit": r"(?i)(?:max_model_len|max seq len|model length|max_num_batched_tokens|context length)"
    r".{0,80}(?:greater|larger|smaller|exceed|longer|less than|must be|cannot|too)"
    r"|(?:greater|larger|longer|exceeds?|too long|too large).{0,80}"
    r"(?:max_model_len|model length|context length|maximum)"
    # the OpenAI server's refusals state the limit, then the request's size against it ("This
    # model's maximum context length is {} tokens. However, your request has {} input tokens";
    # "You passed {} input tokens … However, the model's context length is only {} tokens")
    r"|(?:max_model_len|model length|context length)[^.]{0,40}\.\s+However,"
    r"|\bHowever,[^.]{0,80}(?:max_model_len|model length|context length)",
    "preemption": r"(?i)preempt|swap space",
    "parallel split": r"(?i)(?:divisible|divide|evenly).{0,80}(?:parallel|world|GPUs|tp_size|tp size|TP size)"
    r"|(?:parallel|GPUs).{0,80}(?:divisible|evenly)|(?:more|enough) GPUs|number of (?:available )?GPUs"
    # the multiproc executors' check of the layout against the GPUs this node has
    r"|less than (?:than )?max local gpu count",
    # a parallel layout the model or the build does not support (pipeline parallelism for an
    # architecture outside vLLM's list)
    "parallel layout unsupported": r"(?i)\b(?:tensor|pipeline)[ _]parallel\w*[^.]{0,40}"
    r"(?:is only supported for|is not (?:yet )?supported for)",
    # the devices a placement asks for are not there (none on the driver node, more per bundle than
    # one, more than the cluster has)
    "device placement": r"(?i)does not allocate any|cannot have more than"
    r"|exceeds the total number of available|not included in a placement group"
    r"|Cannot provide a placement group|Not enough resources",
    "parallel product": r"(?i)(?:world[ _]size|parallel[ _]size)\b.{0,80}(?:is not equal to|does not match|!=)"
    r".{0,80}(?:parallel|world)",
    "hardware support": r"(?i)compute capability"
    r"|(?:not|isn't|un)\s?supported (?:on|by|for|in) (?:the current |this |your )?"
    r"(?:GPU|device|hardware|platform|architecture)|Minimum capability|Bfloat16 is only supported"
    r"|requires? (?:a )?GPU"
    # a kernel compiler's refusal of a number type below a GPU generation (Triton 3.0-3.1's
    # "fp8e4nv data type is not supported on CUDA arch < 89")
    r"|not supported on (?:CUDA|HIP|ROCm) arch",
    # a quantization method refused with a parallel layout (BitsAndBytes with TP or PP, a
    # pre-quantized BitsAndBytes checkpoint with tensor parallelism, quantized Mamba layers with TP)
    "quantization layout": r"(?:(?i:quantiz|bitsandbytes|bitandbytes|\bbnb\b|\bgguf\b|\bawq\b|\bgptq\b)"
    r"[^.]{0,80}\b(?:TP|PP|(?i:tensor[ _]parallel\w*|pipeline[ _]parallel\w*))\b[^.]{0,40}"
    r"(?i:not (?:yet )?supported|hasn't supported|unsupported))"
    r"|(?:(?i:tensor[ _]parallel\w*|pipeline[ _]parallel\w*)[^.]{0,40}(?i:not (?:yet )?supported|unsupported)"
    r"[^.]{0,40}(?i:quantiz))",
    # a quantized checkpoint's kernels need another model dtype (compressed-tensors MoE and
    # marlin24 ask for float16)
    "quantization dtype": r"(?i)\b(?:float16|bfloat16|half)\b (?:is )?required for [^.]{0,40}"
    r"(?:quantiz|compress|marlin|awq|gptq|fp8)",
    "quantization method": r"(?i)quantization (?:method|scheme|config)"
    r".{0,80}(?:not|unsupported|must|cannot|does)"
    r"|(?:not|un)supported.{0,60}quantization",
    "graph capture": r"(?i)(?:CUDA ?graph|cudagraph).{0,80}(?:memory|GiB|capture)",
    "host memory failure": r"(?i)(?:cudaHostRegister|cudaHostAlloc|cudaMallocHost|pinned (?:host |CPU )?"
    r"(?:memory|buffer)|host memory|CPU memory|\bRAM\b)[^.]{0,80}(?:fail|cannot|insufficient|not enough"
    r"|out of)|(?:fail(?:ed)? to|cannot|unable to) (?:pin|allocate (?:pinned|host|CPU))",
    "missing config": r"(?i)(?:cannot|could not|can't|unable to) (?:find|locate) the (?:config|quantization)"
    r"|(?:method|config) is not specified in the config",
}
# Host RAM is pinned and spent where the offload tiers and connectors run: a template about host
# memory is relevant wherever it is printed (DESIGN §3.1 host_oom), the folder and feature filters
# below notwithstanding.
HOST_SUBJECT = "host_memory"
# Folders whose messages concern other subsystems (KV transfer between instances, offload
# connectors, compile passes, kernels' own shape checks), whatever words they use.
NOT_ENGINE_PATH = re.compile(
    r"^vllm/(?:benchmarks|entrypoints/(?:cli/benchmark|openai/tool_parsers|openai/reasoning)|"
    r"reasoning|tool_parsers|transformers_utils/tokenizer|lora|multimodal|third_party|vllm_flash_attn"
    r"|model_executor/guided_decoding|v1/structured_output|profiler|plugins|distributed/kv_transfer"
    r"|distributed/ec_transfer|v1/kv_offload|distributed/kv_events|compilation/passes|attention/ops"
    r"|v1/attention/ops|model_executor/layers/fused_moe/(?!layer)|model_executor/kernels|kernels"
    r"|_custom_ops|_aiter_ops|v1/spec_decode|spec_decode|distributed/aux_output_connector)"
)
# Where a template's text says it is not about the running engine's memory, whatever it mentions.
NOT_ENGINE = re.compile(
    r"(?i)benchmark|\bbench\b|--dataset|tokenizer|chat template|lora|speculative|spec decode|draft"
    r"|multi-?modal|image|video|audio|tool call|reasoning|guided|structured output|grammar|sampling param"
    r"|logprob|detokeniz|prometheus|metric|deprecat|connector|offload|nixl|mooncake|lmcache"
)
# what a person pastes: raised, asserted and loud log lines, and the messages built without a raise
# (`built_kind`): an exception handed on, an HTTP error body a client prints, an exit message
PASTED_LEVELS = {"raise", "assert", "construct", "response", "exit", "error", "exception", "critical", "fatal"}
PASTED_LEVELS |= {"warning", "warn"}


@dataclass
class Found:
    """One template as found in one release."""

    level: str
    exception: str | None
    text: str
    kinds: tuple[str, ...]


@dataclass
class Entry:
    """One template across releases."""

    level: str
    exception: str | None
    text: str
    kinds: tuple[str, ...]
    file: str
    function: str
    versions: list[str] = field(default_factory=list)


# --- turning expressions into templates ----------------------------------------------------------


def _hole(expr: ast.expr | None, spec: str = "") -> tuple[str, str]:
    """A placeholder and its shape: `int`, `float` or `text` (guessed from the format or the name)."""
    if spec and spec[-1:] in "dix":
        return HOLE, "int"
    if spec and spec[-1:] in "feEgG%":
        return HOLE, "float"
    name = ast.unparse(expr).lower() if expr is not None else ""
    if re.search(r"gib|gb\b|_gb|memory|mem\b|bytes|ratio|utilization|fraction|size_in|_mb\b", name):
        return HOLE, "float"
    if re.search(r"len|num|size|count|blocks|tokens|\bn_|_id\b|rank|world|tp\b|pp\b|capacity|max_", name):
        return HOLE, "int"
    return HOLE, "text"


Parts = list[tuple[str, str]]  # (literal, "") or (HOLE, shape)


class Renderer:
    """Message expressions -> template parts; `names` holds message variables assigned in the function."""

    def __init__(self, names: dict[str, Parts]) -> None:
        self.names = names

    def parts(self, node: ast.expr) -> Parts:
        if isinstance(node, ast.Constant):
            return [(node.value, "")] if isinstance(node.value, str) else [_hole(node)]
        if isinstance(node, ast.JoinedStr):
            out: Parts = []
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    out.append((value.value, ""))
                elif isinstance(value, ast.FormattedValue):
                    spec = ast.unparse(value.format_spec)[2:-1] if value.format_spec else ""
                    out.append(_hole(value.value, spec))
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.parts(node.left) + self.parts(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            fmt = self._literal(node.left)
            if fmt is not None:
                args = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
                return percent_parts(fmt, args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            fmt = self._literal(node.func.value)
            if fmt is not None:
                return format_parts(fmt, list(node.args), {k.arg: k.value for k in node.keywords if k.arg})
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
            return [_hole(node)]
        return [_hole(node)]

    def _literal(self, node: ast.expr) -> str | None:
        parts = self.parts(node)
        if all(shape == "" for _, shape in parts):
            return "".join(text for text, _ in parts)
        return None


_PERCENT = re.compile(r"%(?:\((\w+)\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?([diouxXeEfFgGcrsa%])")


def percent_parts(fmt: str, args: list[ast.expr]) -> Parts:
    """`"a %d b %s" % (x, y)` and logger's lazy `%` arguments."""
    out: Parts = []
    pos = 0
    index = 0
    for match in _PERCENT.finditer(fmt):
        out.append((fmt[pos : match.start()], ""))
        pos = match.end()
        if match.group(2) == "%":
            out.append(("%", ""))
            continue
        expr = args[index] if index < len(args) else None
        index += 1
        spec = match.group(2)
        out.append(_hole(expr, spec if spec in "dixfeEgG" else ""))
    out.append((fmt[pos:], ""))
    return out


def format_parts(fmt: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> Parts:
    """`"a {} b {x:.2f}".format(...)`."""
    out: Parts = []
    auto = 0
    try:
        pieces = list(string.Formatter().parse(fmt))
    except ValueError:
        return [(fmt, "")]
    for literal, name, spec, _ in pieces:
        out.append((literal, ""))
        if name is None:
            continue
        expr: ast.expr | None
        if name == "":
            expr = args[auto] if auto < len(args) else None
            auto += 1
        elif name.isdigit():
            expr = args[int(name)] if int(name) < len(args) else None
        else:
            expr = kwargs.get(name.split(".")[0].split("[")[0])
        out.append(_hole(expr, spec or ""))
    return out


def join(parts: Parts) -> tuple[str, tuple[str, ...]]:
    """Template text with `{}` holes (literal braces doubled) and the shape of each hole."""
    text: list[str] = []
    kinds: list[str] = []
    for value, shape in parts:
        if shape:
            if text and text[-1] == HOLE:  # two adjacent holes read as one
                continue
            text.append(HOLE)
            kinds.append(shape)
        else:
            text.append(value.replace("{", "{{").replace("}", "}}"))
    return "".join(text), tuple(kinds)


# --- walking a source file -------------------------------------------------------------------------


def _exception_name(node: ast.expr) -> str | None:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _logger_level(call: ast.Call) -> str | None:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    level = func.attr.removesuffix("_once")
    if level not in LOG_LEVELS:
        return None
    owner = func.value
    if isinstance(owner, ast.Attribute):
        owner_name = owner.attr
    elif isinstance(owner, ast.Name):
        owner_name = owner.id
    else:
        return None
    return level if LOGGER_NAMES.match(owner_name) else None


def _stringish(node: ast.expr) -> bool:
    """An expression that builds a message: a string literal, f-string, `%`, `+` or `.format` on one."""
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _stringish(node.left) or _stringish(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _stringish(node.func.value)
    return False


# --- messages built without a `raise` of their own: data, read by `built_kind` ------------------
# vLLM's OpenAI server returns its refusals (`return self.create_error_response(f"This model's maximum
# context length is …")`), wrappers store or hand on the exception they build (`err = MaxLengthError(…)`),
# libraries warn (`warnings.warn`) or exit with a message (`sys.exit("…")`): printed all the same, by the
# client's error body, the traceback that raises the stored exception, or the interpreter.
# An exception class, by the ending of its name (vLLM's `VLLMValidationError`, a plugin's `NPUException`)
EXCEPTION_CLASS = re.compile(r"^_?[A-Z]\w*(?:Error|Exception)$")
# An HTTP error response: the OpenAI server's `create_error_response` (`create_streaming_error_response`)
# and `ErrorResponse`, FastAPI's `JSONResponse` with an error body
ERROR_RESPONSE = re.compile(r"^(?:_?create_\w*error_response|\w*ErrorResponse|JSONResponse)$")
WARN_CALLS = {"warnings.warn", "warn_explicit"}
EXIT_CALLS = {"sys.exit", "SystemExit"}
# the argument that carries the message of a response, a warning or an exception built with keywords
MESSAGE_KEYWORDS = ("message", "msg", "detail", "error", "err_msg", "reason")
DEFAULT_WARNING = "UserWarning"


def _callee(call: ast.Call) -> str:
    """`warnings.warn`, `self.create_error_response` -> `create_error_response`, `ValueError`."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("sys", "warnings"):
        return f"{func.value.id}.{func.attr}"
    return _exception_name(call) or ""


def built_kind(call: ast.Call) -> tuple[str, str | None] | None:
    """(level, exception) of a message `call` builds without raising it, or None for any other call:
    `construct` an exception, `response` an HTTP error body, `exit` a message the interpreter prints as
    it exits, `warning` a `warnings.warn` (its category is the name it prints)."""
    name = _callee(call)
    if name in WARN_CALLS:
        category = call.args[1] if len(call.args) > 1 else _keyword(call, "category")
        return "warning", (_exception_name(category) if category is not None else None) or DEFAULT_WARNING
    if name in EXIT_CALLS:
        return "exit", None
    if ERROR_RESPONSE.match(name):
        return "response", None
    if EXCEPTION_CLASS.match(name):
        return "construct", name
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _message_keyword(call: ast.Call) -> ast.expr | None:
    for name in MESSAGE_KEYWORDS:
        value = _keyword(call, name)
        if value is not None:
            return _in_body(value) or value
    return None


def _in_body(node: ast.expr) -> ast.expr | None:
    """The message inside an error body written as a dict (`{"error": {"message": f"…"}}`)."""
    if not isinstance(node, ast.Dict):
        return None
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and key.value in MESSAGE_KEYWORDS:
            return _in_body(value) or value
    return None


def _message_argument(call: ast.Call, names: dict[str, Parts]) -> ast.expr | None:
    """The message a response, warning or exit call carries: its message keyword, else its first
    argument that builds a message (a string, a message variable, an error body), skipping the
    status code `create_error_response(HTTPStatus.BAD_REQUEST, f"…")` took first in 0.2."""
    keyword = _message_keyword(call) or _in_body(_keyword(call, "content") or ast.Constant(None))
    if keyword is not None:
        return keyword
    for arg in call.args:
        if _stringish(arg) or (isinstance(arg, ast.Name) and arg.id in names):
            return arg
        body = _in_body(arg)
        if body is not None:
            return body
    return None


class Collector(ast.NodeVisitor):
    """Visits one module, yielding (function, Found) for each message template."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.names: list[dict[str, Parts]] = [{}]
        self.found: list[tuple[str, Found]] = []
        self.raised: set[int] = set()  # the calls a `raise` prints, read there

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.names.append({})
        self.generic_visit(node)
        self.names.pop()
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _renderer(self) -> Renderer:
        return Renderer(self.names[-1])

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and _stringish(node.value):
            parts = self._renderer().parts(node.value)
            if any(not shape and text.strip() for text, shape in parts):
                self.names[-1][node.targets[0].id] = parts
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if (
            isinstance(target, ast.Name)
            and isinstance(node.op, ast.Add)
            and target.id in self.names[-1]
            and _stringish(node.value)
        ):
            self.names[-1][target.id] = self.names[-1][target.id] + self._renderer().parts(node.value)
        self.generic_visit(node)

    def _add(self, level: str, exception: str | None, parts: Parts) -> None:
        text, kinds = join(parts)
        if len(text.replace(HOLE, "").strip(" .:,;'\"()[]")) < 4:
            return
        self.found.append((".".join(self.scope) or "<module>", Found(level, exception, text, kinds)))

    def _exception_parts(self, call: ast.Call) -> Parts | None:
        """The message an exception built by `call` prints: its argument, several as a tuple, or
        its message keyword (`HTTPException(status_code=400, detail=...)`)."""
        renderer = self._renderer()
        if not call.args:
            message = _message_keyword(call)
            return renderer.parts(message) if message is not None else None
        if len(call.args) == 1:
            return renderer.parts(call.args[0])
        parts: Parts = [("(", "")]  # ValueError("a", b) prints as the tuple ('a', b)
        for index, arg in enumerate(call.args):
            if index:
                parts.append((", ", ""))
            inner = renderer.parts(arg)
            literal = all(not shape for _, shape in inner)
            parts.extend([("'", "")] + inner + [("'", "")] if literal else inner)
        parts.append((")", ""))
        return parts

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            self.raised.add(id(exc))
            parts = self._exception_parts(exc)
            if parts is not None:
                self._add("raise", _exception_name(exc), parts)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add("assert", "AssertionError", self._renderer().parts(node.msg))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        level = _logger_level(node)
        if level is not None and node.args:
            first = node.args[0]
            renderer = self._renderer()
            fmt = renderer._literal(first)
            if fmt is not None and len(node.args) > 1:
                parts = percent_parts(fmt, list(node.args[1:]))
            else:
                parts = renderer.parts(first)
            self._add(level, None, parts)
        elif id(node) not in self.raised:
            self._built(node)
        self.generic_visit(node)

    def _built(self, call: ast.Call) -> None:
        """A message built without a `raise` of its own (`BUILT`): an exception stored, returned or
        handed on, an HTTP error response, a `warnings.warn`, a `sys.exit`."""
        kind = built_kind(call)
        if kind is None:
            return
        level, exception = kind
        if level == "construct":
            parts = self._exception_parts(call)
        else:
            message = _message_argument(call, self.names[-1])
            parts = self._renderer().parts(message) if message is not None else None
        if parts is not None:
            self._add(level, exception, parts)


_DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)")
_STATEMENT = re.compile(
    r"\b(?:raise\s+[\w.]+\(|assert\s|_?(?:logger|log|LOGGER|_LOGGER)\.\w+\("
    # the messages built without a raise of their own (`built_kind`), from the callee's owner on
    r"|(?:\w+\.)*(?:_?[A-Z]\w*(?:Error|Exception|ErrorResponse)|_?create_\w*error_response|JSONResponse"
    r"|SystemExit|warn|warn_explicit|exit)\()"
)
_MESSAGE_ASSIGN = re.compile(r"^\s*(\w+)\s*\+?=\s*(?:[rfbu]{0,2}[\"']|\(\s*$|\(\s*[rfbu]{0,2}[\"'])")
_MAX_LINES = 40


def _snippet(lines: list[str], index: int, column: int) -> tuple[str, int] | None:
    """The statement starting at lines[index][column:], dedented, and the index after it."""
    first = lines[index][column:]
    for end in range(index + 1, min(len(lines), index + _MAX_LINES) + 1):
        text = "\n".join([first, *lines[index + 1 : end]])
        depth = text.count("(") + text.count("[") + text.count("{")
        depth -= text.count(")") + text.count("]") + text.count("}")
        # messages hold unbalanced parentheses ("(4.00 GiB KV cache is needed"), so a line that closes
        # a call is worth a parse even when the count says it is open
        if depth > 0 and end < len(lines) and not text.rstrip().endswith(")"):
            continue
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        return text, end
    return None


def _header_end(lines: list[str], index: int, column: int) -> int:
    """The index after the header of the def/class at lines[index]. A signature spread over lines
    ends in a line such as ") -> None:" at the def's own indentation, which is no new statement and
    must not close the def's scope; the header ends where it parses, with a body added if need be."""
    for end in range(index + 1, min(len(lines), index + _MAX_LINES) + 1):
        header = "\n".join(line[column:] for line in lines[index:end])
        for text in (header, header + "\n pass"):  # "def f(): return x" holds its own body
            try:
                ast.parse(text)
            except SyntaxError:
                continue
            return end
    return index + 1


_PYTHON_LINES = re.compile(r"\r\n|\r|\n")
Scope = tuple[str, ...]  # the names of the classes and functions around a line, outermost first


class Definition(NamedTuple):
    """A def or class of a module: its scope (its own name last), whether it is a class, and its
    lines as `splitlines` indexes (from 0): the first, the body's first, the last."""

    scope: Scope
    is_class: bool
    first: int
    body: int
    last: int


def definitions(source: str) -> list[Definition] | None:
    """Every def and class of a module, outer ones before those inside them, read with `ast`: a
    def's body runs to its `end_lineno`, whatever the indentation of the lines inside it (a
    triple-quoted string's lines at column 0, a signature's `) -> None:`). None when the module does
    not parse with this Python, or holds a separator `splitlines` counts and Python does not (a form
    feed), so its line numbers would not be `splitlines` indexes."""
    lines = len(_PYTHON_LINES.findall(source)) + (0 if source.endswith(("\n", "\r")) else 1)
    if source and lines != len(source.splitlines()):
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: list[Definition] = []
    pending: list[tuple[ast.AST, Scope]] = [(tree, ())]
    while pending:
        node, scope = pending.pop(0)
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, child.name)
                body = child.body[0].lineno if child.body else child.lineno
                last = child.end_lineno or body
                kind = isinstance(child, ast.ClassDef)
                found.append(Definition(inner, kind, child.lineno - 1, body - 1, last - 1))
            pending.append((child, inner))
    return found


def scopes(source: str) -> list[Scope] | None:
    """The scope of each of `source.splitlines()` (`definitions`), or None where they are unknown."""
    found = definitions(source)
    if found is None:
        return None
    out: list[Scope] = [()] * len(source.splitlines())
    for definition in found:  # outer ones first: the defs inside overwrite their own lines
        out[definition.body : definition.last + 1] = [definition.scope] * (
            definition.last - definition.body + 1
        )
    return out


def templates_in(source: str) -> list[tuple[str, Found]]:
    """Templates of one module. Only the statements that can print a message (and the message
    variables assigned before them) are parsed as statements; the enclosing function of each comes
    from the module's scopes (`scopes`), read by indentation where the module does not parse."""
    lines = source.splitlines()
    by_line = scopes(source)
    scope: list[tuple[int, str]] = []
    collectors: dict[str, Collector] = {}
    order: list[Collector] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            index += 1
            continue
        indent = len(line) - len(stripped)
        definition = _DEF.match(line)
        if definition or not line.startswith((" ", "\t")):
            while scope and scope[-1][0] >= indent:
                scope.pop()
        if definition:
            scope.append((indent, definition.group(3)))
            index = _header_end(lines, index, indent)
            continue
        statement = _STATEMENT.search(line)
        assign = None if statement else _MESSAGE_ASSIGN.match(line)
        if statement is None and assign is None:
            index += 1
            continue
        found = _snippet(lines, index, statement.start() if statement else indent)
        if found is None:
            index += 1
            continue
        names = list(by_line[index]) if by_line is not None else [n for _, n in scope]
        text, index = found
        name = ".".join(names) or "<module>"
        collector = collectors.get(name)
        if collector is None:
            collector = collectors[name] = Collector()
            collector.scope = names
            collector.names = [{}]
            order.append(collector)
        collector.visit(ast.parse(text))
    return [item for collector in order for item in collector.found]


def releases(cache: Path) -> list[str]:
    found = [p.name for p in cache.iterdir() if (p / "vllm").is_dir()]
    return sorted(found, key=version_key)


def _extractor_digest() -> str:
    """Changes whenever the extraction code changes, so cached results are never stale."""
    parts = [
        Renderer,
        Collector,
        percent_parts,
        format_parts,
        join,
        _hole,
        _stringish,
        built_kind,
        _callee,
        _message_keyword,
        _in_body,
        _message_argument,
        _header_end,
        definitions,
        scopes,
        templates_in,
    ]
    source = "".join(inspect.getsource(part) for part in parts)
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()


def _parse_file(path: Path) -> list[tuple[str, Found]]:
    return templates_in(path.read_text(encoding="utf-8", errors="replace"))


def walk(cache: Path, versions: list[str]) -> Iterator[tuple[str, str, str, Found]]:
    """Every template of every release (see `walk_trees`)."""
    yield from walk_trees(cache, [(v, cache / v, ("vllm",)) for v in versions])


Tree = tuple[str, Path, tuple[str, ...]]  # (release, its folder, the package folders inside it)


def plugin_trees(cache: Path) -> list[Tree]:
    """The cached releases of the platform plugins and forks (tools/vllm_sources.py PLUGINS)."""
    return [
        (version, plugins_dir(cache) / dist / version, SOURCES[dist][0])
        for dist, versions in plugin_releases(cache, SOURCES).items()
        for version in versions
    ]


def walk_trees(cache: Path, trees: list[Tree]) -> Iterator[tuple[str, str, str, Found]]:
    """Every template of every tree. A file is parsed once per content (most files are unchanged
    between releases), in parallel, and the result is kept in the source cache for the next rerun."""
    store = cache / f".templates-{_extractor_digest()}.pickle"
    known: dict[bytes, list[tuple[str, Found]]] = {}
    if store.is_file():
        known = pickle.loads(store.read_bytes())
    files: list[tuple[str, str, bytes]] = []
    todo: dict[bytes, Path] = {}
    for version, base, packages in trees:
        for package in packages:
            for path in sorted((base / package).rglob("*.py")):
                digest = hashlib.blake2b(path.read_bytes(), digest_size=16).digest()
                files.append((version, path.relative_to(base).as_posix(), digest))
                if digest not in known:
                    todo.setdefault(digest, path)
    if todo:
        with multiprocessing.Pool() as pool:
            for digest, found in zip(todo, pool.imap(_parse_file, todo.values(), chunksize=32), strict=True):
                known[digest] = found
        store.write_bytes(pickle.dumps(known))
    for version, rel, digest in files:
        for function, found in known[digest]:
            yield version, rel, function, found


def plugin_package(file: str) -> tuple[str, str] | None:
    """(distribution, package) of a plugin's file (`vllm_ascend/worker/worker.py`), or None."""
    for dist, (packages, _) in SOURCES.items():
        for package in packages:
            if file.startswith(package + "/"):
                return dist, package
    return None


def engine_path(file: str) -> str:
    """The path a file's folder is judged by: a plugin's module as vLLM's of the same path
    (`vllm_ascend/distributed/kv_transfer/x.py` -> `vllm/distributed/kv_transfer/x.py`); a wrapper's
    (vllm_sources.py WRAPPERS) as its own, its layout being no copy of vLLM's."""
    owner = plugin_package(file)
    return "vllm/" + file[len(owner[1]) + 1 :] if owner and owner[0] in PLUGINS else file


# --- relevance and mapping -------------------------------------------------------------------------


def classify(entry: Entry) -> tuple[list[str], str | None]:
    """(subjects, None) for a relevant template, or ([], reason) for an irrelevant one."""
    literal = entry.text.replace(HOLE, " ")
    subjects = [name for name, pattern in SUBJECTS.items() if re.search(pattern, literal)]
    function = entry.function.rsplit(".", 1)[-1]
    subjects += [
        name
        for name, pattern in FUNCTION_SUBJECTS.items()
        if name not in subjects and re.search(pattern, function)
    ]
    if not subjects:
        return (
            [],
            "names no subject (memory, KV cache, length, parallelism, quantization, dtype, preemption,"
            " profiling)",
        )
    host = HOST_SUBJECT in subjects and re.search(SIGNALS["host memory failure"], literal)
    if subjects == [HOST_SUBJECT] and not host:
        return [], "names host memory but states no host memory failure"
    folder = NOT_ENGINE_PATH.match(engine_path(entry.file))
    if folder and not host:
        return [], f"printed by {folder.group(0)}, a subsystem other than the engine's memory"
    other = NOT_ENGINE.search(literal)
    if other and not host:
        return [], f"about a feature other than the engine's memory ({other.group(0).lower()})"
    if entry.level == "debug":
        return [], "debug level: not printed by default"
    if not any(re.search(pattern, literal) for pattern in SIGNALS.values()):
        return [], "names a subject but states no memory failure, memory figure or unmet limit"
    if entry.level not in PASTED_LEVELS and not re.search(SIGNALS["memory figure"], literal):
        return [], "an info line that states no memory figure"
    return subjects, None


def ranges(present: list[str], order: list[str]) -> list[list[str]]:
    """Contiguous runs of the releases a template appears in, as [first, last]."""
    out: list[list[str]] = []
    positions = sorted({order.index(v) for v in present})
    start = prev = positions[0]
    for pos in positions[1:]:
        if pos != prev + 1:
            out.append([order[start], order[prev]])
            start = pos
        prev = pos
    out.append([order[start], order[prev]])
    return out


GAP = "no rule matches this wording yet"


def build(cache: Path, previous: InventoryFile | None, record_gaps: bool = False) -> InventoryFile:
    order = releases(cache)
    return _inventory(
        walk(cache, order),
        lambda _file: order,
        previous,
        record_gaps,
        source="vLLM wheels (tools/vllm_sources.py), extracted with tools/vllm_templates.py",
        listed=order,
    )


def build_plugins(cache: Path, previous: InventoryFile | None, record_gaps: bool = False) -> InventoryFile:
    """The plugins' inventory: each template's versions are its plugin's releases."""
    cached = plugin_releases(cache, SOURCES)

    def order(file: str) -> list[str]:
        owner = plugin_package(file)
        assert owner is not None
        return cached[owner[0]]

    return _inventory(
        walk_trees(cache, plugin_trees(cache)),
        order,
        previous,
        record_gaps,
        source="platform plugins' and forks' wheels (tools/vllm_sources.py PLUGINS), extracted with "
        "tools/vllm_templates.py --plugins",
        listed=[f"{dist} {v}" for dist, versions in cached.items() for v in versions],
    )


def _inventory(
    found: Iterator[tuple[str, str, str, Found]],
    order_of: Callable[[str], list[str]],
    previous: InventoryFile | None,
    record_gaps: bool,
    *,
    source: str,
    listed: list[str],
) -> InventoryFile:
    entries: dict[tuple[str, str, str, str], Entry] = {}
    for version, rel, function, item in found:
        key = (item.text, rel, function, item.level)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = Entry(item.level, item.exception, item.text, item.kinds, rel, function)
        if entry.versions[-1:] != [version]:
            entry.versions.append(version)
    kept = {(d.text, d.file, d.function): d for d in previous.templates} if previous else {}
    # a decision made for a wording in a file still holds when the scope reader files the wording
    # under another function of that file (a nested helper, a def read by `ast`): the wording is
    # what was judged, not the function name
    kept_in_file = {
        (d.text, d.file): d
        for d in (previous.templates if previous else [])
        if d.decision.irrelevant or d.decision.gap
    }
    compiled = load_packs(ROOT / "rules").signatures.rules
    templates: list[Template] = []
    filtered: list[Template] = []  # irrelevant by the filter: counted by reason, not listed
    for entry in sorted(entries.values(), key=lambda e: (e.file, e.function, e.text)):
        subjects, reason = classify(entry)
        old = kept.get((entry.text, entry.file, entry.function)) or kept_in_file.get((entry.text, entry.file))
        template = Template(
            text=entry.text,
            holes=list(entry.kinds),  # type: ignore[arg-type]
            level=entry.level,  # type: ignore[arg-type]
            exception=entry.exception,
            file=entry.file,
            function=entry.function,
            versions=ranges(entry.versions, order_of(entry.file)),
            subjects=subjects,
        )
        if reason is not None:
            filtered.append(msgspec.structs.replace(template, decision=Decision(irrelevant=reason)))
            continue
        decision: Decision
        rules = rules_matching(compiled, template)
        if rules:
            decision = Decision(rules=rules)
        elif old is not None and old.decision.irrelevant:
            decision = Decision(irrelevant=old.decision.irrelevant)
        elif old is not None and old.decision.gap:
            decision = Decision(gap=old.decision.gap)
        else:
            decision = Decision(gap=GAP) if record_gaps else Decision()
        templates.append(msgspec.structs.replace(template, decision=decision))
    return InventoryFile(
        source=source,
        releases=listed,
        # a relevant template a person marked irrelevant stays listed with the reason, so that a
        # rerun keeps the decision
        templates=templates,
        irrelevant=summarize_irrelevant(filtered),
    )


def summarize_irrelevant(templates: list[Template]) -> dict[str, int]:
    """Irrelevant templates are counted by reason, not listed: the filter above is their record."""
    counts: dict[str, int] = defaultdict(int)
    for template in templates:
        if template.decision.irrelevant:
            counts[template.decision.irrelevant] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed inventory is stale")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--plugins", action="store_true", help="the platform plugins' and forks' inventory (PLUGINS)"
    )
    parser.add_argument(
        "--record-gaps",
        action="store_true",
        help="record relevant templates no rule matches as known gaps (the inventory test fails on "
        "undecided ones); say so in the commit",
    )
    args = parser.parse_args(argv)
    cache = cache_dir()
    if not cache.is_dir() or not releases(cache):
        print(
            f"no extracted vLLM releases under {cache}; run: python tools/vllm_sources.py fetch",
            file=sys.stderr,
        )
        return 2
    args.output = args.output or (PLUGIN_OUTPUT if args.plugins else OUTPUT)
    if args.plugins and not plugin_releases(cache, SOURCES):
        print(
            f"no plugin releases under {plugins_dir(cache)}; run: python tools/vllm_sources.py plugins",
            file=sys.stderr,
        )
        return 2
    previous = read_inventory(args.output) if args.output.is_file() else None
    inventory = (build_plugins if args.plugins else build)(cache, previous, args.record_gaps)
    text = dump_inventory(inventory)
    if args.check:
        stale = not args.output.is_file() or args.output.read_text(encoding="utf-8") != text
        print("stale" if stale else "up to date")
        return 1 if stale else 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    relevant = inventory.templates
    mapped = sum(1 for t in relevant if t.decision.rules)
    print(
        f"{len(relevant) + sum(inventory.irrelevant.values())} templates, {len(relevant)} relevant, "
        f"{mapped} matched by a rule, {sum(1 for t in relevant if t.decision.gap)} known gaps, "
        f"{sum(1 for t in relevant if t.decision.is_open())} unmapped -> {args.output}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
