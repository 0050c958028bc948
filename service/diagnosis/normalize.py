"""Turning a pasted log into clean lines while keeping each line's ORIGINAL 1-based number.

Pasted logs arrive wrapped in Slack escaping and code fences, coloured with ANSI codes, prefixed by
docker compose, Ray, vLLM's process tags and logger headers, and interleaved from several processes.
Whole-text steps never add or remove a newline, so line numbers survive; prefix stripping is per line
and lazy, because the scanner only needs it for the few lines a rule may match.
"""

from __future__ import annotations

import collections
import hashlib
import heapq
import itertools
import operator
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import re2

from service.errors import BinaryLogError
from service.first_use import first_use_re

__all__ = [
    "MEMO_LINES",
    "UNSHOWN_FILE",
    "DistinctLines",
    "Document",
    "hit_runs",
    "Line",
    "clean_text",
    "decode_bytes",
    "is_prose",
    "is_record",
    "run_of",
    "run_span",
    "memo_key",
    "split_prefixes",
    "split_spans",
    "starts_record",
]

# How many distinct lines a process-wide memo (split prefixes, a pattern's verdicts, a pattern
# index's readings) keeps before it starts again empty: what a long-running service holds stays
# bounded (some MiB). A full memo is replaced, never cleared, so a pass still holding it reads it whole.
MEMO_LINES = 16_384

