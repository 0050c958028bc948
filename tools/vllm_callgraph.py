"""Which start-up stage each vLLM function runs in, per release, from vLLM's released sources.

For every release `tools/vllm_sources.py fetch` extracted, every function is read (its scope by
`ast`, see `functions_in`) and the names it calls are collected. Calls are resolved by name only, which
is approximate on purpose:

- `self.x(...)` / `cls.x(...)` -> methods named `x` of the same class, else of any class;
- `x(...)` -> a function `x` of the same module, else any module-level function `x`; a call of a
  class `X(...)` -> `X.__init__`;
- `obj.x(...)` / `module.x(...)` -> any function or method named `x`, unless `x` is a name so common
  (`forward`, `get`, `update`, ...) that following it would reach everything.

From each stage's entry points (`ENTRY_POINTS`, data) a breadth-first walk of `MAX_DEPTH` calls marks
every function it reaches with that stage. A function reached from one stage only is written to
`rules/frames/vllm.json`, keyed by its file (the path after `vllm/`) and name, with the releases it
appears in; one reached from several stages says nothing and is left out. A stage's entry that
another stage's walk calls (V0's `profile_run` -> `self.execute_model`) is reached from both; what a
model's `forward` reaches (`MODEL_RUN`: layers, custom ops, attention backends, samplers) is shared by
every stage that runs the model; special methods other than `__init__` belong to no stage.

The platform plugins and forks cached by `tools/vllm_sources.py plugins` (PLUGINS) are read the same
way, each release on its own (`plugin_functions`): their rows are keyed by the plugin's own path
(`vllm_ascend/worker/model_runner_v1.py`) and hold for every vLLM release, their phases from
`rules/inventory/plugins.yaml`.

Where the templates a function raises (from `rules/inventory/vllm.yaml`), itself or through the
methods of its class it calls on `self` (`HELPER_DEPTH`), all belong to one phase, the frame also
names that phase, so a traceback cut before its exception line can still be placed.

    python tools/vllm_callgraph.py            # rewrite rules/frames/vllm.json
    python tools/vllm_callgraph.py --check    # exit 1 when the committed table is stale
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import multiprocessing
import pickle
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from vllm_sources import PLUGINS, cache_dir, plugin_releases, plugins_dir  # noqa: E402
from vllm_templates import definitions, ranges  # noqa: E402

from service.diagnosis.frames import OOM_PHASE  # noqa: E402
from service.packs import load_packs  # noqa: E402
from service.packs.inventory import read_inventory, version_key  # noqa: E402

OUTPUT = ROOT / "rules" / "frames" / "vllm.json"
INVENTORY = ROOT / "rules" / "inventory" / "vllm.yaml"
PLUGIN_INVENTORY = ROOT / "rules" / "inventory" / "plugins.yaml"
# The platform plugins and forks (tools/vllm_sources.py PLUGINS) run their own workers, model runners
# and executors, whose stage entry points keep vLLM's names (`load_model`, `profile_run`,
# `compile_or_warm_up_model`, `initialize_kv_cache`, `execute_model`) while what they call does not
# (vllm-spyre's `_warmup_spyre_fixed_size`, tpu-inference's `_precompile_backbone_text_only`). Each
# cached release of a plugin is walked on its own from the same entry points, a module read as vLLM's
# of the same path for the folder rules (`vllm_ascend/worker/worker.py` as `vllm/worker/worker.py`),
# and its rows are keyed by the plugin's own path. Triton is a kernel compiler, not an engine: its
# refusals are in the plugins' inventory, its functions are no stage's.
KERNEL_LIBRARIES = ("triton",)
MAX_DEPTH = 4

# Stage -> (function names that start it, folders of vLLM whose functions of that name count).
# Stages are the signature packs' (`warmup` covers CUDA-graph capture; `kv_cache` is the cache
# allocation after profiling; `config` the checks of engine arguments).
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    # a worker setting up its device before the model loads: the distributed environment, the memory
    # snapshot and V1's start-up check of free memory against gpu_memory_utilization (`init_device`
    # -> `request_memory` from 0.14)
    "device": ("init_device",),
    "loading": (
        "load_model",
        "load_weights",
        "process_weights_after_loading",
        "_initialize_model",
        "initialize_model",
        "get_model",
        "create_weights",
        "weight_loader",
    ),
    "profiling": (
        "profile_run",
        "determine_available_memory",
        "determine_num_available_blocks",
        "_dummy_run",
        "_dummy_sampler_run",
        "_dummy_pooler_run",
        "profile_num_available_blocks",
    ),
    # V0's `Worker._warm_up_model` captures the graphs (`self.model_runner.capture_model`) after the
    # cache is allocated
    "warmup": (
        "capture_model",
        # 0.2.7-0.3.3 `Worker.warm_up_model` (dispatched as `_run_workers("warm_up_model")` after the
        # cache engine is built) captures the graphs the way `_warm_up_model` does from 0.4
        "warm_up_model",
        "_capture_cudagraphs",
        "compile_or_warm_up_model",
        "warming_up_model",
        "_warm_up_model",
        # the HPU model runners' warm-up of every bucket and graph (vLLM 0.6-0.9 `HPUModelRunner`,
        # vllm-gaudi's), vllm-spyre's and other plugins' after the cache is sized
        "warmup_model",
    ),
    # sizing the cache from what profiling left (V1 `get_kv_cache_config(s)`, which checks one request
    # fits) and allocating it (V1's worker RPC `initialize_from_config`, V0 `_init_cache_engine`)
    "kv_cache": (
        "initialize_cache",
        "initialize_from_config",
        "get_kv_cache_config",
        "get_kv_cache_configs",
        "initialize_kv_cache",
        "check_enough_kv_cache_memory",
        "_allocate_kv_cache_tensors",
        "_allocate_kv_cache",
        "allocate_kv_cache",
        "_init_cache",
        "init_cache_engine",
    ),
    "serving": ("execute_model", "step", "step_async", "_process_model_outputs", "run_busy_loop"),
    "config": (
        "_check_scheme_supported",
        "get_scheme",
        "verify_with_parallel_config",
        "divide",
        "_verify_args",
        "_verify_quantization",
        "_verify_cuda_graph",
        "verify_async_output_proc",
        "_verify_bnb_config",
        "_verify_dtype",
        "_get_and_verify_dtype",
        "_get_and_verify_max_len",
        "_check_if_gpu_supports_dtype",
        "check_if_gpu_supports_dtype",
        "get_quant_config",
    ),
}
# Request handlers: the engine's API above the serving loop (V0 `AsyncLLMEngine.generate` ->
# `_process_request`, V1 `AsyncLLM.generate`), which runs only once the engine serves. They are serving
# frames themselves; what they call is not walked, since a request reaches every part of the engine.
REQUEST_HANDLERS = ("generate", "_process_request", "add_request", "encode", "abort")
REQUEST_FOLDERS = ("vllm/engine/", "vllm/v1/engine/")
# The OpenAI-compatible server's request path: the route handlers of `entrypoints/openai/api_server.py`
# (`@router.post("/v1/chat/completions")` -> `create_chat_completion`) and the serving classes' methods
# they await (`OpenAIServingChat.create_chat_completion` -> `OpenAIServing._preprocess_chat` ->
# `_tokenize_prompt_input_async` -> `_validate_input`, which refuses a request longer than
# max_model_len), and the engine's request API above (`REQUEST_HANDLERS`: `AsyncLLM.add_request` ->
# `Processor.process_inputs` -> `_validate_model_inputs`). A walk from them (`REQUEST_ENTRIES`) marks what
# it reaches inside the request path's folders (`REQUEST_PATH`) as serving; the server's start-up
# (`run_server`, `build_async_engine_client`) is outside it, and the stages' walks do not enter
# `entrypoints/` (a name shared with the engine, `generate`, is not the engine's call).
REQUEST_ENTRIES = (
    "create_chat_completion",
    "create_completion",
    "create_embedding",
    "create_pooling",
    "create_score",
    "create_classify",
    "create_transcription",
    "create_translation",
    "create_responses",
    "create_tokenize",
    "do_rerank",
    "chat_completion_stream_generator",
    "chat_completion_full_generator",
    "completion_stream_generator",
)
REQUEST_PATH = (
    "vllm/entrypoints/",
    "vllm/v1/engine/processor.py",
    "vllm/v1/engine/input_processor.py",
    "vllm/renderers/",
)
SERVER_FOLDERS = ("vllm/entrypoints/",)
# Engine construction: the constructors of engines, executors and workers run every start-up stage
# in turn, so a traceback whose deepest known frame is one of them failed during start-up, in a stage
# the cut traceback does not show (`init`). Like request handlers they are marked and not walked; a
# constructor some stage's walk also reaches says nothing and is left out.
CONSTRUCTORS = ("from_engine_args", "from_vllm_config", "_init_engine", "__init__", "_init_executor")
# The engine's start-up sequence, which runs stages in turn like a constructor: V0
# `LLMEngine._initialize_kv_caches` profiles (`determine_num_available_blocks`), then allocates and
# warms up (`initialize_cache`); V1 `EngineCore._initialize_kv_caches` profiles
# (`determine_available_memory`), sizes the cache and has the workers allocate it and warm up
# (`initialize_from_config`). A traceback that stops in it failed during start-up, stage not shown.
STARTUP_SEQUENCES = ("_initialize_kv_caches",)
# Executors run a worker method named by a string (V0 `self._run_workers("load_model")`, the Ray
# wrapper's `execute_method.remote("init_device")`, V1 `self.collective_rpc("compile_or_warm_up_model")`,
# which the worker resolves through `run_method`). A dispatcher runs whichever stage's method it is
# given, so its own frame says nothing and is left out of the table; the call it dispatches is an edge
# to every method of that name (`DISPATCHED` in service/diagnosis/frames.py reads the same calls).
DISPATCHERS = ("collective_rpc", "_run_workers", "execute_method", "run_method", "_run_workers_async")
_DISPATCH = re.compile(
    r"\b(?:" + "|".join(DISPATCHERS) + r")(?:\.remote)?\(\s*(?:method\s*=\s*)?[\"'](\w+)[\"']"
)
CONSTRUCTOR_FOLDERS = (
    "vllm/engine/",
    "vllm/v1/engine/",
    "vllm/executor/",
    "vllm/v1/executor/",
    "vllm/worker/",
    "vllm/v1/worker/",
)
# Folders whose functions no stage's entry point calls: skipped to keep a rerun short.
SKIPPED = re.compile(
    r"^vllm/(?:entrypoints/(?:cli|openai/tool_parsers|openai/reasoning|sagemaker)|benchmarks|lora|multimodal|transformers_utils|tool_parsers|reasoning|third_party"
    r"|vllm_flash_attn|v1/structured_output|model_executor/guided_decoding|profiler|plugins|usage|assets"
    r"|scripts|logging_utils|v1/metrics|engine/output_processor|tokenizers)/"
)
# Model classes' constructors build the layers and allocate the weights: loading.
MODEL_FOLDERS = ("vllm/model_executor/models/",)
# Running the model: what a model's `forward` reaches (its layers, the quantization methods' `apply`,
# attention backends and their metadata builders, custom ops, samplers) runs in every stage that runs
# the model: the profile run, CUDA-graph capture and warm-up, and serving. A walk from these methods
# (MODEL_RUN, the folders they are read in) marks what it reaches as shared by all of them, so such a
# frame places nothing and the stage comes from the frames outside it. (The stages' own walks miss this
# sharing: `self.model(...)` is a `__call__`, and `forward`/`apply` are names too common to follow.)
MODEL_RUN = re.compile(
    r"^_?(?:forward\w*|apply|apply_weights|compute_logits|sample|build|build_for_cudagraph_capture)$"
)
MODEL_RUN_FOLDERS = (
    "vllm/model_executor/",
    "vllm/attention/",
    "vllm/v1/attention/",
    "vllm/v1/sample/",
    "vllm/kernels/",
)
RUNS_THE_MODEL = ("profiling", "warmup", "serving")
# Names too common to follow through `obj.x(...)`: following them would reach every module.
COMMON = frozenset(  # noqa: SIM905 (a word list reads better as one string)
    [
        "forward",
        "__call__",
        "get",
        "set",
        "update",
        "append",
        "extend",
        "items",
        "keys",
        "values",
        "pop",
        "copy",
        "clone",
        "to",
        "view",
        "item",
        "run",
        "start",
        "stop",
        "close",
        "join",
        "wait",
        "put",
        "send",
        "recv",
        "apply",
        "reset",
        "clear",
        "add",
        "remove",
        "format",
        "split",
        "strip",
        "sum",
        "max",
        "min",
        "mean",
        "any",
        "all",
        "zero_",
        "fill_",
        "cuda",
        "cpu",
        "numpy",
        "tolist",
        "size",
        "dim",
        "shape",
        "reshape",
        "contiguous",
        "info",
        "warning",
        "error",
        "debug",
        "exception",
        "warning_once",
        "info_once",
        "__init__",
        "__post_init__",
        "cat",
        "stack",
        "empty",
        "zeros",
        "ones",
        "full",
        "arange",
        "tensor",
        "record",
        "synchronize",
        "submit",
        "result",
        "cancel",
        "get_nowait",
    ]
)
# Phase of a frame whose raised templates are all of one subject, where no rule phase decides.
SUBJECT_PHASE = {
    "quantization": "quantization_config",
    "parallelism": "parallelism_config",
    "dtype": "dtype_unsupported",
    "kv_cache": "kv_cache_capacity",
}


@dataclass
class Function:
    """A function as the call graph sees it: where it is, and the names it calls."""

    file: str
    qualname: str
    name: str
    owner: str | None
    self_calls: set[str] = field(default_factory=set)
    plain_calls: set[str] = field(default_factory=set)
    attr_calls: set[str] = field(default_factory=set)
    dispatched: set[str] = field(default_factory=set)  # worker methods run by name (DISPATCHERS)


_DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)")
_SELF_CALL = re.compile(r"\b(?:self|cls|super\(\))\.(\w+)\(")
_ATTR_CALL = re.compile(r"(?<!self)(?<!cls)(?<!super\(\))\.(\w+)\(")
_PLAIN_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(")
_KEYWORDS = frozenset(
    ["if", "elif", "while", "for", "return", "not", "and", "or", "in", "is", "lambda", "yield", "await"]
    + ["assert", "del", "print", "with", "except"]
)


def functions_in(path: Path, rel: str) -> list[Function]:
    """The functions of one module and the names they call: a function's lines are those `ast` puts
    in its body (`vllm_templates.definitions`), less those of the defs inside it, and a call is a
    name followed by `(` on them (call resolution by name is approximate anyway: strings and
    comments can add a spurious name)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    found = definitions(text)
    if found is None:
        return _functions_by_indent(text, rel)
    lines = text.splitlines()
    owner_of: list[Function | None] = [None] * len(lines)
    functions: list[Function] = []
    kinds = {d.scope: d.is_class for d in found}
    for definition in found:  # outer defs first: the defs inside overwrite their own lines
        span = range(definition.body, definition.last + 1)
        if definition.is_class:
            continue  # a class's own statements belong to the function around it, if any
        parent = definition.scope[:-1]
        owner = parent[-1] if parent and kinds.get(parent) else None
        function = Function(rel, ".".join(definition.scope), definition.scope[-1], owner)
        functions.append(function)
        for index in span:
            owner_of[index] = function
    bodies: dict[int, list[str]] = {id(f): [] for f in functions}
    for index, function in enumerate(owner_of):
        stripped = lines[index].lstrip()
        if function is not None and stripped and stripped[0] != "#":
            bodies[id(function)].append(stripped)
    _read_calls(functions, bodies)
    return functions


