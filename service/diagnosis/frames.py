"""Placing traceback frames by vLLM's call graph (`rules/frames/`, see tools/vllm_callgraph.py).

A frame line `File ".../vllm/v1/worker/gpu_model_runner.py", line 2301, in profile_run` is looked up
by its path after `vllm/` and its function. The deepest frame the table knows decides: tracebacks
list the outermost call first, and the innermost known function is the closest to where it failed.
Pure lookups over the loaded table; the interpreter (and an evidence model) call them.
"""

from __future__ import annotations

import functools
import re

import msgspec

from service.diagnosis.exception_lines import exception_line
from service.diagnosis.normalize import UNSHOWN_FILE, Document
from service.first_use import first_use_re
from service.packs.frames import LIBRARY_FOLDERS, FrameRow, FrameTable
from service.schemas import Phase

__all__ = [
    "ONE_PHASE_STAGES",
    "TRACEBACK",
    "OOM_PHASE",
    "FramePlace",
    "cut_traceback",
    "deepest_frame",
    "frame_place",
    "innermost_outwards",
    "library_file",
    "neutral_library",
    "stack_below",
    "vllm_file",
]

# The phase of an out-of-memory error raised in each stage (DESIGN §3.1): allocating the KV cache
# after sizing it is "no memory for cache blocks". An OOM in argument checks has no phase.
OOM_PHASE: dict[str, Phase] = {
    "device": "startup_budget",
    "loading": "weights_oom",
    "profiling": "warmup_oom",
    "warmup": "warmup_oom",
    "kv_cache": "kv_cache_capacity",
    "serving": "runtime_oom",
}
# Stages whose every failure is one phase whatever the exception (DESIGN §3.1): the KV cache's sizing
# checks (`raise_if_cache_size_invalid`, `check_enough_kv_cache_memory`) and its allocation after
# sizing are both kv_cache_capacity, so a traceback cut inside that stage is placed without its line.
ONE_PHASE_STAGES: dict[str, Phase] = {"kv_cache": "kv_cache_capacity"}
# The call graph's stage of engine construction (tools/vllm_callgraph.py CONSTRUCTORS): start-up,
# the stage not shown.
CONSTRUCTION = "init"
# A run of path separators holding a backslash (Windows', doubled by `repr` or a JSON string): one `/`.
_SEPARATORS = first_use_re(r"[\\/]*\\[\\/]*")
# A traceback held in one line as an escaped string (a JSON log record's `"exception": "Traceback
# (most recent call last):\n  File \"…\", line 12, in load_model\n …"`, an HTTP error body's
# `"detail"`): its frames are the escaped `File \"` ones; read as the lines they stand for.
# pytest's header of one failed test's report (`____ test_models[hf] ____`): what Python's own traceback
# header is for a paste cut before the exception's `E   ` lines
_PYTEST_SECTION = first_use_re(r"^_{3,} \S.{0,400} _{3,}$")
_HELD_FRAME = first_use_re(r'File \\+"')
_ESCAPE = first_use_re(r'\\+(?P<char>["n\\/])')
_ESCAPED = {"n": "\n", '"': '"', "/": "/"}  # not `\t`: a Windows path's `\torch\`
_FRAME = first_use_re(r'File "(?P<path>[^"\n]{1,600})", line \d+, in (?P<function>[\w<>]{1,200})')
_FRAME_START = first_use_re(r'\s*File "[^"\n]{0,600}(?:"(?:, line \d*(?:, in ?)?)?)?$')
# A frame's source line that calls a function of its own module: `raise_if_cache_size_invalid(…`,
# `return check_enough_kv_cache_memory(`, `if self._check_scheme_supported(`, `self.gpu_cache =
# self._allocate_kv_cache(` (a method of another
# object, `self.model_runner.profile_run(`, lives in a module the line does not name).
_CALL = first_use_re(
    r"^\s*(?:[\w, .\[\]]{1,120}=\s*)?(?:(?:return|raise|await|if|elif|while|assert|not)\s+){0,3}"
    r"(?:self\.|cls\.)?(?P<function>[A-Za-z_]\w{0,120})\("
)
# A frame's source line that calls a method of another object (`self.model_runner.profile_run()`,
# `output = self.worker.execute_model(`): the failure is inside that call, in a module the paste
# does not show, so the errors the frame's own function raises say nothing about it.
_OTHER_CALL = first_use_re(
    r"^\s*(?:[\w, \[\]]{1,120}=\s*)?(?:(?:return|await)\s+){0,2}(?:self\.|cls\.)?"
    r"[A-Za-z_]\w{0,120}(?:\.[A-Za-z_]\w{0,120})*\.(?P<function>[A-Za-z_]\w{0,120})\("
)
# A frame's source line that has an executor run a worker method by its name (V0
# `self._run_workers("load_model",`, Ray's `execute_method.remote("init_device")`, V1
# `self.collective_rpc("compile_or_warm_up_model")`: tools/vllm_callgraph.py DISPATCHERS): the
# failure is inside that method, whichever process ran it; the dispatcher's own frames place nothing.
_DISPATCHED = first_use_re(
    r"\b[A-Za-z_]\w{0,120}(?:\.remote)?\(\s*(?:method\s*=\s*)?[\"'](?P<function>[A-Za-z_]\w{0,120})[\"']"
)
# Phases a function raises from an `except` around its calls (`_dummy_sampler_run` turns an OOM in
# `self.model.sample(` into "CUDA out of memory occurred when warming up sampler"): a failure inside
# another object's call is still its error. Other phases are checks of values on its own lines.
_HANDLED: frozenset[Phase] = frozenset({"weights_oom", "warmup_oom", "runtime_oom"})
TRACEBACK = "Traceback (most recent call last)"
# vLLM's logger prefix (`ERROR 03-31 16:55:54 multiproc_worker_utils.py:242]`, V1's `ERROR 11-04
# 09:45:23 [core.py:588]`) cut before its closing bracket: a line the paste ends in the middle of.
_CUT_PREFIX = first_use_re(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"\s+\[?[\w.-]{0,80}(?::\d*)?\s*$"
)