_ANSI = first_use_re(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\x1b\[[0-9;]*$|\[(?:\d{1,3};)*\d{1,3}m")
_SLACK_LINK = first_use_re(r"<((?:https?|mailto|ftp)://?[^|<>\s]*)(?:\|([^<>]*))?>")
_SLACK_REF = first_use_re(r"<[@#!][^<>\s]*(?:\|([^<>]*))?>")
# A fence's backticks; with the language tag when nothing else follows on its line. The whole line
# goes when only blanks precede it (found from the backticks: a `^[ \t]*` lead costs a try per line).
_FENCE = first_use_re(r"```(?P<tag>[\w+\-.]*[ \t]*(?=\n|\Z))?")
_CONTROL = first_use_re(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# IPython 8 prints a frame as `File ~/envs/x/vllm/worker/worker.py:123, in Worker.load_model(self)`
# (JupyterLab as a markdown link, `File [~/envs/x/vllm/worker/worker.py:123](http://…#line=122), in …`);
# written the way Python's own traceback does, every frame rule and the call-graph table read it.
_IPYTHON_FRAME = first_use_re(
    r"(?m)^(?P<lead>[ \t>]*)File \[?(?P<path>[^\s\"\[][^\s\"]*?\.py):(?P<line>\d+)(?:\]\([^\s)]*\))?, "
    r"in (?:[\w<>]+\.)*(?P<fn>[\w<>]+)(?:\(.*)?$"
)
_IPYTHON_WORDS_PATTERN = r"File [^\s\"]+\.py:\d+(?:\]\([^\s)]*\))?, in "
# Other printers of a Python stack, each written the way Python's own traceback writes a frame (see
# `_dialect_frames`): where each may be, from its words' literal start (one trigger per literal).
_DIALECT_TRIGGERS = (r"\.py(?::\d+(?: in |: in |\))| in [\w<>]+\()", r"\", line \d+ in ", "❱")
# Slack escapes & < >; GitHub's HTML pages add quotes. One pass, so "&amp;lt;" becomes "&lt;".
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&#39;": "'", "&#x27;": "'"}
_ENTITY = first_use_re("|".join(re.escape(k) for k in _ENTITIES))


def _triggers() -> tuple[tuple[str, Any], ...]:
    options = re2.Options()
    options.log_errors = False
    patterns = (  # (the step of _clean_once it is for, its trigger)
        ("ansi", r";0m"),
        ("ansi", r"\[(?:\d{1,3};)*\d{1,3}m"),  # a colour code without its escape byte (`[0m` too)
        ("slack", r"<(?:https?|mailto|ftp|[@#!])"),
        ("entity", r"&(?:lt|gt|amp|quot|#39|#x27);"),
        ("fence", r"```"),
        ("pytest", r"\n>   "),
        ("python", _IPYTHON_WORDS_PATTERN),
        *(("dialect", trigger) for trigger in _DIALECT_TRIGGERS),
    )
    return tuple((step, re2.compile(pattern, options)) for step, pattern in patterns)


# Anything clean_text would change (exactly: each step of _clean_once needs one); a log without any
# is used as is (a few fast passes instead), and clean_text stops once none is left. Each trigger is
# searched on its own: one that starts with a literal lets RE2 skip ahead to that byte, their
# alternation (or a lone byte class) walks the DFA byte by byte, ten times slower. Control bytes
# (tab and carriage return included, newline not) are found by deleting every other byte, in C.
_TRIGGERS = _triggers()
_FENCE_MARKS = (b"```", b"~~~")
_FENCES = tuple(re2.compile(fence) for fence in _FENCE_MARKS)  # searched on the bytes: memchr speed
_CONTROL_BYTES = bytes([*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F])
_OTHER_BYTES = bytes(b for b in range(256) if b not in _CONTROL_BYTES)
# The steps whose trigger is literal text (or control bytes: the carriage-return, tab and control
# steps), read alike on the str and on its UTF-8: a text without a step's trigger is one that step
# leaves as it is. (The others read digits and word characters as Unicode does; RE2 reads ASCII.)
_LITERAL_STEPS = frozenset(("control", "slack", "entity", "fence", "pytest"))


def _triggered(data: bytes) -> frozenset[str]:
    """The steps of _clean_once whose trigger the UTF-8 text `data` holds (`control`: a control byte)."""
    found = {"control"} if data.translate(None, _OTHER_BYTES) else set()
    for step, trigger in _TRIGGERS:
        if step not in found and trigger.search(data) is not None:
            found.add(step)
    return frozenset(found)


# vLLM's own process tag's inside (`EngineCore_DP0 pid=210`, `VllmWorker rank=1 pid=7, ip=…`) and
# its logger header after the level (` 05-12 10:11:12 `): `_PREFIX`'s families and `_LOGGED` read both.
_VLLM_PROCESS = r"(?:[A-Za-z_][\w\-:.]*(?:[ ]rank=\d+)?[ ])?pid=\d+(?:,[ ]ip=[\w.:\-]+)?"
_VLLM_HEADER = r"[ ]+\d{2}-\d{2}[ ]+\d{2}:\d{2}:\d{2}(?:\.\d+)?[ ]+"
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL"
# One alternation per prefix family; split_prefixes strips them repeatedly until none is left.
_PREFIX = first_use_re(
    r"""^(?:
      (?P<quote>[>▎][ ]?|\*\*|[ ]*\|[ ]+|[ ]+(?=[A-Z(\[]))               # quote, bold, CI pipe, indent
    | (?P<piped>(?P<plevel>DEBUG|INFO|WARNING|ERROR|CRITICAL)[ ]+\|[ ](?:[\w.\-]+[ ]\|[ ]?)?)  # fastchat
    | (?P<container>[A-Za-z0-9][\w.\-@]*[ ]*\|[ ])             # compose `vllm-1  | `, swarm `x.1.a@node | `
    | (?P<iso>\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?[ ]+)
    | \((?P<proc>"""
    + _VLLM_PROCESS
    + r"""
        |raylet(?:,[ ]ip=[\w.:\-]+)?)\)[ ]*                              # vLLM, Ray actors, replicas, raylet
    | (?P<rank>\[rank\d+\]:[ ]*)
    | (?P<level>"""
    + _LEVELS
    + ")"
    + _VLLM_HEADER
    + r"""
        (?:\[[^\]]*\][ ]*|[\w.\-]+:\d+\][ ]*)?
    | (?P<pylog>\d{4}-\d{2}-\d{2}[ ][\d:,.]+[ ]-[ ][\w.]+[ ]-[ ](?P<pylevel>[A-Z]+)[ ]-[ ])
    | (?P<uvicorn>(?P<ulevel>INFO|WARNING|ERROR|DEBUG):[ ]+)
    | (?P<stream>(?:vLLM[ ])?(?:STDOUT|STDERR|stdout|stderr):[ ])                   # wrappers' pipes
    # other programs' prefixes, after vLLM's own (most lines match one of those first)
    | (?P<pod>\[pod/[\w.\-]{1,253}/[\w.\-]{1,63}\][ ])                      # kubectl logs --prefix
    | (?P<syslog>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[ ][ \d]\d[ ]\d{2}:\d{2}:\d{2}[ ]
        [\w.\-]+[ ](?P<unit>[\w.\-/@]+(?:\[\d+\])?):[ ])                 # journald, syslog: host unit[pid]:
    # glog's one-letter level: torch's c10 log `[E314 12:34:56.789012345 ProcessGroupNCCL.cpp:1234] ` (older
    # `[W socket.cpp:663] `), absl/glog `E0314 12:34:56.789012 12345 file.cc:45] `
    | (?P<glog>\[?(?P<glevel>[EWIF])(?:\d{3,4}[ ]\d{2}:\d{2}:\d{2}(?:\.\d+)?[ ]+(?:\d+[ ]+)?|[ ])
        [\w.\-]+:\d+\][ ]*)
    # torch c10d's own tag after it: `[PG ID 0 PG GUID 0(default_pg) Rank 3] `, `[Rank 3] `
    | (?P<c10d>\[(?:PG[ ]ID[ ]\d+[ ]PG[ ]GUID[ ][^\]\s]{0,80}[ ])?Rank[ ](?P<c10drank>\d+)\][ ]*)
    # NCCL's `host:pid:tid [device] ` before its `NCCL WARN …` (the words stay: rules read them)
    | (?P<nccl>[\w.\-]+:\d+:\d+[ ]\[\d+\][ ](?=NCCL[ ](?P<nlevel>INFO|WARN|ERROR|ABORT|TRACE)\b))
    | (?P<pytest>E[ ]{3,}(?=\S))                                         # pytest's failure lines
    )""",
    re.VERBOSE,
)

# A line vLLM's process tag or logger header opens: `split_prefixes` gives it a source or a level
# whatever follows (the tag's and the header's families of `_PREFIX`, the first of its alternatives
# that can match there). `Document._kept` leaves such lines out of the text a person's words are
# looked for in before any pass has split them, with one C-level match per line.
_LOGGED = first_use_re(rf"\({_VLLM_PROCESS}\)|(?:{_LEVELS}){_VLLM_HEADER}")


# glog's and NCCL's level words, as the logging module names them
_ONE_LETTER = {"E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL"}
_NCCL_LEVEL = {"WARN": "WARNING", "INFO": "INFO", "ERROR": "ERROR", "ABORT": "CRITICAL", "TRACE": "DEBUG"}


# The process and the level each prefix family names (keyed by its group, `match.lastgroup`).
_SOURCE_OF: dict[str, Callable[[re.Match[str]], str]] = {
    "rank": lambda m: m.group("rank").split("]")[0].lstrip("["),  # torch.distributed: [rank3]:
    "c10d": lambda m: "rank" + m.group("c10drank"),
    "container": lambda m: m.group("container").split("|")[0].strip(),
    "pod": lambda m: m.group("pod").strip()[5:-1],
    "syslog": lambda m: m.group("unit"),
}
_LEVEL_OF: dict[str, Callable[[re.Match[str]], str]] = {
    "level": lambda m: m.group("level"),
    "pylog": lambda m: m.group("pylevel"),
    "uvicorn": lambda m: m.group("ulevel"),
    "piped": lambda m: m.group("plevel"),
    "glog": lambda m: _ONE_LETTER[m.group("glevel")],
    "nccl": lambda m: _NCCL_LEVEL[m.group("nlevel")],
}


_GLUED = first_use_re(
    r"\((?:[A-Za-z_][\w\-]*(?: rank=\d+)? pid=\d+(?:, ip=[\w.:\-]+)?)\)[ ]*"
    r"(?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ ]+\d{2}-\d{2}[ ]+\d{2}:\d{2}:\d{2})"
)


@dataclass(frozen=True, slots=True)
class Line:
    """One log line: its original number, the process that printed it, its level, and its message."""

    number: int
    source: str
    level: str
    text: str


# How much of a body's start is read to tell text from binary data, and the share of characters
# that are neither text nor whitespace (undecodable bytes, NUL and other control characters; an ANSI
# escape is text) above which it is binary: a log with a few broken bytes is still read.
_SNIFF_BYTES = 64 * 1024
_BINARY_SHARE = 0.3
_CONTROL_NOT_TEXT = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
_TEXT_BYTES = bytes(b for b in range(256) if b not in _CONTROL_NOT_TEXT)
_EACH_CONTROL = tuple(bytes([b]) for b in _CONTROL_NOT_TEXT)


def _controls(raw: bytes) -> int:
    """How many bytes of `raw` are control characters that are not text. Each is looked for first
    (memchr, many bytes at a time): a body holding none, as nearly every log, is then never walked
    byte by byte, at half of what deleting every text byte costs."""
    if not any(map(raw.__contains__, _EACH_CONTROL)):
        return 0
    return len(raw.translate(None, _TEXT_BYTES))


def decode_bytes(data: bytes) -> str:
    """Decode a pasted log as UTF-8; invalid bytes become U+FFFD instead of failing, but a body that
    is mostly not text (a binary file, a UTF-16 file, compressed data) is refused with its reason.

    Control characters are counted on the bytes (`_controls`): one is a single byte in UTF-8, never
    part of a longer sequence, and a decoder's U+FFFD never swallows it. Only a head that is not
    ASCII is decoded to count what could not be read.
    """
    raw = data[:_SNIFF_BYTES]
    controls = _controls(raw)
    if raw.isascii():
        chars, unread = len(raw), 0
    else:
        head = raw.decode("utf-8", errors="replace")
        chars, unread = len(head), head.count("\ufffd")
    share = (controls + unread) / chars if chars else 0.0
    if share > _BINARY_SHARE:
        raise BinaryLogError(
            f"The log is binary data, not text: {share:.0%} of its first {chars:,} characters are "
            "neither text nor whitespace. Send the vLLM output as UTF-8 text (a UTF-16 file: "
            "`iconv -f UTF-16 -t UTF-8 vllm.log`; a compressed one: unpack it first)."
        )
    return data.decode("utf-8", errors="replace")


def _clean_once(text: str, idle: frozenset[str] = frozenset()) -> str:
    """One pass of every step. `idle` names steps of `_LITERAL_STEPS` whose trigger `text` lacks
    (`_triggered`): they are skipped while no step before them changed the text, since on that very
    text they would change nothing (a second pass, mostly, costs what its triggered steps cost)."""
    given = text
    if "\r" in text and not ("control" in idle and text is given):
        text = text.replace("\r\n", "\n").replace("\r", " ")
    if "\x1b" in text or "[0m" in text or ";0m" in text:
        text = _ANSI.sub("", text)
    if "<" in text and not ("slack" in idle and text is given):
        text = _SLACK_LINK.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), text)
        text = _SLACK_REF.sub(lambda m: m.group(1) or "", text)
    if "&" in text and not ("entity" in idle and text is given):
        text = _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text)
    if "```" in text and not ("fence" in idle and text is given):
        text = _drop_fences(text)
    if "\t" in text and not ("control" in idle and text is given):
        text = text.replace("\t", "    ")
    if "\n>" in text and not ("pytest" in idle and text is given):
        text = _pytest_listings(text)
    if ".py:" in text:
        text = _python_frames(text)
    if ".py" in text or "❱" in text:
        text = _dialect_frames(text)
    if not ("control" in idle and text is given) and _CONTROL.search(text):
        text = _without_controls(text)
    return text


# What `_CONTROL` matches, as bytes: each is one byte in UTF-8 and never part of a longer sequence,
# so deleting them from the UTF-8 (in C) deletes those characters (twice as fast as `_CONTROL.sub`
# on a 2 MB paste); `surrogatepass` carries any lone surrogate of the text through unchanged.
_CONTROL_DELETED = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


def _without_controls(text: str) -> str:
    """`text` without the characters `_CONTROL` matches."""
    data = text.encode("utf-8", errors="surrogatepass").translate(None, _CONTROL_DELETED)
    return data.decode("utf-8", errors="surrogatepass")


# Where an IPython frame may be: its words, found from their literal start; the whole-line pattern
# then runs on those lines only (its `^` would otherwise be tried at every position of the text).
_IPYTHON_WORDS = first_use_re(_IPYTHON_WORDS_PATTERN)
_PYTHON_FRAME = r'\g<lead>File "\g<path>", line \g<line>, in \g<fn>'


def _python_frames(text: str) -> str:
    """Every IPython frame line written the way Python's own traceback writes it."""
    pieces: list[str] = []
    done = 0
    for words in _IPYTHON_WORDS.finditer(text):
        start = text.rfind("\n", 0, words.start()) + 1
        if start < done:
            continue  # a line already rewritten
        end = text.find("\n", words.end())
        end = len(text) if end < 0 else end
        pieces += [text[done:start], _IPYTHON_FRAME.sub(_PYTHON_FRAME, text[start:end])]
        done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


# What other printers of a Python stack write for a frame (or the line running in it), as a line
# Python's own traceback (or IPython's arrow, for the running line) writes it; each keeps what precedes
# it on its line (a container's or logger's prefix). Rich's boxed traceback (`│ /x/vllm/worker/
# worker.py:123 in load_model │`, `│ ❱ 123 │   │   self.model_runner.load_model()   │`), faulthandler's
# dump (`File "x.py", line 12 in f`, no comma), py-spy's dump (`    load_model (vllm/worker/worker.py:123)`),
# pytest's short traceback (`vllm/worker/worker.py:123: in load_model`) and IPython 7's
# (`~/x/vllm/worker/worker.py in load_model(self)`, its line in the `-->` arrow below).
_RICH_FRAME = first_use_re(
    r"^(?P<lead>[^│\n]*)│[ ]?(?P<path>[^\s│][^│\n]*?\.py):(?P<line>\d+) in (?P<fn>[\w<>]+)[ ]*│?[ ]*$"
)
_RICH_ARROW = first_use_re(r"^(?P<lead>[^│❱\n]*)│[ ]*❱[ ]*(?P<line>\d+)[ ]│(?P<code>[^\n]*?)[ ]*│?[ ]*$")
_FAULTHANDLER = first_use_re(
    r'^(?P<lead>[^\n]*?)File "(?P<path>[^"\n]+)", line (?P<line>\d+) in (?P<fn>[\w<>]+)[ ]*$'
)
_PY_SPY = first_use_re(
    r"^(?P<lead>(?:[^\n]*?[|)\]:][ ])?[ ]{2,})(?:[\w<>]+\.)*(?P<fn>[\w<>]+) "
    r"\((?P<path>[^()\s]+\.py):(?P<line>\d+)\)[ ]*$"
)
_PYTEST = first_use_re(r'^(?P<lead>[ \t]*)(?P<path>[^\s:"]+\.py):(?P<line>\d+): in (?P<fn>[\w<>]+)[ ]*$')
_IPYTHON7 = first_use_re(r'^(?P<lead>[ \t]*)(?P<path>[^\s"]+\.py) in (?P<fn>[\w<>]+)\([^\n]*$')
_IPYTHON7_ARROW = first_use_re(r"^[ \t]*-+>[ ]*(?P<line>\d+)\b", re.MULTILINE)
# each trigger on its own: one opening with a literal lets `re` skip ahead to it, where their
# alternation tries every position of the text (its first characters are a space, a dot, a quote)
_DIALECT_WORDS = tuple(first_use_re(trigger) for trigger in _DIALECT_TRIGGERS)
_DIALECT_LOOKAHEAD = 2000  # characters after an IPython 7 frame searched for its arrow's line number


def _frame_line(match: re.Match[str], line: str) -> str:
    return f'{match.group("lead")}File "{match.group("path")}", line {line}, in {match.group("fn")}'


def _dialect_line(text: str, start: int, end: int) -> str | None:
    """The line text[start:end] written as Python's traceback writes it, or None when it is no frame
    of another printer."""
    line = text[start:end]
    if (found := _RICH_FRAME.match(line)) is not None:
        return _frame_line(found, found.group("line"))
    if (found := _RICH_ARROW.match(line)) is not None:
        code = found.group("code").replace("│", " ").strip()
        return f"{found.group('lead')}---> {found.group('line')} {code}"
    for pattern in (_FAULTHANDLER, _PY_SPY, _PYTEST):
        if (found := pattern.match(line)) is not None:
            return _frame_line(found, found.group("line"))
    if (found := _IPYTHON7.match(line)) is not None:
        arrow = _IPYTHON7_ARROW.search(text, end, end + _DIALECT_LOOKAHEAD)
        return _frame_line(found, arrow.group("line") if arrow else "0")
    return None


_match_start = operator.methodcaller("start")


def _dialect_frames(text: str) -> str:
    """Every frame other printers of a Python stack wrote, written the way Python's traceback does:
    the frame rules and the call-graph table then read one form (line numbers and line count kept)."""
    pieces: list[str] = []
    done, looked = 0, -1
    # the lines holding any trigger, in order (a trigger never takes in a newline, so the lines any
    # of them hits are the lines their alternation hits)
    for words in heapq.merge(*(each.finditer(text) for each in _DIALECT_WORDS), key=_match_start):
        start = text.rfind("\n", 0, words.start()) + 1
        if start < done or start == looked:
            continue  # a line already looked at
        looked = start
        end = text.find("\n", words.end())
        end = len(text) if end < 0 else end
        rewritten = _dialect_line(text, start, end)
        if rewritten is not None:
            pieces += [text[done:start], rewritten]
            done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


# pytest's long report of a traceback entry: the function's source from its `def` line, the running
# line marked `>` in the first column, the exception's `E   ` lines, then the entry's location
# (`vllm/v1/worker/utils.py:260: ValueError`, `path.py:42: ` for an entry above the last). Written the
# way Python's traceback writes a frame, line count kept: the listing line right above the `>` line
# becomes `File "path", line 260, in request_memory` (the name from the `def` line; pytest has no line
# of its own for it) and the `>` line that frame's code line. A report cut before the location names
# no file (`UNSHOWN_FILE`: the frame is looked up by its function's name).
_PYTEST_POINTER = first_use_re(r">(?P<indent>[ ]{3,})\S")
_PYTEST_DEF = first_use_re(r"(?P<indent>[ ]{4,})(?:async[ ]+)?def[ ]+(?P<fn>[A-Za-z_]\w{0,200})\(")
_PYTEST_LOCATION = first_use_re(r'(?P<path>[^\s:"]{1,600}\.py):(?P<line>\d+): (?:[\w.]{1,200})?[ ]*$')
_PYTEST_LISTING = 400  # lines of a function's source above its `>` line looked through for its `def`
_PYTEST_AFTER = 120  # `E   ` lines below the `>` line looked through for the entry's location
UNSHOWN_FILE = "<file not shown>"


def _pytest_listings(text: str) -> str:
    """Every entry of a pytest long report written as a Python traceback frame (see above)."""
    lines = text.split("\n")
    changed = False
    for index in range(1, len(lines)):
        pointer = _PYTEST_POINTER.match(lines[index]) if lines[index].startswith(">") else None
        if pointer is None:
            continue
        name = _pytest_function(lines, index, len(pointer.group("indent")) + 1)
        if name is None:
            continue
        path, number = _pytest_location(lines, index)
        lines[index - 1] = f'  File "{path}", line {number}, in {name}'
        lines[index] = " " + lines[index][1:]
        changed = True
    return "\n".join(lines) if changed else text


def _pytest_function(lines: list[str], pointer: int, indent: int) -> str | None:
    """The function whose listing holds the `>` line at `pointer` (its code indented `indent`): the
    nearest `def` above, less indented, every line between a blank or an indented source line."""
    for index in range(pointer - 1, max(-1, pointer - _PYTEST_LISTING), -1):
        line = lines[index]
        found = _PYTEST_DEF.match(line)
        if found is not None and len(found.group("indent")) < indent:
            return found.group("fn")
        if line.strip() and not line.startswith("    "):
            return None
    return None


def _pytest_location(lines: list[str], pointer: int) -> tuple[str, int]:
    """(path, line) of the entry whose `>` line is at `pointer`: the location line after its `E   `
    lines, or UNSHOWN_FILE when the paste ends (or another entry starts) first."""
    for index in range(pointer + 1, min(len(lines), pointer + _PYTEST_AFTER)):
        line = lines[index]
        if not line.strip() or line.startswith("E "):
            continue
        found = _PYTEST_LOCATION.match(line)
        if found is not None:
            return found.group("path"), int(found.group("line"))
        break
    return UNSHOWN_FILE, 0


def _drop_fences(text: str) -> str:
    pieces: list[str] = []
    done = 0
    for match in _FENCE.finditer(text):
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        if match.group("tag") is not None and line_start >= done and not text[line_start:start].strip(" \t"):
            start = line_start  # a fence line: the whole line goes, its newline stays
        pieces.append(text[done:start])
        done = match.end() if start == line_start and match.group("tag") is not None else match.start() + 3
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def clean_text(text: str, triggered: frozenset[str] | None = None) -> str:
    """Whole-text cleanup that keeps the number of lines; repeated to a fixed point (idempotent).
    `triggered` is `_triggered` of `text`'s UTF-8 where the caller already knows it."""
    idle = frozenset() if triggered is None else _LITERAL_STEPS - triggered
    while True:
        cleaned = _clean_once(text, idle)
        if cleaned == text:
            return cleaned
        found = _triggered(cleaned.encode("utf-8", errors="replace"))
        if not found:
            return cleaned
        text, idle = cleaned, _LITERAL_STEPS - found


def _may_be_glued(raw: str) -> bool:
    """Whether a process tag can start after a line's first character: a tag holds `pid=` and no
    `(` between its own `(` and `pid=`, so a line whose only `pid=` follows its only `(`-to-`pid=`
    opening at the start (as every line of a V1 process reads) has none to look for."""
    at = raw.find("pid=")
    if at < 0:
        return False
    return raw.find("pid=", at + 4) >= 0 or raw.rfind("(", 0, at) > 0


def split_prefixes(raw: str) -> tuple[str, str, str]:
    """(source, level, message) of one cleaned line, with every known prefix removed.

    A progress bar without a newline glues the next process's line onto its own; the message is
    then what follows the last process tag that starts a logger header.
    """
    source, level, start, end = split_spans(raw)
    return source, level, raw[start:end]


def split_spans(raw: str) -> tuple[str, str, int, int]:
    """`split_prefixes` with the message as where it starts and ends in `raw` (it is a slice)."""
    source = ""
    level = ""
    text = raw
    if _may_be_glued(raw):
        starts = [m.start() for m in _GLUED.finditer(raw)]
        if starts and starts[-1] > 0:
            text = raw[starts[-1] :]
    for _ in range(12):
        match = _PREFIX.match(text)
        if match is None or match.end() == 0:
            break
        kind = match.lastgroup  # the family's own group: each alternative is one named group
        if kind == "proc":
            source = match.group("proc")
        elif kind in _SOURCE_OF and not source:
            source = _SOURCE_OF[kind](match)
        if kind in _LEVEL_OF:
            level = _LEVEL_OF[kind](match) or level
        text = text[match.end() :]
    start = len(raw) - len(text)
    text = text.rstrip()
    if text.endswith("**"):
        text = text[:-2].rstrip()
    return source, level, start, start + len(text)


def memo_key(text: str | bytes) -> bytes:
    """What a process-wide memo keys a text by: its 16-byte BLAKE2b digest. A memo of what a line
    yields outlives the request that pasted it; keyed by the digest (and holding where the line's
    parts lie rather than the parts), it keeps no text a paste held, such as a secret the redactor
    does not know."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


# A line's prefixes depend on its text alone: identical lines are split once per process (within a
# paste, and across pastes of the same startup or traceback), up to MEMO_LINES distinct lines.
_SPLITS: dict[bytes, tuple[str, str, int, int]] = {}


def _split_once(raw: str) -> tuple[str, str, str]:
    global _SPLITS
    key = memo_key(raw)
    known = _SPLITS.get(key)
    if known is None:
        if len(_SPLITS) >= MEMO_LINES:
            _SPLITS = {}  # replaced, never cleared (see MEMO_LINES)
        known = _SPLITS[key] = split_spans(raw)
    source, level, start, end = known
    return source, level, raw[start:end]


def run_of(data: bytes, raw: bytes, end: int) -> tuple[int, int]:
    """How many consecutive lines of `data` read `raw`, from the one ending at `end`, and where the
    line after them starts: a paste of the same line over and over is read once and counted.

    Lines repeat exactly when the text is periodic with the line's length: blocks of a growing
    number of lines are compared (in C) with the same block one line earlier.
    """
    if not data.startswith(raw, end + 1):  # the next line is another (both checks below need it)
        return 1, end + 1
    size, period = len(data), len(raw) + 1
    repeats, pos, step = 1, end + 1, 1
    while step and pos < size:
        stop = pos + step * period
        if stop <= size and data[pos:stop] == data[pos - period : stop - period]:
            repeats, pos, step = repeats + step, stop, step * 2
        else:
            step //= 2
    if pos < size and size - pos == len(raw) and data.endswith(raw):
        repeats, pos = repeats + 1, size + 1  # the last line, without a newline
    return repeats, pos


# Terminals hard-wrap long lines at their width, mid-word: every wrapped piece then has exactly
# that many characters, the longest length in the paste. One long line alone is not taken as a wrap.
_MIN_WRAP_WIDTH = 60


def _run_starts(lines: list[str]) -> list[int]:
    """Where each run of identical consecutive lines starts (0-based; lines compared in C)."""
    changes = map(operator.ne, itertools.islice(lines, 1, None), lines)
    return [0, *itertools.compress(range(1, len(lines)), changes)]


# Fewer lines than this are read as they are: finding their runs would cost more than it saves.
_RUNS_FROM = 1024


def _repeated_runs(lines: list[str]) -> list[int] | None:
    """`_run_starts` of `lines` when more than a fifth of them copy the line before (one line pasted
    over and over), else None (always for a short paste)."""
    if len(lines) < _RUNS_FROM:
        return None
    starts = _run_starts(lines)
    return starts if (len(lines) - len(starts)) * 5 > len(lines) else None


# A width a few longer lines do not hide (a title or sentence the person typed around a terminal's
# output, never wrapped: no record of a program) is taken only when this many lines have it and are
# continued by the next line (no new record starts there), and at most 1% of the lines are longer.
_WRAPPED_LEAST = 3
_LONGER_SHARE = 100


def _wrap_width(lines: list[str], lengths: list[int]) -> int | None:
    """The width a paste was hard-wrapped at: the longest length two or more lines share, or the
    longest that _WRAPPED_LEAST lines continued by the next one share below at most 1% of the
    lines (one at least)."""
    width = max(lengths, default=0)
    if width < _MIN_WRAP_WIDTH:
        return None
    counts = collections.Counter(lengths)
    if counts[width] >= 2:
        return width
    allowed, longer = max(1, len(lengths) // _LONGER_SHARE), 0
    for length in heapq.nlargest(allowed + 1, counts):
        if length < _MIN_WRAP_WIDTH:
            return None
        if (
            counts[length] >= _WRAPPED_LEAST
            and longer
            and _all_typed(itertools.compress(lines, map(length.__lt__, lengths)))
            and _mostly_continued(lines, lengths, length)
        ):
            return length
        longer += counts[length]
        if longer > allowed:
            return None
    return None


def _all_typed(lines: Iterable[str]) -> bool:
    """Whether no line is a program's record (a prefix or a record's start): lines a person typed."""
    for line in lines:
        prefix = _PREFIX.match(line)
        if _RECORD.match(line) or (prefix is not None and line[: prefix.end()].strip()):
            return False
    return True


def _mostly_continued(lines: list[str], lengths: list[int], width: int) -> bool:
    """Whether _WRAPPED_LEAST lines of `width` and two in three of them are continued by the next
    (a line may end exactly at the width: then the next one starts a record)."""
    at = list(itertools.compress(range(len(lines) - 1), map(width.__eq__, lengths)))
    spare = len(at) - max(_WRAPPED_LEAST, -(-2 * len(at) // 3))  # lines that may start no wrap
    for index in at:
        if not _continues(lines[index + 1], lines[index]):
            spare -= 1
            if spare < 0:
                return False
    return True


def _wrap_points(lines: list[str], starts: list[int] | None = None) -> set[int]:
    """Indexes of lines cut at the terminal width (`_wrap_width`: the longest length two or more
    lines share, unless a few longer lines a person typed hide it).

    A line followed by the same line is no wrap point (a wrapped piece never repeats whole), so a
    run of one pasted line is not rejoined piece by piece: given the runs (`starts`, `_run_starts`
    of `lines`), only each run's last line is looked at, and a 2 MB paste of one line is one run.
    """
    if starts is not None:
        lengths = list(map(len, map(lines.__getitem__, starts)))  # of each run's line
        width = max(lengths, default=0)
        if width < _MIN_WRAP_WIDTH:
            return set()
        runs = list(itertools.compress(range(len(starts)), map(width.__eq__, lengths)))
        ends = [starts[at + 1] - 1 if at + 1 < len(starts) else len(lines) - 1 for at in runs]
        if len(runs) < 2 and ends[0] == starts[runs[0]]:  # one line of that width, not repeated
            return set()
        return set(ends)
    lengths = list(map(len, lines))
    wrapped = _wrap_width(lines, lengths)
    if wrapped is None:
        return set()
    width = wrapped
    # (line, next line) pairs compared in C, without a Python step per line
    pairs = map(operator.and_, map(width.__eq__, lengths), map(operator.ne, lines, lines[1:]))
    points = set(itertools.compress(range(len(lines) - 1), pairs))
    if lengths[-1] == width:
        points.add(len(lines) - 1)
    return points


def _rewrite_joined_frames(lines: list[str], moved: set[int]) -> None:
    """Frames of other printers that a hard wrap had cut, rewritten once rejoined (in place): cleaning
    ran on the pieces, where no printer's frame was whole."""
    for index in {index - 1 for index in moved} - moved:
        joined = lines[index]
        if ".py" in joined or "❱" in joined:
            lines[index] = _dialect_frames(_python_frames(joined))