def _read_calls(functions: list[Function], bodies: dict[int, list[str]]) -> None:
    for function in functions:
        body = "\n".join(bodies[id(function)])
        function.self_calls.update(_SELF_CALL.findall(body))
        function.attr_calls.update(n for n in _ATTR_CALL.findall(body) if n not in COMMON)
        function.plain_calls.update(n for n in _PLAIN_CALL.findall(body) if n not in _KEYWORDS)
        function.dispatched.update(_DISPATCH.findall(body))


def _functions_by_indent(text: str, rel: str) -> list[Function]:
    """`functions_in` for a module that does not parse with this Python: a function's body is the
    lines indented deeper than its `def`."""
    scope: list[tuple[int, str, Function | None]] = []
    functions: list[Function] = []
    bodies: dict[int, list[str]] = {}
    current: Function | None = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] == "#":
            continue
        indent = len(line) - len(stripped)
        starts_block = stripped.startswith(("def ", "async def ", "class "))
        # a line opening with a closing bracket continues the statement above it (the ") -> None:"
        # ending a signature spread over lines): it closes no def, whatever its indentation
        if starts_block or (indent == 0 and stripped[0] not in ")]}"):
            while scope and scope[-1][0] >= indent:
                scope.pop()
            current = next((f for _, _, f in reversed(scope) if f is not None), None)
        definition = _DEF.match(line) if starts_block else None
        if definition:
            kind, name = definition.group(2), definition.group(3)
            if kind == "class":
                scope.append((indent, name, None))
                continue
            in_class = bool(scope) and scope[-1][2] is None
            qual = ".".join([*(n for _, n, _ in scope), name])
            current = Function(rel, qual, name, scope[-1][1] if in_class else None)
            functions.append(current)
            bodies[id(current)] = []
            scope.append((indent, name, current))
            continue
        if current is not None:
            bodies[id(current)].append(stripped)
    _read_calls(functions, bodies)
    return functions