class FramePlace(msgspec.Struct, frozen=True):
    """A frame the table knows: its line, where it is in vLLM, and the stage (and phase) it implies."""

    line: int
    file: str
    function: str
    stage: str
    phase: Phase | None
    plugin: bool = False  # the frame is a platform plugin's module, read as vLLM's of that folder


# A vendor's fork of vLLM keeps vLLM's package and adds its own modules next to vLLM's: Tenstorrent's
# `vllm/worker/tt_model_runner.py` is a V0 model runner like `vllm/worker/model_runner.py`, its
# `execute_model` the same serving entry. A frame of a module no vLLM release has is therefore looked
# up like a platform plugin's (`FrameTable.rows_for`, one lookup for both): the functions of that
# name in vLLM's folders of the same name, which must agree on one stage.


# A platform plugin's package (vllm_ascend, vllm_gaudi, vllm_spyre, …: vLLM's `vllm.platform_plugins`
# entry points) mirrors vLLM's own layout: `vllm_ascend/worker/worker.py` subclasses and copies
# `vllm/worker/worker.py`, its `initialize_cache` calling the same `raise_if_cache_size_invalid`. Its
# frames are read as the vLLM module of the same path, the call graph's stage for that function.
# Packages not named `vllm_*` (`tpu_inference`, `aphrodite`) come from the frame table's `plugins`
# (generated from tools/vllm_sources.py PLUGINS).
_PLUGIN = first_use_re(r"(?:^|/)vllm_[a-z][a-z0-9_]{0,40}/(?P<rest>[\w/]{1,300}\.py)$")


@functools.lru_cache(maxsize=8)
def _plugin_roots(packages: tuple[str, ...]) -> re.Pattern[str] | None:
    """A frame's path inside one of the named plugin packages (the longest name first)."""
    if not packages:
        return None
    names = "|".join(re.escape(p) for p in sorted(packages, key=len, reverse=True))
    return re.compile(rf"(?:^|/)(?:{names})/(?P<rest>[\w/]{{1,300}}\.py)$")