def _unwrap(lines: list[str], points: set[int]) -> set[int]:
    """Rejoin terminal hard-wraps in place; the indexes of the lines emptied by it.

    A line at a wrap point is joined with the next one unless that one starts a new record (a
    logger, process or timestamp prefix) or is empty. The newline is moved, not removed: the
    joined text stays on the first line's number and an empty line takes the continuation's
    place, so every later line keeps its original number.
    """
    moved: set[int] = set()
    for start in sorted(points):
        if not lines[start]:
            continue  # already joined into an earlier line
        end = start
        while end in points and end + 1 < len(lines) and _continues(lines[end + 1], lines[end]):
            end += 1
        if end == start:
            continue
        lines[start] = "".join(lines[start : end + 1])
        for i in range(start + 1, end + 1):
            lines[i] = ""
        moved.update(range(start + 1, end + 1))
    return moved


# Starts of a new record even without a logger prefix: a traceback, a frame, an exception, a level.
_RECORD = first_use_re(
    r"(?:Traceback \(most recent call last\)|[ ]*File \""
    r"|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning)\b"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b)"
)


def starts_record(text: str) -> bool:
    """Whether `text` begins a new record (a traceback, a frame, an exception, a level word)."""
    return _RECORD.match(text) is not None


def _continues(line: str, previous: str) -> bool:
    """Whether `line` can be the rest of the wrapped `previous` (not empty, not a new record)."""
    if not line.strip() or line == previous or _RECORD.match(line):
        return False
    match = _PREFIX.match(line)
    # a break at a space leaves the rest indented; indentation alone starts no record, nor a piece
    # opening with a call's `**kwargs` (what a markdown bold mark looks like)
    return match is None or not line[: match.end()].strip() or line.startswith("**")