def _parse(item: tuple[Path, str]) -> list[Function]:
    return functions_in(*item)


def _extractor_digest() -> str:
    parts = (Function, functions_in, _functions_by_indent, _read_calls, definitions)
    source = "".join(inspect.getsource(x) for x in parts)
    source += " ".join(sorted(COMMON)) + _DISPATCH.pattern
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()


def release_functions(cache: Path, versions: list[str]) -> dict[str, list[Function]]:
    """Every release's functions; a file is parsed once per content, in parallel, cached on disk."""
    return tree_functions(cache, {version: cache / version / "vllm" for version in versions})


def plugin_functions(cache: Path) -> dict[tuple[str, str], list[Function]]:
    """(package, `dist version`) -> the functions of each cached release of an engine plugin's
    package, each module named as vLLM's of the same path (`vllm/worker/worker.py`)."""
    trees: dict[str, Path] = {}
    for dist, versions in plugin_releases(cache).items():
        if dist in KERNEL_LIBRARIES:
            continue
        for version in versions:
            for package in PLUGINS[dist][0]:
                trees[f"{package}\0{dist} {version}"] = plugins_dir(cache) / dist / version / package
    found = tree_functions(cache, trees)
    return {tuple(key.split("\0", 1)): functions for key, functions in found.items()}  # type: ignore[misc]