def plugin_file(path: str, plugins: tuple[str, ...] = ()) -> str | None:
    """The path of a platform plugin's frame inside its site-packages, its package included
    (`vllm_ascend/worker/model_runner_v1.py`): the key of the plugin's own rows in the frame table
    (tools/vllm_callgraph.py reads the plugins' sources), or None for a frame of no plugin."""
    path = _SEPARATORS.sub("/", path) if "\\" in path else path
    named = _plugin_roots(plugins)
    found = named.search(path) if named is not None else None
    if found is None and "/vllm/" not in path and not path.startswith("vllm/"):
        found = _PLUGIN.search(path)
    if found is None:
        return None
    return found.group(0).lstrip("/")


def vllm_file(path: str, plugins: tuple[str, ...] = ()) -> str | None:
    """The path inside vLLM of a frame's file (after `vllm/`, or a platform plugin's package: a
    `vllm_*` one or one of `plugins`), or None. Windows separators count as `/`, doubled ones too (a
    path printed through `repr` or JSON)."""
    path = _SEPARATORS.sub("/", path) if "\\" in path else path
    named = _plugin_roots(plugins)
    found = named.search(path) if named is not None else None
    if found is not None:  # before `/vllm/`: tpu_inference/models/vllm/… is the plugin's own
        return found.group("rest")
    cut = path.rfind("/vllm/")
    if cut >= 0:
        return path[cut + len("/vllm/") :]
    if path.startswith("vllm/"):
        return path[len("vllm/") :]
    plugin = _PLUGIN.search(path)
    return plugin.group("rest") if plugin else None


def frame_place(
    table: FrameTable,
    text: str,
    number: int = 0,
    version: tuple[int, int, int] | None = None,
    receiver: str | None = None,
) -> FramePlace | None:
    """The place of one frame line, or None when it is not a vLLM frame only one stage reaches;
    `receiver` is the attribute its caller called it on (`model_config`), which names its class."""
    match = _FRAME.search(text)
    if match is None:
        return None
    path = match.group("path")
    function = match.group("function")
    if path == UNSHOWN_FILE:
        # a frame whose file the paste does not show (a pytest report cut before the entry's location):
        # every vLLM function of that name, which must agree on one stage
        entries = [e for e in table.rows_named(function) if e.covers(version)]
        return _one_stage(entries, number, "", function, False)
    file = vllm_file(path, table.plugins)
    if file is None:
        library = library_file(path)
        if library is None:
            return None
        entries = [e for e in table.rows_for(library, function) if e.covers(version)]
        return _one_stage(entries, number, library, function, False)
    plugin = _is_plugin(path, table.plugins)
    own = plugin_file(path, table.plugins) if plugin else None
    if own is not None and (mine := table.rows_for(own, function)):
        # the plugin's own call graph places it (tools/vllm_callgraph.py reads the plugins' sources)
        return _one_stage(
            _of_receiver([e for e in mine if e.covers(version)], receiver), number, file, function, True
        )
    rows = table.rows_for(file, function, plugin=_mirrored(file))
    if not rows and plugin and _mirrored(file):
        # a plugin's module in a folder where vLLM has no function of that name (tpu_inference's
        # `runner/tpu_runner.py`, optimum-neuron's `worker.py`): its methods keep the names and roles
        # of vLLM's worker and model runner, so the rows of every vLLM function of that name decide,
        # when they agree on one stage
        rows = table.rows_named(function)
    entries = _of_receiver([e for e in rows if e.covers(version)], receiver)
    return _one_stage(entries, number, file, function, plugin)


