"""Blocks a paste shows that no run printed: source code, diffs under review, configs, help text.

People paste a pull request's diff, the code that handles an OOM, a deployment's YAML or a stretch of
`vllm serve --help` around their question. Those lines say "raise ValueError("No available memory
for the cache blocks…")", `except torch.cuda.OutOfMemoryError:`, "to avoid RAM OOM" or name
`capture_model`, and none of it happened: the lines are shown, not printed by the run. People also
fence their logs, so a fence alone decides nothing: a block is code when none of its lines has a log
record's form (a logger or process prefix, a traceback, a frame, an exception line) and its lines
read as code (Python statements, diff lines, YAML/JSON keys, shell lines), the more surely so under a
code language's tag.

Found here, by form: markdown fences (``` and ~~~, with or without a language tag, also glued to
their first and last lines as Slack writes them), indented code blocks (four spaces after a blank
line), unified diff hunks, and argparse help text (`usage:`, option lines and their indented help).
A markdown parser (CommonMark) is not used: it knows neither Slack's glued fences nor help text, and
what matters here, a block's form, is judged line by line anyway.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import re2

from service.diagnosis.exception_lines import EXCEPTION_CLASS, exception_line
from service.diagnosis.normalize import MEMO_LINES, Document
from service.first_use import first_use_re

__all__ = ["code_lines"]

# Tags of languages no program's output is written in (a `bash`, `console` or `text` fence holds
# logs as often as commands, so it is judged by its lines alone).
_CODE_TAGS = frozenset(
    {
        "c", "cpp", "cuda", "diff", "dockerfile", "go", "ini", "java", "javascript", "js", "json",
        "jsonc", "patch", "py", "py3", "python", "python3", "rust", "suggestion", "toml", "ts",
        "typescript", "yaml", "yml",
    }
)  # fmt: skip
# The share of a block's lines that must read as code: under a code language's tag, or untagged.
_TAGGED_SHARE, _UNTAGGED_SHARE = 0.25, 0.5
_UNTAGGED_LEAST = 2  # code lines an untagged block needs: one line alone says little
_MAX_BLOCK = 400  # lines one block is judged on (the work stays bounded; longer blocks are cut)

# A fence line: ``` or ~~~ at a line's start (after blanks or a quote's `>`), a language tag, or a
# glued first line (Slack: "```INFO 05-02 …"); a fence ending a line closes its block there.
_FENCE_OPEN = first_use_re(r"^[ \t>]*(?P<mark>`{3,}|~{3,})[ \t]*(?P<rest>.*)$")
_TAG = first_use_re(r"[\w+\-.#]*")
_FENCE_CLOSE_END = first_use_re(r"\S.*?(?:`{3,}|~{3,})[ \t]*$")

# What a line of source code, a diff, a config or a shell script looks like (after an optional diff
# marker): a statement keyword, a definition, an import, an assignment, a call, a closing bracket, a
# string literal going on, a YAML/JSON key (one word, lower-case first: a log's "Available KV cache
# memory:" has spaces, a status such as `RESOURCE_EXHAUSTED:` is upper-case), a YAML list item, a
# shell prompt or continuation.
_CODE = first_use_re(
    r"""^[+\-]?[ \t]*(?:
      (?:async[ ]+)?def[ ]+\w+[ ]*\( | class[ ]+\w+[ ]*[(:]
    | (?:import[ ]+[\w.]+ | from[ ]+[\w.]+[ ]+import\b)
    | (?:return|raise|yield|assert|pass|break|continue|del|global|nonlocal|await)\b
    | (?:if|elif|while|for|with|try|except|finally|else|async[ ]+with|async[ ]+for)\b[^\n]*:[ ]*(?:\#.*)?$
    | @[A-Za-z_][\w.]*
    | [A-Za-z_][\w.\[\]'"]*[ ]*(?:[+\-*/|&]?=)(?!=)[ ]*\S
    | [A-Za-z_][\w.]*\([^\n]*$
    | [)\]}]+[,;:)]*[ ]*$
    | f?(?:"[^"\n]*"|'[^'\n]*')[ ]*[,)+\\]?[ ]*$
    | "[\w.\-]+"[ ]*:
    | [a-z_][\w.\-]*:(?:[ ]|$)
    | -[ ]+\S
    | [{\[][ ]*$
    | \$[ ]+\S | \S[^\n]*[ ]\\$ | \#!
    | (?:then|fi|do|done|esac|echo|export|exit|local|source|set[ ]+-)\b | [^\n]*;[ ]*(?:then|do)[ ]*$
    )""",
    re.VERBOSE,
)
_COMMENT = first_use_re(r"^[+\-]?[ \t]*(?:\#(?!!)|//)")
_NAMED_EXCEPTION = first_use_re(rf"\b{EXCEPTION_CLASS}:[ ]")
_DIFF_HEADER = first_use_re(
    r"^(?:diff --git |index [0-9a-f]+\.\.|--- (?:a/|/dev/null)|\+\+\+ (?:b/|/dev/null))"
)
# A unified diff's hunk header (`@@ -231,4 +231,6 @@ def f(...)`): the lines after it that open with
# a space, `+` or `-` are source code under review.
_HUNK = first_use_re(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_HUNK_LINE = ("+", "-", " ", "\t", "\\")
# An error a server answered with: a JSON body's `"error"`/`"detail"` key (OpenAI's and vLLM's error
# bodies, RFC 9457 problem details), `"object": "error"`
_ERROR_BODY = first_use_re(r'"(?:error|detail|exception|traceback)"[ ]*:|"object"[ ]*:[ ]*"error"')
_FRAME_STARTS = ("Traceback (most recent", 'File "')

# argparse's help: `usage: prog …`, an option line (`  -h, --help  show…`, `  --max-model-len
# MAX_MODEL_LEN`), a group heading (`options:`, `CacheConfig:`), and help lines indented under them.
_OPTION = first_use_re(r"^[ ]{1,6}(?:-\w(?: \S+)?, )?--[a-z][\w-]*(?:[ =]\S+)*(?:[ ]{2,}\S.*)?$")
_HEADING = first_use_re(r"^[A-Za-z][\w ,/()\-]*:$")
# where help text may start, each found from its literal newline (a `^` is tried at every position)
_HELP_START = first_use_re(r"\n(?:usage: \S|[ ]{1,6}(?:-\w, )?--[a-z])")


def _may_hold() -> Any:
    options = re2.Options()
    options.log_errors = False
    return re2.compile(r"\n(?:@@ -\d|[ \t]*\n[ ]{4}|usage: \S|[ ]{1,6}(?:-\w, )?--[a-z])", options)


# where a hunk, an indented block or help text may start (after a newline)
_MAY_HOLD = _may_hold()
# (the text's start and a blank line are two patterns: an alternation with `\A` first keeps Python's
# `re` from jumping between newlines, and it visited every character of a 2 MB paste)
_INDENTED_START = first_use_re(r"[ ]{4}[ ]*\S")
_INDENTED_BLOCK = first_use_re(r"\n[ \t]*\n(?=[ ]{4}[ ]*\S)")


def code_lines(doc: Document) -> frozenset[int]:
    """1-based numbers of the lines the paste shows as code, a diff, a config or help text."""
    key = ("code lines", 0, "")
    known = doc.memo.get(key)
    if not isinstance(known, frozenset):
        known = doc.memo[key] = frozenset(_found(doc))
    return known


def _found(doc: Document) -> Iterator[int]:
    for first, last, tag in _fenced_blocks(doc):
        yield from _if_code(doc, first, last, tag)
    if _MAY_HOLD.search(doc.data) is None and _MAY_HOLD.match(f"\n{doc.text[:200]}".encode()) is None:
        return  # no hunk, no indented block, no help text: most logs (one RE2 pass over the bytes)
    yield from _hunk_lines(doc)
    for first, last in _indented_blocks(doc):
        yield from _if_code(doc, first, last, None)
    yield from _help_lines(doc)


def _hunk_lines(doc: Document) -> Iterator[int]:
    # a hunk header is on a line of its own: over each distinct line once when lines repeat (one
    # OOM line pasted 14,000 times is one line to look at, not a 2 MB text)
    shown = b"@@ -" in doc.distinct.data if doc.repeating else "@@ -" in doc.text
    if not shown:
        return
    total = len(doc)
    for index, text in enumerate(doc.lines):
        if not _HUNK.match(text):
            continue
        number = index + 2
        while number <= total and doc.lines[number - 1].startswith(_HUNK_LINE):
            yield number
            number += 1


def _fenced_blocks(doc: Document) -> Iterator[tuple[int, int, str | None]]:
    """(first, last, tag) of each fenced block's content lines, from the fences the raw paste had."""
    opened: tuple[int, str, str | None] | None = None  # (first content line, mark, tag)
    for number, text in doc.fences:
        found = _FENCE_OPEN.match(text)
        if found is None:  # a fence ending a line of content closes a block there
            if opened is not None and text.rstrip().endswith(opened[1][:3]):
                yield opened[0], number, opened[2]
                opened = None
            continue
        mark, rest = found.group("mark"), found.group("rest").strip()
        if opened is not None and mark[0] == opened[1][0]:
            if rest and not _TAG.fullmatch(rest):
                yield opened[0], number, opened[2]  # "```" then glued text: the block ends here
            else:
                yield opened[0], number - 1, opened[2]
            opened = None
            continue
        if opened is not None:
            continue
        if _TAG.fullmatch(rest):
            opened = (number + 1, mark, rest.lower() or None)
        elif _FENCE_CLOSE_END.match(rest):
            yield number, number, None  # a whole block on one line
        else:
            opened = (number, mark, None)  # glued: its first line is on the fence's line
    if opened is not None:  # an unclosed fence runs to the paste's end
        yield opened[0], len(doc), opened[2]


def _indented_blocks(doc: Document) -> Iterator[tuple[int, int]]:
    """(first, last) of each run of lines indented four spaces or more after a blank line."""
    text = doc.text
    if "\n    " not in text and not text.startswith("    "):
        return
    total, counted, newlines = len(doc), 0, 0
    starts = itertools.chain(
        (0,) if _INDENTED_START.match(text) else (), (m.end() for m in _INDENTED_BLOCK.finditer(text))
    )
    for start in starts:
        # line numbers counted on from the previous block, not from the start of the text each time
        newlines += text.count("\n", counted, start)
        counted = start
        first = newlines + 1
        last = first
        while last < total and _indented_or_blank(doc.lines[last]):
            last += 1
        while last > first and not doc.lines[last - 1].strip():
            last -= 1
        yield first, last


def _indented_or_blank(text: str) -> bool:
    return not text.strip() or text.startswith("    ")


def _if_code(doc: Document, first: int, last: int, tag: str | None) -> Iterator[int]:
    """The block's lines when it is code: no line has a log record's form, and enough read as code."""
    last = min(last, first + _MAX_BLOCK - 1)
    lines = [doc.lines[n - 1] for n in range(first, last + 1)]
    written = [line for line in lines if line.strip()]
    if not written or any(_is_record(doc, line) for line in written):
        return
    coded = sum(1 for line in written if _CODE.match(line) or _DIFF_HEADER.match(line))
    tagged = tag in _CODE_TAGS
    share = _TAGGED_SHARE if tagged else _UNTAGGED_SHARE
    if coded >= (1 if tagged else _UNTAGGED_LEAST) and coded >= share * len(written):
        # a whole-line comment quoting an exception is a run's record ("# fails with: ValueError: …")
        yield from (n for n, line in enumerate(lines, start=first) if not _reports_error(line))


def _reports_error(line: str) -> bool:
    """Whether a whole-line comment quotes an exception as its message (the author noting what a
    run printed, as people annotate a reproduction script)."""
    return _COMMENT.match(line) is not None and _NAMED_EXCEPTION.search(line) is not None


def _exception_record(text: str) -> bool:
    """An exception line with its message, or its class alone (`KeyboardInterrupt`)."""
    found = exception_line(text)
    return found is not None and (found.message is not None or found.bare)


# A line's form depends on its text alone: each distinct line is judged once per process (a block
# pasted again, in this paste or a later one), up to MEMO_LINES lines.
_RECORD_VERDICTS: dict[str, bool] = {}


def _is_record(doc: Document, line: str) -> bool:
    """Whether a line has a log record's form: a logger or process prefix, a traceback, a frame, an
    exception line (`torch.OutOfMemoryError: CUDA out of memory…`, not `except …:` or `raise …`)."""
    global _RECORD_VERDICTS
    known = _RECORD_VERDICTS.get(line)
    if known is None:
        if len(_RECORD_VERDICTS) >= MEMO_LINES:
            _RECORD_VERDICTS = {}  # replaced, never cleared (see MEMO_LINES)
        known = _RECORD_VERDICTS[line] = _has_record_form(doc, line)
    return known


def _has_record_form(doc: Document, line: str) -> bool:
    source, level, text = doc.split(line)
    if source or level:
        return True
    return (
        text.lstrip().startswith(_FRAME_STARTS)
        or _exception_record(text)
        or _ERROR_BODY.search(text) is not None
    )


# A line that may open help text (`usage: `, or an option line's indented dash); one C-level search
# finds each, where a Python step per line tried `_OPTION` on every line of a long paste
_HELP_CANDIDATE = first_use_re(r"\n(?=usage: |[ ]{1,6}-)")


def _help_candidates(text: str) -> Iterator[int]:
    """The first line's number, then each line's that starts as `usage: ` or an option line may."""
    yield 1
    newlines = counted = 0
    for found in _HELP_CANDIDATE.finditer(text):
        newlines += text.count("\n", counted, found.start())
        counted = found.start()
        yield newlines + 2


def _help_lines(doc: Document) -> Iterator[int]:
    """The lines of argparse help text: from a `usage:` line or an option line, the option lines,
    group headings, blank lines and lines indented under them, up to the first line that is none."""
    text = doc.text
    if _HELP_START.search(text) is None and not _HELP_START.match(f"\n{text[:80]}"):
        return
    total, number = len(doc), 0
    for candidate in _help_candidates(text):
        if candidate < number:
            continue  # inside help text already read
        number = candidate
        line = doc.lines[number - 1]
        if not (line.startswith("usage: ") or _OPTION.match(line)):
            continue
        start, options = number, 0
        while number <= total:
            line = doc.lines[number - 1]
            if _OPTION.match(line):
                options += 1
            elif not (line.startswith(("usage: ", "  ")) or not line.strip() or _HEADING.match(line)):
                break
            number += 1
        if options >= 2 or (options and doc.lines[start - 1].startswith("usage: ")):
            yield from range(start, number)