def tree_functions(cache: Path, trees: dict[str, Path]) -> dict[str, list[Function]]:
    """Key -> the functions of the package folder it names (vLLM's `vllm/`, or a plugin's read as it),
    each module as `vllm/<path inside the folder>`; a file is parsed once per content, in parallel,
    cached on disk."""
    store = cache / f".callgraph-{_extractor_digest()}.pickle"
    known: dict[bytes, list[Function]] = pickle.loads(store.read_bytes()) if store.is_file() else {}
    files: dict[str, list[tuple[str, bytes]]] = {}
    todo: dict[bytes, tuple[Path, str]] = {}
    for key, folder in trees.items():
        listed = files.setdefault(key, [])
        for path in sorted(folder.rglob("*.py")):
            rel = "vllm/" + path.relative_to(folder).as_posix()
            if SKIPPED.match(rel):
                continue
            digest = hashlib.blake2b(path.read_bytes() + rel.encode(), digest_size=16).digest()
            listed.append((rel, digest))
            if digest not in known:
                todo.setdefault(digest, (path, rel))
    if todo:
        with multiprocessing.Pool() as pool:
            for digest, found in zip(todo, pool.imap(_parse, todo.values(), chunksize=32), strict=True):
                known[digest] = found
        store.write_bytes(pickle.dumps(known))
    return {v: [f for _, d in listed for f in known[d]] for v, listed in files.items()}