def _of_receiver(entries: list[FrameRow], receiver: str | None) -> list[FrameRow]:
    """The rows of the class a caller's attribute names, with those keyed by no class: vLLM names an
    engine's parts after their classes (`self.model_config` is a ModelConfig, `draft_model_config`
    one too), so `self.cache_config.verify_with_parallel_config(` is CacheConfig's method. All rows
    when the attribute names none of their classes."""
    owned = [(e, e.owner.rsplit(".", 1)[-1].lower()) for e in entries if e.owner is not None]
    if receiver is None or not owned:
        return entries
    wanted = receiver.replace("_", "").lower()
    mine = [e for e, name in owned if name == wanted] or [e for e, name in owned if wanted.endswith(name)]
    return [e for e in entries if e.owner is None] + mine if mine else entries


# How many lines above a frame its caller's frame line may be: its source line, carets, a wrap.
_CALLER_LINES = 6


def _receiver(doc: Document, number: int, function: str) -> str | None:
    """The attribute the caller's source line (under the frame printed above frame `number`) calls
    `function` on: `model_config` in `self.model_config.verify_with_parallel_config(…)`."""
    for above in range(number - 1, max(0, number - _CALLER_LINES), -1):
        if _FRAME.search(doc.line(above).text) is not None:
            return _receiver_in(_code_line(doc, above), function)
    return None


def _receiver_in(code: str, function: str) -> str | None:
    """The attribute a source line calls `function` on, or None (none, or `self`/`cls`)."""
    found = re.search(rf"(?P<attr>[A-Za-z_]\w{{0,120}})\.{re.escape(function)}\(", code)
    if found is None or found.group("attr") in ("self", "cls"):
        return None
    return found.group("attr")


_LIBRARIES = "|".join(re.escape(folder) for folder in LIBRARY_FOLDERS)
_LIBRARY = first_use_re(rf"(?:^|/)(?:site|dist)-packages/(?P<rest>(?:{_LIBRARIES})[\w/]{{1,300}}\.py)$")


def library_file(path: str) -> str | None:
    """The path inside an installed library whose frames a table places (`torch/nn/modules/module.py`
    of `…/site-packages/torch/nn/modules/module.py`), or None."""
    found = _LIBRARY.search(path.replace("\\", "/"))
    return found.group("rest") if found else None


def neutral_library(text: str, libraries: tuple[str, ...]) -> str | None:
    """The folder of `libraries` (rules/evidence.yaml `neutral_libraries`: code that runs in every stage
    that runs the model) a frame line's file is in, or None: `torch/_dynamo/` of `File ".../site-packages/
    torch/_dynamo/eval_frame.py", line 655, in _fn`."""
    if not libraries:
        return None
    match = _FRAME.search(text)
    if match is None:
        return None
    path = "/" + match.group("path").replace("\\", "/").lstrip("/")
    return next((folder for folder in libraries if f"/{folder}" in path), None)


def _one_stage(
    entries: list[FrameRow], number: int, file: str, function: str, plugin: bool
) -> FramePlace | None:
    """The frame's place when its rows agree on one stage (and its phase, where they agree on one)."""
    stages = {e.stage for e in entries}
    if len(stages) != 1:
        return None
    phases = {e.phase for e in entries}
    phase = next(iter(phases)) if len(phases) == 1 else None
    return FramePlace(number, file, function, stages.pop(), phase, plugin)


_MODULE = first_use_re(r"[\w/]{1,300}\.py")


def _mirrored(file: str) -> bool:
    """Whether a frame's file inside vLLM may be a fork's own module, looked up as a plugin's: a
    module path (a path a terminal wrapped, `engine/llm_e    ngine.py`, is vLLM's own, cut)."""
    return _MODULE.fullmatch(file) is not None


def _is_plugin(path: str, plugins: tuple[str, ...] = ()) -> bool:
    """Whether a frame's file is a platform plugin's module, not vLLM's own: in one of the frame
    table's plugin packages (`optimum/neuron/vllm/` too), or outside any `vllm/` folder."""
    path = path.replace("\\", "/")
    named = _plugin_roots(plugins)
    if named is not None and named.search(path) is not None:
        return True
    return "/vllm/" not in path and not path.startswith("vllm/")