class Document:
    """A cleaned log: whole text for fast scans, lines on demand with their original numbers."""

    __slots__ = (
        "_cache",
        "_data",
        "_distinct",
        "_ends",
        "_starts",
        "_unsplit",
        "fences",
        "lines",
        "memo",
        "moved",
        "repeating",
        "text",
    )

    def __init__(self, raw: str) -> None:
        # (number, text) of every line holding a code fence, as pasted: cleaning removes the fences
        encoded = raw.encode("utf-8", errors="replace")
        fenced = any(fence.search(encoded) is not None for fence in _FENCES)
        lines = raw.split("\n")
        self.fences: tuple[tuple[int, str], ...] = _fence_lines(encoded, lines) if fenced else ()
        data: bytes | None = encoded
        points: set[int] = set()
        starts = _repeated_runs(lines)
        triggered = _triggered(_distinct_data(lines, starts, encoded))
        if triggered:
            # widths as the terminal printed them, before fences and colour codes are removed
            points = _wrap_points(lines, starts)
            raw, data = clean_text(raw, triggered), None
            lines = raw.split("\n")
            starts = _repeated_runs(lines)
        points |= _wrap_points(lines, starts)
        moved = _unwrap(lines, points) if points else set()
        if moved:
            _rewrite_joined_frames(lines, moved)
            raw, data = "\n".join(lines), None
        self.text = raw
        # 1-based numbers of the lines whose text a rejoined wrap moved onto an earlier line
        self.moved = frozenset(index + 1 for index in moved)
        self.lines = lines
        self._cache: dict[int, Line] = {}
        self._data = data
        self._distinct: DistinctLines | None = None
        # where each run of identical consecutive lines starts, when many lines copy the one before
        # and the lines are the ones it was taken from (a rejoined wrap empties lines); else None
        self._starts: list[int] | None = None if moved else starts
        self._ends: list[int] | None = None  # byte offset where each line ends, when asked for
        # the text less the lines already split with a prefix, and each kept line's number (`_kept`)
        self._unsplit: tuple[bytes, list[int] | None] | None = None
        # whether lines repeat across the text (every rank, every request), as the first pass over
        # it saw (the eager scan); None until one has looked. Later passes then read each distinct
        # line once, or the text as it is.
        self.repeating: bool | None = None
        # what a pass derives from a line's text alone, keyed by (what, its tables' id, the text):
        # a line repeated across the document is read once
        self.memo: dict[tuple[str, int, str], object] = {}

    @property
    def distinct(self) -> DistinctLines:
        """Each distinct line once, for whole-text passes that care which lines match, not where."""
        if self._distinct is None:
            self._distinct = DistinctLines(self.lines, self.data, self.repeating, self._starts)
        return self._distinct

    def lines_hit(self, pattern: Any) -> set[str]:
        """The distinct lines an RE2 `pattern` matches (one pass over each distinct line once)."""
        return self.distinct.hit_by(pattern)

    def runs(self, chosen: Collection[str]) -> list[tuple[int, int]]:
        """(number, repeats) of every run of identical lines in `chosen`, in order: a line pasted
        over and over on consecutive lines is one run."""
        view = self.distinct
        if not view.repeats:
            indexes = itertools.compress(range(len(self.lines)), map(chosen.__contains__, self.lines))
            return list(self._runs_at(indexes))
        starts, heads, total = view.starts, view.heads, len(self.lines)
        out: list[tuple[int, int]] = []
        for at in itertools.compress(range(len(heads)), map(chosen.__contains__, heads)):
            start = starts[at]
            out.append((start + 1, (starts[at + 1] if at + 1 < len(starts) else total) - start))
        return out

    def matched_runs(self, pattern: Any) -> Iterator[tuple[int, int]]:
        """(number, repeats) of every run of identical lines an RE2 `pattern` matches inside, in
        order: over each distinct line once when the lines repeat (`repeating`), else over the text
        itself, skipping each run's copies (as they are asked for)."""
        if self.repeating or (self.repeating is None and self._looks_repeated()):
            return iter(self.runs(self.distinct.hit_by(pattern)))
        return ((index + 1, repeats) for index, repeats in hit_runs(self.data, pattern))

    def unprefixed_runs(self, pattern: Any) -> Iterator[tuple[int, int]]:
        """`matched_runs` for a pass that drops every line with a logger or process prefix (a
        person's words are unprefixed): a line already split (the scan's, the lines read since)
        with such a prefix is left out of the text searched, once the lines hardly repeat. It may
        still yield prefixed lines the document has not split; the caller drops them.

        Exactly `matched_runs`' runs of unprefixed lines: a match stays inside its line (the
        patterns' `never_nl`), the kept lines keep their newlines on both sides, and the first and
        last lines are always kept (where a bare `^` or `$` matches). A run's copies have one text,
        so they are kept or dropped alike as far as they are unprefixed; each run is counted in the
        document itself."""
        if self.repeating or (self.repeating is None and self._looks_repeated()):
            return self.matched_runs(pattern)
        data, numbers = self._kept()
        if numbers is None:
            return self.matched_runs(pattern)
        return self._kept_runs(data, numbers, pattern)

    def _kept(self) -> tuple[bytes, list[int] | None]:
        """`unprefixed_runs`' text and the number of each of its lines (None: the whole text),
        taken once from the lines split so far and the lines vLLM's process tag or logger header
        opens (`_LOGGED`, one C-level match per line: most of a long log, split or not)."""
        if self._unsplit is None:
            last = len(self.lines)
            # building the reduced text costs a copy of what it keeps: it pays only on a large text
            # with split lines (a 300-line paste searches itself faster)
            prefixed: set[int] = set()
            if len(self.data) >= _UNSPLIT_MIN_BYTES:
                prefixed = {n for n, line in self._cache.items() if line.source or line.level}
                prefixed.update(itertools.compress(range(1, last + 1), map(_LOGGED.match, self.lines)))
                prefixed -= {1, last}  # where a bare `^` or `$` matches
            if not prefixed:
                self._unsplit = (self.data, None)
            else:
                numbers = list(itertools.filterfalse(prefixed.__contains__, range(1, last + 1)))
                text = "\n".join(map(self.lines.__getitem__, [n - 1 for n in numbers]))
                self._unsplit = (text.encode("utf-8", errors="replace"), numbers)
        return self._unsplit

    def _kept_runs(self, data: bytes, numbers: list[int], pattern: Any) -> Iterator[tuple[int, int]]:
        """(number, repeats) of the runs of identical document lines whose first line `pattern`
        matches inside, in `data` (the kept lines, line i numbered numbers[i])."""
        lines, total, done = self.lines, len(self.lines), 0
        for index, _ in hit_runs(data, pattern, runs=False):
            number = numbers[index]
            if number > done:
                repeats = _run_length(lines, number - 1, total)
                yield number, repeats
                done = number + repeats - 1

    def _looks_repeated(self) -> bool:
        """Whether the lines look repeated: many copy the line before (the runs `Document` found,
        without hashing a line), or `_looks_repeated` says so of the whole text."""
        return self._starts is not None or _looks_repeated(self.lines)

    def _runs_at(self, indexes: Iterable[int]) -> Iterator[tuple[int, int]]:
        """(number, repeats) of the runs starting at the 0-based line `indexes` (ascending); an index
        inside a run already counted is skipped."""
        lines, total = self.lines, len(self.lines)
        done = -1
        for index in indexes:
            if index <= done:
                continue
            repeats = _run_length(lines, index, total)
            yield index + 1, repeats
            done = index + repeats - 1

    def line_end(self, number: int) -> int:
        """The byte offset in `data` where line `number` ends (its newline, or the end of the text)."""
        if self._ends is None:
            ascii_only = len(self.data) == len(self.text)  # then a line's bytes are its characters
            pieces = self.lines if ascii_only else self.data.split(b"\n")
            self._ends = list(itertools.accumulate(map(len, pieces)))
        return self._ends[number - 1] + number - 1

    def lines_data(self, first: int, last: int) -> bytes:
        """The UTF-8 of lines first..last (1-based, inclusive, within the document) joined by their
        newlines: a slice of `data`, which is those lines' own encoding (a character encodes alike
        wherever it stands), without joining and encoding them again. A short paste joins them: the
        offsets of its every line cost it more than the few lines a lookup asks for."""
        if len(self.lines) < _RUNS_FROM:
            return "\n".join(self.lines[first - 1 : last]).encode("utf-8", errors="replace")
        start = self.line_end(first - 1) + 1 if first > 1 else 0
        return self.data[start : self.line_end(last)]

    @property
    def data(self) -> bytes:
        """The cleaned text as UTF-8, for RE2 scans (encoded once)."""
        if self._data is None:
            self._data = self.text.encode("utf-8", errors="replace")
        return self._data

    def __len__(self) -> int:
        return len(self.lines)

    def line(self, number: int) -> Line:
        """The normalized line with 1-based `number` (cached)."""
        cached = self._cache.get(number)
        if cached is None:
            source, level, text = self.split(self.lines[number - 1])
            cached = Line(number=number, source=source, level=level, text=text)
            self._cache[number] = cached
        return cached

    def split(self, raw: str) -> tuple[str, str, str]:
        """split_prefixes of one of the document's lines (identical lines are split once)."""
        return _split_once(raw)

    def known_line(self, number: int, source: str, level: str, text: str) -> Line:
        """Line `number` from prefixes already split (the scan's, for a line it has seen before)."""
        cached = self._cache.get(number)
        if cached is None:
            cached = Line(number=number, source=source, level=level, text=text)
            self._cache[number] = cached
        return cached

    def span(self, first: int, last: int) -> list[Line]:
        """Normalized lines first..last (inclusive, clamped to the document)."""
        first = max(1, first)
        last = min(len(self.lines), last)
        return [self.line(n) for n in range(first, last + 1)]