def stages_of(functions: list[Function]) -> dict[tuple[str, str], set[str]]:
    """(file, qualname) -> the stages whose entry points reach it within MAX_DEPTH calls."""
    by_name: dict[str, list[Function]] = defaultdict(list)
    by_class: dict[tuple[str, str], list[Function]] = defaultdict(list)
    by_module_class: dict[tuple[str, str, str], list[Function]] = defaultdict(list)
    module_level: dict[tuple[str, str], Function] = {}
    classes: set[str] = set()
    for function in functions:
        by_name[function.name].append(function)
        if function.owner:
            by_class[(function.owner, function.name)].append(function)
            by_module_class[(function.file, function.owner, function.name)].append(function)
            classes.add(function.owner)
        else:
            module_level[(function.file, function.name)] = function
    inits = {f.owner: f for f in functions if f.name == "__init__" and f.owner}

    def callees(function: Function) -> list[Function]:
        out: list[Function] = []
        for name in function.self_calls:
            # the method of the class in the same module first: two releases' runners share a class
            # name (0.33's `v1/worker/gpu/model_runner.py` and `gpu_model_runner.py` `GPUModelRunner`)
            own = by_module_class.get((function.file, function.owner or "", name)) or by_class.get(
                (function.owner or "", name)
            )
            out.extend(own or [f for f in by_name.get(name, ()) if f.owner])
        for name in function.plain_calls:
            if name in inits:
                out.append(inits[name])
            elif (function.file, name) in module_level:
                out.append(module_level[(function.file, name)])
            else:
                out.extend(f for f in by_name.get(name, ()) if f.owner is None)
        for name in function.attr_calls | function.dispatched:
            out.extend(by_name.get(name, ()))
        return out

    def walk(stage: str, starts: list[Function], within: tuple[str, ...] | None = None) -> None:
        frontier = [f for f in starts if entry_stage.get(f.name, stage) == stage]
        seen = {id(f) for f in frontier}
        for depth in range(MAX_DEPTH + 1):
            following: list[Function] = []
            for function in frontier:
                reached[(function.file, function.qualname)].add(stage)
                if depth == MAX_DEPTH:
                    continue
                for callee in callees(function):
                    if id(callee) in seen or callee.name in COMMON or _special(callee.name):
                        continue
                    # the stages' walks stay out of the server; the request walk inside its path
                    if within is None and callee.file.startswith(SERVER_FOLDERS):
                        continue
                    if within is not None and not callee.file.startswith(within):
                        continue
                    seen.add(id(callee))
                    other = entry_stage.get(callee.name, stage)
                    if other != stage and within is None:
                        if _runs_both(stage, other):
                            # another stage's entry run by this one's model runs (V0's `profile_run`
                            # calls `self.execute_model`): specific to neither; not followed
                            reached[(callee.file, callee.qualname)].add(stage)
                    elif callee.name not in STARTUP_SEQUENCES:  # runs several stages: not followed
                        following.append(callee)
            frontier = following

    reached: dict[tuple[str, str], set[str]] = defaultdict(set)
    entry_stage = {name: stage for stage, names in ENTRY_POINTS.items() for name in names}
    walks = {
        stage: [f for name in names for f in by_name.get(name, ()) if not f.file.startswith(SERVER_FOLDERS)]
        for stage, names in ENTRY_POINTS.items()
    }
    walks["loading"] += [f for f in functions if f.name == "__init__" and f.file.startswith(MODEL_FOLDERS)]
    walks[MODEL_RUN_STAGE] = [
        f for f in functions if MODEL_RUN.match(f.name) and f.owner and f.file.startswith(MODEL_RUN_FOLDERS)
    ]
    for stage, starts in walks.items():
        walk(stage, starts)
    requests = [
        f
        for f in functions
        if (f.name in REQUEST_ENTRIES and f.file.startswith(SERVER_FOLDERS))
        or (f.name in REQUEST_HANDLERS and f.file.startswith(REQUEST_FOLDERS))
    ]
    walk("serving", requests, REQUEST_PATH)
    for function in functions:
        if function.name in REQUEST_HANDLERS and function.file.startswith(REQUEST_FOLDERS):
            reached[(function.file, function.qualname)].add("serving")
        if function.name in CONSTRUCTORS + STARTUP_SEQUENCES and function.file.startswith(
            CONSTRUCTOR_FOLDERS
        ):
            reached[(function.file, function.qualname)].add("init")
    return reached