def held_traceback(text: str) -> Document | None:
    """The lines a traceback held in one line as an escaped string stands for (its `\\n`, `\\"` and
    doubled backslashes unescaped, however many times the string was escaped), or None when the line
    holds no escaped frame."""
    if "\\" not in text or _HELD_FRAME.search(text) is None:
        return None

    def unescape(found: re.Match[str]) -> str:
        char = found.group("char")
        return "\\" if char == "\\" else _ESCAPED[char]

    return Document(_ESCAPE.sub(unescape, text))


def deepest_frame(
    doc: Document,
    table: FrameTable,
    first: int,
    last: int,
    *,
    source: str | None = None,
    version: tuple[int, int, int] | None = None,
    with_phase: bool = False,
) -> FramePlace | None:
    """The innermost known frame on lines first..last (of process `source` when given)."""
    if not table.by_file:
        return None
    deeper: str | None = None  # the function of the frame printed below, when one was
    placed = False  # whether that frame was looked up itself (its own place already counted)
    # the innermost engine-construction frame (`init`: start-up, its stage not shown), returned only
    # when no frame above it names a stage: a constructor a stage's function calls (V0's
    # `CacheEngine(...)` under `Worker._init_cache_engine`) runs in that stage
    construction: FramePlace | None = None
    for number in innermost_outwards(doc, first, last):
        line = doc.line(number)
        if source is not None and line.source != source:
            continue
        if "File " not in line.text:
            continue
        held = held_traceback(line.text)
        if held is not None:
            inner = deepest_frame(held, table, 1, len(held.lines), version=version, with_phase=with_phase)
            if inner is not None:
                return msgspec.structs.replace(inner, line=number)
            continue
        shown = _FRAME.search(line.text)
        receiver = _receiver(doc, number, shown.group("function")) if shown is not None else None
        place = frame_place(table, line.text, number, version, receiver)
        called = _called_place(doc, table, number, place, version)
        if (
            called is not None
            # none, or its header cut, or the dispatcher's frames that ran it by name
            and (deeper is None or called.function.startswith(deeper) or _dispatches(doc, number))
            and not (placed and called.function == deeper)  # printed in full: read as itself
            and (called.phase is not None or not with_phase)
        ):
            if called.stage != CONSTRUCTION or called.phase is not None:
                return called
            construction = construction or called
        if (
            place is not None
            and place.phase is not None
            and place.phase not in _HANDLED
            and _calls_another_object(doc, number)
        ):
            place = msgspec.structs.replace(
                place, phase=None
            )  # it failed inside that call, not at its own check
        if place is not None and (place.phase is not None or not with_phase):
            if place.stage != CONSTRUCTION or place.phase is not None:
                return place
            construction = construction or place
        frame = _FRAME.search(line.text)
        if frame is not None and vllm_file(frame.group("path"), table.plugins) is not None:
            # only vLLM's own frames: a library's wrapper printed between (torch's `decorate_context`
            # of `@torch.inference_mode()`) is not the function the frame above called
            deeper = frame.group("function")
            placed = frame_place(table, line.text, number, version, receiver) is not None
    return construction


# A stack printed innermost call first: faulthandler's `Current thread 0x… (most recent call first):`
# (and c10's `Exception raised from … (most recent call first):` before C++ frames), py-spy's
# `Thread 4242 (active): "MainThread"`. Python's own traceback, and every dialect written as it, lists
# the outermost call first.
_STACK_HEADER = first_use_re(
    r"\(most recent call (?:first|last)\)|^\s*Thread (?:0x)?[0-9A-Fa-f]+ \((?:active|idle)[^)]*\):"
)


def _innermost_first(text: str) -> bool | None:
    """Whether a line heads a stack listed innermost call first (True), outermost first (False), or
    heads none (None)."""
    header = _STACK_HEADER.search(text)
    return None if header is None else "last" not in header.group(0)