def _fence_lines(data: bytes, lines: list[str]) -> tuple[tuple[int, str], ...]:
    """(1-based number, text) of each of `lines` (their UTF-8 is `data`) with a ``` or ~~~ fence on
    it: the lines `bytes.find` finds the marks on (a Python step per line cost a 2 MB paste several
    milliseconds, and `str.find` reads a non-ASCII text's four bytes per character)."""
    starts: set[int] = set()  # the byte offset where each line holding a mark starts
    for mark in _FENCE_MARKS:
        at = data.find(mark)
        while at >= 0:
            starts.add(data.rfind(b"\n", 0, at) + 1)
            end = data.find(b"\n", at)
            at = -1 if end < 0 else data.find(mark, end)
    found: list[tuple[int, str]] = []
    newlines = counted = 0
    for start in sorted(starts):
        newlines += data.count(b"\n", counted, start)  # a newline is one byte, and only ever "\n"
        counted = start
        found.append((newlines + 1, lines[newlines].rstrip("\r")))
    return tuple(found)


def _distinct_data(lines: list[str], starts: list[int] | None, data: bytes) -> bytes:
    """What a per-line question (does any line need cleaning?) may read instead of `data`, the UTF-8
    of `lines`: each distinct line once when many lines copy the line before (`starts`, the runs
    `_repeated_runs` found), else `data` itself."""
    if starts is None:
        return data
    return "\n".join(dict.fromkeys(map(lines.__getitem__, starts))).encode("utf-8", errors="replace")