MODEL_RUN_STAGE = "model"  # the walk from MODEL_RUN: shared by RUNS_THE_MODEL, never a row's stage


def _runs_both(stage: str, other: str) -> bool:
    """Whether a call from `stage` into `other`'s entry makes that entry shared: both run the model
    and an out-of-memory error means another phase in each (a profile run calling the serving step's
    `execute_model`; warm-up calling profiling's `_dummy_sampler_run` is warmup_oom either way)."""
    if stage not in RUNS_THE_MODEL or other not in RUNS_THE_MODEL:
        return False
    return OOM_PHASE[stage] != OOM_PHASE[other]


def _special(name: str) -> bool:
    """Whether a function is a special method other than a constructor (`__repr__`, `__str__`,
    `__new__`, `__setattr__`): Python calls it from anywhere (a log line's `%s`, an attribute set), so
    it belongs to no stage, and a call of it by name reaches every class's."""
    return name.startswith("__") and name.endswith("__") and name != "__init__"


@functools.cache
def _read_once(root: Path, path: Path = INVENTORY) -> tuple[Any, dict[str, Any]]:
    """The inventory and the rules by id, read once for every release's `raised_phases`."""
    return read_inventory(path), load_packs(root).signatures.by_id


def raised_phases(
    root: Path, version: str | None = None, inventory_path: Path = INVENTORY, package: str = "vllm"
) -> dict[tuple[str, str], set[str]]:
    """(file, function) -> phases of the failure templates it raises (rule phase, else subject), in
    `version` when given (a check a later release added to a function is not its error before). A
    plugin's (`package`, from rules/inventory/plugins.yaml) are keyed as its modules are read,
    `vllm/<path inside the package>`."""
    if not inventory_path.is_file():
        return {}
    inventory, rules = _read_once(root, inventory_path)
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for template in inventory.templates:
        if not template.file.startswith(f"{package}/"):
            continue
        file = "vllm/" + template.file.removeprefix(f"{package}/")
        if template.level not in ("raise", "assert"):
            continue
        if version is not None and not any(
            version_key(low) <= version_key(version) <= version_key(high) for low, high in template.versions
        ):
            continue
        phases = {
            rules[r].rule.phase
            for r in template.decision.rules
            if r in rules and rules[r].rule.kind == "failure" and rules[r].rule.phase
        }
        if not phases:
            phases = {SUBJECT_PHASE[s] for s in template.subjects if s in SUBJECT_PHASE}
        if len(phases) == 1:
            out[(file, template.function)] |= {p for p in phases if p}
        elif phases:
            out[(file, template.function)].add("<several>")
    return out