def innermost_outwards(doc: Document, first: int, last: int) -> list[int]:
    """Line numbers first..last in the order a stack's calls go from the innermost outwards: bottom
    up, except below a header of a dump listing the innermost call first, read top down from it."""
    first, last = max(1, first), min(last, len(doc.lines))
    heads = [
        (number, flag)
        for number in range(first, last + 1)
        if "most recent call" in (raw := doc.lines[number - 1]) or "Thread " in raw
        if (flag := _innermost_first(doc.line(number).text)) is not None
    ]
    if not any(flag for _, flag in heads):
        return list(range(last, first - 1, -1))
    order: list[int] = []
    bounds = [first, *(number for number, _ in heads), last + 1]
    flags = [False, *(flag for _, flag in heads)]
    for low, high, flag in reversed(list(zip(bounds, bounds[1:], flags, strict=False))):
        block = range(low, high) if flag else range(high - 1, low - 1, -1)
        order.extend(block)
    return order


_BELOW = 400  # lines after a failure searched for the stack it heads


def stack_below(doc: Document, number: int) -> tuple[int, int, bool] | None:
    """(first, last, innermost first) of the stack the failure on line `number` heads: the traceback
    IPython's header names its exception in (`OutOfMemoryError    Traceback (most recent call last)`),
    or the dump printed right after a fatal error, innermost call first (faulthandler's `Fatal Python
    error: Aborted` … `Current thread 0x… (most recent call first):`, a py-spy dump)."""
    line = doc.line(number)
    total = len(doc.lines)
    if TRACEBACK in line.text:
        end = number
        for following in range(number + 1, min(total, number + _BELOW) + 1):
            text = doc.line(following).text
            if doc.line(following).source != line.source or TRACEBACK in text:
                break
            end = following
            if exception_line(text):
                break
        return (number, end, False) if end > number else None
    for following in range(number + 1, min(total, number + _DUMP_AFTER) + 1):
        if _innermost_first(doc.line(following).text):
            end = following
            for frame in range(following + 1, min(total, following + _BELOW) + 1):
                if not _is_frame(doc.line(frame).text):
                    break
                end = frame
            return (following, end, True) if end > following else None
    return None


_DUMP_AFTER = 6  # a fatal error's own lines (`Fatal Python error: Aborted`, a blank) before its dump


def _dispatches(doc: Document, number: int) -> bool:
    """Whether the source line printed under frame `number` runs a worker method by its name."""
    return _DISPATCHED.search(_code_line(doc, number)) is not None


def _calls_another_object(doc: Document, number: int) -> bool:
    """Whether the source line printed under frame `number` calls a method of another object."""
    code = _code_line(doc, number)
    return "File " not in code and _OTHER_CALL.match(code) is not None


def _code_line(doc: Document, number: int) -> str:
    """The source line printed under frame `number`: the next line with text (a hard wrap the
    document joined leaves empty lines where the pieces were)."""
    frame = doc.line(number).text
    arrow = _arrow_line(doc, number)
    if arrow is not None:
        return arrow
    joined = _FRAME.search(frame)
    if joined is not None and frame[joined.end() :].strip():
        return frame[joined.end() :].strip()  # a hard wrap the document joined put it on the frame's line
    # a prefix the document did not strip (a serving container's `WARN  PyProcess W-252-model-stderr:`)
    # starts the frame and its code line alike: the code is what follows it
    prefix = frame[: frame.find('File "')].strip() if 'File "' in frame else ""
    for following in range(number + 1, min(len(doc.lines), number + 4) + 1):
        text = doc.line(following).text
        if prefix and text.startswith(prefix):
            text = text[len(prefix) :]
        if text.strip():
            return text
    return ""


# IPython prints a few numbered lines of source under each frame and points at the one running:
# `---> 49 self.gpu_cache = self._allocate_kv_cache(self.num_gpu_blocks, "cuda")`.
_ARROW = first_use_re(r"^\s*-+>\s*\d+\s(?P<code>.*)$")
_IPYTHON_BLOCK = 16