def _run_length(lines: list[str], index: int, stop: int) -> int:
    """How many lines from `index` (0-based, before `stop`) equal lines[index]: blocks of a growing
    size are compared in C, so a paste of one line 14,000 times costs a few dozen comparisons."""
    text, repeats, step = lines[index], 1, 1
    while step:
        end = index + repeats + step
        if end <= stop and lines[index + repeats : end].count(text) == step:
            repeats, step = repeats + step, step * 2
        else:
            step //= 2
    return repeats


def run_span(lines: list[str], index: int) -> tuple[int, int]:
    """The 0-based first and last index of the run of identical lines holding lines[index], found by
    blocks of a growing size compared in C both ways (a run of 14,000 copies costs a few dozen)."""
    text, before, step = lines[index], 0, 1
    while step:
        start = index - before - step
        if start >= 0 and lines[start : index - before].count(text) == step:
            before, step = before + step, step * 2
        else:
            step //= 2
    return index - before, index + _run_length(lines, index, len(lines)) - 1


# Lines whose length is a multiple of this are the sample _looks_repeated hashes.
_SAMPLE_EVERY = 8
_SAMPLE_LEAST = 64  # a smaller sample says nothing: judged on every line instead


def _looks_repeated(lines: list[str]) -> bool:
    """Whether a fifth of the lines or more look like copies (as DistinctLines counts them), judged
    on the lines whose length is a multiple of _SAMPLE_EVERY: every copy of a line is in that sample
    or out of it together, so it repeats as the whole text does, at a fraction of the hashing. It
    only chooses how a pass reads the text (each distinct line once, or the text as it is), never
    what the pass finds."""
    lengths = map(operator.mod, map(len, lines), itertools.repeat(_SAMPLE_EVERY))
    sample = list(itertools.compress(lines, map(operator.not_, lengths)))
    if len(sample) < _SAMPLE_LEAST:  # few lengths, as when one line is pasted over and over
        sample = lines
    return len(set(sample)) * 5 < len(sample) * 4