# How many calls deep a method's own helpers (methods of its class it calls on `self`) count as its
# errors: `CompressedTensorsConfig.get_scheme` raises the capability check through
# `self._get_scheme_from_parts` -> `self._check_scheme_supported`.
HELPER_DEPTH = 2


def with_helpers(
    functions: list[Function], phases: dict[tuple[str, str], set[str]]
) -> dict[tuple[str, str], set[str]]:
    """(file, qualname) -> the phases a method raises itself or through its own class's methods it
    calls on `self` (HELPER_DEPTH deep): one release's view of `raised_phases`."""
    methods = {(f.file, f.owner, f.name): f for f in functions if f.owner}

    def reach(function: Function, depth: int) -> set[str]:
        found = set(phases.get((function.file, function.qualname), ()))
        if depth and function.owner:
            for name in function.self_calls:
                helper = methods.get((function.file, function.owner, name))
                if helper is not None and helper is not function:
                    found |= reach(helper, depth - 1)
        return found

    return {(f.file, f.qualname): reach(f, HELPER_DEPTH) for f in functions}


Placed = dict[tuple[str, str], dict[str | None, set[tuple[str, str | None]]]]


def _placed(functions: list[Function], raised_by: dict[tuple[str, str], set[str]], prefix: str) -> Placed:
    """One release's (file, name) -> owner (class, or the function a def is nested in) -> its (stage,
    phase)s, the file after `vllm/` (a plugin's after `prefix`, its package)."""
    phases = with_helpers(functions, raised_by)
    placed: Placed = defaultdict(lambda: defaultdict(set))
    for (file, qualname), stages in stages_of(functions).items():
        owner, _, name = qualname.rpartition(".")
        # a dispatcher's own frames, and those of the helpers defined inside it, say nothing
        dispatcher = any(part in DISPATCHERS for part in qualname.split("."))
        if len(stages) != 1 or MODEL_RUN_STAGE in stages or dispatcher or _special(name):
            continue
        # a constructor or start-up sequence runs every stage: only its own raises are its errors
        own = "init" in stages
        raised = (raised_by if own else phases).get((file, qualname), set())
        phase = next(iter(raised)) if len(raised) == 1 and "<several>" not in raised else None
        placed[(prefix + file.removeprefix("vllm/"), name)][owner or None].add((next(iter(stages)), phase))
    return placed