def _arrow_line(doc: Document, number: int) -> str | None:
    """The source line IPython's arrow points at under frame `number` (without arrow and number)."""
    for following in range(number + 1, min(len(doc.lines), number + _IPYTHON_BLOCK) + 1):
        text = doc.line(following).text
        if "File " in text and _is_frame(text):
            return None
        if "->" in text and (arrow := _ARROW.match(text)) is not None:
            return arrow.group("code")
    return None


def _called_place(
    doc: Document,
    table: FrameTable,
    number: int,
    place: FramePlace | None,
    version: tuple[int, int, int] | None,
) -> FramePlace | None:
    """The function that the source line printed under frame `number` calls, of the frame's own module
    (`raise_if_cache_size_invalid(num_gpu_blocks,` under `initialize_cache` in worker.py) or another
    object's method, when the table places it: the frame one deeper, which the paste was cut before
    (or inside). The frame itself may be one the table does not place (a vLLM function several stages
    reach, or a release's name the table lacks)."""
    frame = _FRAME.search(doc.line(number).text)
    if place is not None:
        file, own, plugin = place.file, place.function, place.plugin
    else:
        inside = vllm_file(frame.group("path"), table.plugins) if frame is not None else None
        if frame is None or inside is None:
            return None
        file, own, plugin = inside, frame.group("function"), _mirrored(inside)
    # a plugin's module: the function it calls of its own module, by the plugin's own rows first
    mine = plugin_file(frame.group("path"), table.plugins) if frame is not None and plugin else None
    code = _code_line(doc, number)
    if "File " in code:
        return None
    call = _CALL.match(code)
    dispatched = _DISPATCHED.search(code)
    if dispatched is not None and (named := table.rows_named(dispatched.group("function"))):
        function = dispatched.group("function")
        rows = tuple(row for row in named if row.stage != CONSTRUCTION)
    elif call is not None:
        function = call.group("function")
        if function == own:
            return None
        rows = (table.rows_for(mine, function) if mine else ()) or table.rows_for(
            file, function, plugin=plugin or _mirrored(file)
        )
    elif (other := _OTHER_CALL.match(code)) is not None:
        # another object's method: every vLLM function of that name, which must agree on one stage
        # (`self.model_runner.capture_model(self.gpu_cache)` under V0's `warm_up_model`)
        function = other.group("function")
        # engine construction (`MQLLMEngine.from_engine_args(`) says start-up, which the frame's own
        # place says as well or better: only a stage's function is one frame deeper
        rows = tuple(row for row in table.rows_named(function) if row.stage != CONSTRUCTION)
    else:
        return None
    entries = _of_receiver([e for e in rows if e.covers(version)], _receiver_in(code, function))
    return _one_stage(entries, number, file, function, plugin)


def _is_frame(text: str) -> bool:
    """Whether a line is a traceback frame, also one the paste cut in the middle (`File "/usr/lib/
    python3.10/dist-pa`, `File ".../core.py", line 248, in`)."""
    return _FRAME.search(text) is not None or _FRAME_START.match(text) is not None


def _frames_run_start(doc: Document) -> int | None:
    """First line of the frames a paste ends with when it shows no traceback header (a paste cut
    at both ends): the run of frame and code lines of one process back from the last line, past
    other processes' lines printed between them."""
    total = len(doc.lines)
    last = next((n for n in range(total, 0, -1) if doc.line(n).text.strip()), None)
    if last is None:
        return None
    if last > 1 and not _is_frame(doc.line(last).text) and _near_frame(doc, last - 1):
        last -= 1  # the remainder of a line the paste cut in the middle, after a frame or its code
        while last > 1 and last in doc.moved:
            last -= 1  # emptied by a rejoined hard wrap: the line it continues
    source = doc.line(last).source
    start, frames = last, 0
    for number in range(last, 0, -1):
        if number in doc.moved or _is_gutter(doc.lines[number - 1]):
            continue  # emptied by a rejoined hard wrap (its text is on the line above), or a viewer's
            # line number copied with the log (`56`, `57`, … between its lines)
        line = doc.line(number)
        if not line.text.strip() and _is_frame(doc.line(number + 1).text) and number > 1:
            continue  # IPython leaves a blank line between one frame's source lines and the next frame
        if source and line.source and line.source != source:
            continue  # another process's line interleaved with this one's (`(Worker_TP1 pid=…)`)
        if line.source != source or not line.text.strip():
            break
        if _is_frame(line.text):  # a frame, or one cut mid-path
            frames += 1
        elif (
            not doc.lines[number - 1].startswith((" ", "\t"))
            and not line.level
            and not line.source
            and _ARROW.match(line.text) is None
        ):
            break
        start = number
    return start if frames >= 2 else None