class DistinctLines:
    """A document's distinct lines, joined as UTF-8: a pass over them finds which lines a pattern
    matches, once however often each line repeats (every rank, every request, every restart). A text
    whose lines hardly repeat is used as it is (`repeats` False: `lines` and `data` are the text's)."""

    __slots__ = ("data", "heads", "lines", "repeats", "starts")

    def __init__(
        self, lines: list[str], data: bytes, repeating: bool | None = None, starts: list[int] | None = None
    ) -> None:
        self.lines, self.data = lines, data
        self.starts: list[int] = []
        self.heads: list[str] = []
        self.repeats = repeating is not False
        if not self.repeats:
            return
        # runs of identical lines first (compared in C, without hashing every copy): where each
        # starts, and its text
        self.starts = _run_starts(lines) if starts is None else starts
        self.heads = list(map(lines.__getitem__, self.starts))
        unique = list(dict.fromkeys(self.heads))
        # asked unseen: lines repeat when a fifth of them or more are copies
        self.repeats = bool(repeating) or len(unique) * 5 < len(lines) * 4
        if self.repeats:
            self.lines, self.data = unique, "\n".join(unique).encode("utf-8", errors="replace")

    def hit_by(self, pattern: Any) -> set[str]:
        """The distinct lines `pattern` matches inside (a match never takes in a neighbour line).

        Over repeating lines, whether a line is hit is kept for the process (a line's verdict does
        not depend on its neighbours): only lines no earlier document showed are searched.
        """
        if not self.repeats:
            return {self.lines[index] for index, _ in hit_runs(self.data, pattern)}
        known = _verdicts(pattern)
        unknown = list(itertools.filterfalse(known.__contains__, self.lines))
        if unknown:
            whole = len(unknown) == len(self.lines)
            data = self.data if whole else "\n".join(unknown).encode("utf-8", errors="replace")
            hit = {unknown[index] for index, _ in hit_runs(data, pattern)}
            known.update(zip(unknown, map(hit.__contains__, unknown), strict=True))
        return set(itertools.compress(self.lines, map(known.__getitem__, self.lines)))


_MEMO_PATTERNS = 64  # patterns whose verdicts are kept (the packs' few whole-text patterns)
_VERDICTS: dict[Any, dict[str, bool]] = {}  # pattern -> {distinct line: whether it hits inside}


def _verdicts(pattern: Any) -> dict[str, bool]:
    global _VERDICTS
    known = _VERDICTS.get(pattern)
    if known is None or len(known) >= MEMO_LINES:
        if len(_VERDICTS) >= _MEMO_PATTERNS:
            _VERDICTS = {}
        known = _VERDICTS[pattern] = {}
    return known


# below this size a pass over the whole text is cheaper than building the text less its split lines
_UNSPLIT_MIN_BYTES = 1 << 16


def hit_runs(data: bytes, pattern: Any, runs: bool = True) -> Iterator[tuple[int, int]]:
    """(0-based index, repeats) of the runs of identical lines of `data` an RE2 `pattern` matches
    inside, in order; a run is skipped past once its first line is hit (its copies are hit alike).
    Without `runs`, every line is its own (its neighbours need not be its neighbours in a document).

    A match running on past its line's end (a leading `\\s*` taking the newline) counts only when
    the pattern also matches inside the line.
    """
    pos, index, size = 0, 0, len(data)
    search = pattern.search
    while pos < size:
        match = search(data, pos)
        if match is None:
            return
        start = data.rfind(b"\n", 0, match.start()) + 1
        index += data.count(b"\n", pos, start)
        end = data.find(b"\n", match.start())
        end = size if end < 0 else end
        if match.end() <= end or search(data, match.start(), end) is not None:
            repeats, pos = run_of(data, data[start:end], end) if runs else (1, end + 1)
            yield index, repeats
        else:
            repeats, pos = 1, end + 1
        index += repeats


# What a log line has and a person's sentence does not: a traceback, a frame, an exception name, a
# progress bar, sizes to the decimal ("23.55 GiB", "14.9595 GB": programs print binary units or two
# decimals and more; people write "141GB", "the model is 14.5 GB", and a size they mark as
# approximate, "~1.3 GB", "≈ 48.5 GiB", "about 2.5 GB", is their estimate, not a measurement), a
# path. Used on lines without any logger or process prefix (those are log lines by construction).
_FIGURE = (
    r"(?<![~≈\d.])(?<![~≈] )(?<!about )(?<!around )(?<!roughly )"
    r"(?:\d+\.\d+ ?(?:GiB|MiB|KiB)|\d+\.\d{2,} ?(?:GB|MB))\b"
)
_NOT_PROSE = first_use_re(
    r"Traceback \(most recent|^\s*File \"|^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning)\b"
    rf"|{_FIGURE}"
    r"|\d+ bytes\b|\|\s*\d+/\d+|/\w+/\w+\.py\b|^\s*[\^~]+\s*$"
    r"|^\s*(?:\$|#|>>>|\.\.\.|-{2,}>)\s|^\s*[\[{(<]\S*$"
)
# A memory figure printed to the hundredth of a GiB is a program's mark, unless the line around it is
# a long run of words: a person retelling what vLLM said ("only 13.2 GiB free of 79.19 GiB, but
# utilization 0.9 needs 71.27 GiB, so it refuses to start"), read as a sentence when its words are
# this many and this share of its tokens with the figures taken out
_FIGURES = first_use_re(_FIGURE)
# what a program's message shows beside its figures, wherever in the line: an exception's class
# name (`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …` under an issue's tag), a
# clock time (a console's timestamp before the message)
_PROGRAM_MARK = first_use_re(r"[A-Za-z_]\w*(?:Error|Exception)\b|\b\d{1,2}:\d{2}:\d{2}\b")
_RETOLD_WORDS = 10
_RETOLD_SHARE = 0.75
# A program's record anywhere in a line, whatever tag a fork, a plugin or a collector put before it
# (`[Stage-1] INFO 03-12 08:22:28 [model_runner.py:133] Model loading took …`, uvicorn's
# `INFO:     10.0.0.7:5123 - "POST …"`), and a shell's prompt before a command (`(venv)
# user@host:~/work$ python -m vllm…`): vLLM's logger header (a level, then the month-day time), a
# logger's `file.py:N]` location, a level glued to its colon at the line's start, a prompt's
# `user@host:path$`. Such a line is what ran, not the person's words.
_PRINTED_RECORD = first_use_re(
    r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d{1,2}-\d{1,2}\s+\d{1,2}:\d{2}:\d{2}\b"
    r"|\b[\w.-]+\.py:\d+\]|^\W{0,3}(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:\s|\w+:)"
    r"|^\s*(?:\([\w.-]+\)\s*)?[\w.-]+@[\w.-]+:\S*[$#]\s"
)