def build(cache: Path) -> dict[str, object]:
    order = sorted((p.name for p in cache.iterdir() if (p / "vllm").is_dir()), key=version_key)
    per_release = release_functions(cache, order)
    # every release's raises together: the sampled releases leave gaps between them (0.8.4 between
    # 0.8.0 and 0.8.5.post1), which a phase split per release would leave unplaced
    own_phases = raised_phases(ROOT / "rules")
    rows: dict[tuple[str, str, str, str | None, str | None], list[str]] = {}
    ambiguous: set[str] = set()
    qualified: set[str] = set()
    releases: list[tuple[str, str, list[Function], dict[tuple[str, str], set[str]]]] = [
        ("", version, per_release[version], own_phases) for version in order
    ]
    plugin_phases: dict[str, dict[tuple[str, str], set[str]]] = {}
    for (package, release), functions in sorted(plugin_functions(cache).items()):
        if package not in plugin_phases:
            plugin_phases[package] = raised_phases(ROOT / "rules", None, PLUGIN_INVENTORY, package)
        releases.append((f"{package}/", release, functions, plugin_phases[package]))
    for prefix, version, functions, raised_by in releases:
        placed = _placed(functions, raised_by, prefix)
        for (file, name), owners in placed.items():
            # a traceback names a function, not its class: a name whose classes in one module differ
            # in stage or phase is keyed by its class too, which the caller's `self.model_config.…(`
            # names (service/diagnosis/frames.py); one defined twice in one class (per branch of an
            # `if`) with different places is dropped as ambiguous
            qualify = len({place for places in owners.values() for place in places}) > 1
            for owner, places in owners.items():
                if len(places) > 1:
                    ambiguous.add(f"{file}:{owner}.{name}" if owner else f"{file}:{name}")
                    continue
                if qualify:
                    qualified.add(f"{file}:{name}")
                stage, phase = next(iter(places))
                rows.setdefault((file, name, stage, phase, owner if qualify else None), []).append(version)
    plugin_packages = tuple(f"{package}/" for package in plugin_phases)
    # a plugin's rows hold for every vLLM release (its own releases are not vLLM's), so a name its
    # releases (or classes) place in different stages says nothing: left out as ambiguous
    plugin_stages: dict[tuple[str, str], set[str]] = defaultdict(set)
    for file, name, stage, _, _ in rows:
        if file.startswith(plugin_packages):
            plugin_stages[(file, name)].add(stage)
    split = {key for key, stages in plugin_stages.items() if len(stages) > 1}
    ambiguous |= {f"{file}:{name}" for file, name in split}
    rows = {key: versions for key, versions in rows.items() if key[:2] not in split}
    frames: list[list[object]] = []
    ordered = sorted(rows.items(), key=lambda kv: (*kv[0][:3], kv[0][3] or "", kv[0][4] or ""))
    for (file, function, stage, phase, owner), versions in ordered:
        # a plugin's releases are its own, not vLLM's: its row holds for every vLLM release read
        spans = [[order[0], order[-1]]] if file.startswith(plugin_packages) else ranges(versions, order)
        row: list[object] = [file, function, stage, phase, spans]
        frames.append([*row, owner] if owner else row)
    placed_files = {row[0] for row in frames}
    read = {f.file.removeprefix("vllm/") for functions in per_release.values() for f in functions}
    return {
        "source": "vLLM wheels (tools/vllm_sources.py), call graph by tools/vllm_callgraph.py",
        "releases": order,
        "modules": sorted(read - placed_files),
        # the packages of the platform plugins and forks (tools/vllm_sources.py PLUGINS, their one
        # home): a frame of one is looked up by its own path, else read as vLLM's module of the same
        # path (service/diagnosis/frames.py)
        "plugins": sorted({package for packages, _ in PLUGINS.values() for package in packages}),
        # names keyed by class as well (their classes in one module differ), and those left out as
        # ambiguous (one class defines the name twice, placed differently)
        "qualified": sorted(qualified),
        "ambiguous": sorted(ambiguous),
        "frames": frames,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    cache = cache_dir()
    if not cache.is_dir():
        print(
            f"no extracted vLLM releases under {cache}; run: python tools/vllm_sources.py fetch",
            file=sys.stderr,
        )
        return 2
    table = build(cache)
    # one row a line: reviewable diffs when a release changes a few functions
    rows = ",\n".join(json.dumps(row) for row in table["frames"])  # type: ignore[attr-defined]
    head = json.dumps({k: v for k, v in table.items() if k != "frames"})[:-1]
    text = f'{head}, "frames": [\n{rows}\n]}}\n'
    if args.check:
        stale = not args.output.is_file() or args.output.read_text(encoding="utf-8") != text
        print("stale" if stale else "up to date")
        return 1 if stale else 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    frames = table["frames"]
    assert isinstance(frames, list)
    print(f"{len(frames)} frames ({sum(1 for f in frames if f[3])} with a phase) -> {args.output}")
    for key, what in (("qualified", "keyed by class too"), ("ambiguous", "dropped as ambiguous")):
        names = table[key]
        assert isinstance(names, list)
        print(f"{len(names)} names {what}: {', '.join(names[:20])}{' …' if len(names) > 20 else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