def cut_traceback(doc: Document) -> tuple[int, int, str] | None:
    """(header line, last line, process) of a traceback the paste cut before its exception line."""
    total = len(doc.lines)
    header = next((n for n in range(total, 0, -1) if _heads_traceback(doc.line(n).text)), None)
    if header is not None:
        source = doc.line(header).source
        held = held_traceback(doc.line(header).text)
        if held is not None:
            return (header, header, source) if _held_cut(held) else None
    else:
        start = _frames_run_start(doc)
        if start is None:
            return None
        header, source = start - 1, doc.line(start).source  # frames right below a missing header
    printed = [
        n
        for n in range(header + 1, total + 1)
        if doc.line(n).source == source and doc.line(n).text.strip(" \t^~")
    ]
    if len(printed) > 1 and _CUT_PREFIX.search(doc.lines[printed[-1] - 1]):
        printed.pop()  # the paste stops inside the logger prefix of the line after the last one
    if len(printed) == 1 and _is_cut_level(doc.line(printed[0]).text) and _ends_paste(doc, printed[0]):
        # the paste stops inside the level word of the line after the header ("ERRO"): a traceback
        # cut before its first frame, placed by the stage the run had reached
        return header, header, source
    if not printed:
        return None
    last = printed[-1]
    tail = doc.line(last).text.strip()
    if exception_line(tail):
        return None
    # the last frame and what may follow it before the cut: its code line, the carets under it, and
    # the start of one more line (an exception cut before its name, a logger prefix's date)
    after = [n for n in printed[-_AFTER_FRAME - 1 :] if _is_frame(doc.line(n).text)]
    if after and (after[-1] == last or not tail.endswith(":")):
        return header, last, source
    return None


def _heads_traceback(text: str) -> bool:
    """Whether a line heads a traceback: Python's header, or pytest's header of a failed test's report."""
    return TRACEBACK in text or ("___" in text and _PYTEST_SECTION.match(text.strip()) is not None)


def _held_cut(held: Document) -> bool:
    """Whether a traceback held in one line ends after a frame, before any exception line."""
    frames = [n for n in range(1, len(held.lines) + 1) if _is_frame(held.line(n).text)]
    if not frames:
        return False
    after = (held.line(n).text.strip() for n in range(frames[-1] + 1, len(held.lines) + 1))
    return not any(exception_line(text) for text in after)


_AFTER_FRAME = 3
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _is_gutter(raw: str) -> bool:
    """Whether a raw line is only a line number, as a log viewer's gutter copies it."""
    text = raw.strip()
    return 0 < len(text) <= _GUTTER_DIGITS and text.isdigit()


_GUTTER_DIGITS = 6


def _ends_paste(doc: Document, number: int) -> bool:
    """Whether only blank lines follow line `number`."""
    return not any(text.strip() for text in doc.lines[number:])


def _is_cut_level(text: str) -> bool:
    """Whether `text` is the start of a logger's level word, cut by the paste ("ERRO", "WARN")."""
    word = text.strip()
    return bool(word) and any(level.startswith(word) for level in _LEVELS)


def _near_frame(doc: Document, number: int) -> bool:
    """Whether line `number` is a frame or one of the code and caret lines printed under one."""
    looked = 0
    for above in range(number, 0, -1):
        if above in doc.moved:
            continue  # emptied by a rejoined hard wrap
        text = doc.line(above).text
        if _is_frame(text):
            return True
        looked += 1
        if not text.strip() or looked >= _AFTER_FRAME:
            return False
    return False