def is_record(text: str) -> bool:
    """Whether a line's text holds a program's record or a shell prompt (`_PRINTED_RECORD`), under whatever
    tag came before it: never a person's sentence, however many words it has."""
    return _PRINTED_RECORD.search(text) is not None


_WORD = first_use_re(r"[A-Za-z][A-Za-z'’-]*")
# key=value pairs are a program's (an args dump, `Namespace(…)`, a record's `pid=12)`, HTML's
# `class="…"`, `vllm==0.6.3`, a message's advice "consider passing CUDA_LAUNCH_BLOCKING=1") unless
# each is a bare setting standing as its own word in a line a person wrote (in markdown backticks,
# in the first person, or in an issue title with its `[Bug]:` tag): "I set max_model_len=16384
# and…", "[Bug]: VLLM_USE_V1=0 is needed if…". Settings (with --flags) making up a good part of the
# line, or environment assignments opening a command with flags (`VLLM_X=1 vllm serve m
# --max-model-len 4096`), are a shell's.
# A program's voice: a log level opening the line (inside a code span), advice addressed to the
# reader ("Pass `add_to_git_credential=True` if you want…", "set `do_rescale=False`… you are trying")
_PROGRAM_VOICE = first_use_re(r"^\W*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|\b(?:you|your)\b", re.IGNORECASE)
_PERSON = first_use_re(
    r"\b(?:I|I'm|I've|I'd|I'll|we|we're|we've|my|our|me|us)\b|我|^\s*\[[A-Za-z][\w /-]*\]:", re.IGNORECASE
)
# A sentence's own small words around its settings ("Loading Mixtral with tp=2 runs out of memory",
# "Setting gpu_memory_utilization=0.95 OOMs on the first request", "tp=2 时加载就爆显存"): English
# articles, prepositions, conjunctions and auxiliaries, or Chinese particles. An args dump or a
# record's `key=value` body has none between its pairs.
_FUNCTION_WORD = first_use_re(
    r"\b(?:the|a|an|of|on|in|at|to|with|without|for|from|by|and|or|but|when|while|if|after|before|"
    r"is|are|was|were|be|been|it|this|that|will|would|can|does|do|did|has|have|had|even|still|then)\b"
    r"|[的了时就在也都吗呢是被把和]|因为|所以|但是|如果",
    re.IGNORECASE,
)
# What a program's words around a setting look like even with small words in them: advice naming an
# environment variable ("For debugging consider passing CUDA_LAUNCH_BLOCKING=1", "Set the
# environment variable HYDRA_FULL_ERROR=1 for a complete stack trace"), or a record's field after
# its message's last sentence ("…more KV cache memory. total_num_cumulative_preemption=1").
_PROGRAM_SETTING = first_use_re(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*=|[.!?]\s+[\w.-]+=\S")


def _told_around(text: str) -> bool:
    """Whether a line's settings stand in a sentence of its own words (`_FUNCTION_WORD`)."""
    return _FUNCTION_WORD.search(text) is not None and _PROGRAM_SETTING.search(text) is None


_ASSIGNMENT = first_use_re(r"\w+=\S")
_INLINE_SETTING = first_use_re(r"-{0,2}[A-Za-z_][\w.-]*=[\w.+/-]+")
# (a setting in brackets is still a sentence's: "(~16.9x concurrency at `max_model_len=128`).")
_SETTING_WORD_ENDS = "`.,;:!?'\"()[]（）"
_SETTING = first_use_re(r"\w+=\S|(?<!\S)--?[A-Za-z]")
_COMMAND_START = first_use_re(r"^\s*(?:\w+=\S+\s+)+\S.*\s--?[A-Za-z]")
_SETTING_SHARE = 0.25
# the characters of a Chinese, Japanese (kana) or Korean (Hangul) sentence
_CJK = first_use_re(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")
_MIN_WORDS = 4
_MIN_CJK = 4
_CJK_RUN = first_use_re(r"[\s\u3000-\u30ff\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]+")


def _reads_as_settings(text: str, tokens: list[str], words: int) -> bool:
    """Whether a line's key=value pairs are a program's (one is no bare setting of its own word),
    or settings (key=value, --flags) make up a good part of its `words` words, or environment
    assignments open a shell command (one with flags)."""
    quoted = True  # every setting in backticks: markdown, which a person writes and a program does not
    for token in tokens:
        if not _ASSIGNMENT.search(token):
            continue
        if not _INLINE_SETTING.fullmatch(token.strip(_SETTING_WORD_ENDS)):
            return True
        quoted = quoted and "`" in token
    if _PROGRAM_VOICE.search(text) or not (quoted or _PERSON.search(text) or _told_around(text)):
        return True
    return len(_SETTING.findall(text)) > _SETTING_SHARE * words or _COMMAND_START.match(text) is not None


# A link is one token of the sentence around it: a markdown link reads as its text, a bare URL as a
# word (its path is no file a program printed, its query's `?utm_source=x&…` no settings).
_LINK = first_use_re(r"\[([^\[\]\n]{0,200})\]\((?:https?|ftp)://[^\s()]*\)|(?:https?|ftp)://[^\s<>]+")


# A setting's value written as a literal dict or list ("if I set limit_mm_per_prompt={"image": 12,
# "video": 0}, vLLM will…"): the one value of a setting the sentence names, not a record's fields
_LITERAL_VALUE = first_use_re(r"=(?:\{[^{}\n]{0,160}\}|\[[^\[\]\n]{0,160}\])")


def _link_word(match: re.Match[str]) -> str:
    text = match.group(1)
    return "link" if text is None else text


def _retold_figures(text: str) -> bool:
    """Whether a line whose only program's marks are memory figures (`text`, the figures taken out)
    is a long run of a person's words."""
    tokens = text.split()
    words = _WORD.findall(text)
    return len(words) >= _RETOLD_WORDS and len(words) >= _RETOLD_SHARE * len(tokens)


# A line's verdict depends on its text alone: each distinct text is judged once per process (every
# pass that asks, every rank's copy, a later paste of the same lines), up to MEMO_LINES texts.
_PROSE_VERDICTS: dict[str, bool] = {}


def is_prose(line: Line) -> bool:
    """Whether a line is a person's sentence rather than something a program printed.

    A line with a logger, process or container prefix is a log line. Otherwise it is prose when it
    has none of a log line's marks (a setting or two written inline are a sentence's; a link is a
    word) and reads as words: at least four, most of its tokens, or at least four Chinese characters.
    """
    if line.source or line.level or not line.text:
        return False
    global _PROSE_VERDICTS
    known = _PROSE_VERDICTS.get(line.text)
    if known is None:
        if len(_PROSE_VERDICTS) >= MEMO_LINES:
            _PROSE_VERDICTS = {}  # replaced, never cleared (see MEMO_LINES)
        known = _PROSE_VERDICTS[line.text] = _reads_as_prose(line.text)
    return known


def _reads_as_prose(given: str) -> bool:
    """`is_prose` of an unprefixed line's text."""
    # a link is one word of the sentence: a log line's marks and the words are read around it
    text = _LINK.sub(_link_word, given) if "://" in given else given
    if "={" in text or "=[" in text:  # a setting's literal value is one word of the sentence
        text = _LITERAL_VALUE.sub("=literal", text)
    if _PRINTED_RECORD.search(text):
        return False
    if _NOT_PROSE.search(text):
        bare = _FIGURES.sub(" ", text)
        if bare == text or _NOT_PROSE.search(bare) or _PROGRAM_MARK.search(bare) or "=" in bare:
            return False
        if not _retold_figures(bare):
            return False
    tokens = text.split()
    cjk = len(_CJK.findall(text))
    # a Chinese sentence has few spaces: two of its characters count as a word, and a setting glued
    # to them ("vllm参数中tensor_parallel_size=1，加载模型时") stands as a word of its own
    if "=" in text and _reads_as_settings(
        text, _CJK_RUN.split(text) if cjk else tokens, len(tokens) + cjk // 2
    ):
        return False
    if cjk >= _MIN_CJK:
        return True
    words = _WORD.findall(text)
    return len(words) >= _MIN_WORDS and len(words) >= 0.7 * len(tokens)
