"""Scrubbing secrets out of pasted text before anything is echoed, stored or reported (DESIGN §6).

People paste whole terminals: Hugging Face tokens in `HF_TOKEN=…`, Slack tokens and webhooks, cloud
keys, `Authorization:` headers, `--api-key` values and passwords inside URLs. Each pattern replaces
only the secret, so the line stays readable, and never adds or removes a newline, so line numbers
survive.

Terminals hard-wrap long lines mid-token, so a secret can start on one line and continue on the next.
Matching therefore runs twice: once on a view where a line break between two token characters is
joined (unless the next line starts a new log record), so a wrapped secret is one secret and both
pieces go; then on the raw text, for what joining would hide (a key that ends at a line break).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import re2

__all__ = ["REDACTED", "redact", "redact_value"]

REDACTED = "[REDACTED]"

# Each pattern is written once, with `{S}` where whitespace may stand: Python's `\s` is Unicode-aware,
# RE2's is ASCII, so the candidate scan widens it. A group named `secret` is what is replaced; without
# one the whole match is. No lookarounds, so every pattern also compiles in RE2.
_TEMPLATES: tuple[str, ...] = (
    # scheme://user:password@host (any scheme; the user may be empty, as in redis://:pw@host)
    r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:(?P<secret>[^\s@/]+)@",
    r"\bhf_[A-Za-z0-9]{20,}",
    r"\bxox[abposre]-[A-Za-z0-9\-]{8,}",
    r"\bxapp-\d-[A-Za-z0-9\-]{8,}",
    r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_\-]{8,})",
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}",
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    # JSON Web Tokens: a base64url JSON header always starts `eyJ`
    r"\beyJ[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*){0,2}",
    r"(?i:\bbearer{S}+)(?P<secret>[A-Za-z0-9._~+/\-]{8,}=*)",
    # Authorization headers of any scheme: the scheme word and its credentials, which are one token
    # (Basic, Bearer, Token) or comma-separated key=value parameters (Digest, AWS4-HMAC-SHA256)
    r"(?i:\b(?:proxy-)?authorization\b['\"]?{S}*[:=]{S}*['\"]?)(?P<secret>(?:[A-Za-z][\w\-]*[ \t]+)?"
    r"(?:(?:[\w\-]+=(?:\\?\"[^\"\\\n]*\\?\"|[^\s,'\"]+)[ \t]*,?[ \t]*)+|[^\s'\"]{4,}))",
    # command-line flags: --hf-token, --api-key, --password, --client-secret ...
    r"(?i:--[a-z0-9_\-]*(?:token|api[_\-]key|secret|password|passwd)(?:{S}*={S}*|{S}+)['\"]?)"
    r"(?P<secret>[^\s'\"]+)",
    # curl -u user:password
    r"(?:\s-u|--user){S}+['\"]?[^\s:'\"]+:(?P<secret>[^\s'\"]+)",
    # secrets in query strings (SAS signatures, access tokens)
    r"[?&](?i:sig|signature|token|access_token|api_key|apikey|key|code|password)=(?P<secret>[^&\s#'\"]{4,})",
    # key = value, key: value, "key": "value" (AWS, GCP service-account JSON, Azure connection strings)
    r"(?i:\b[a-z0-9_\-.]*(?:aws_secret_access_key|aws_session_token|api[_\-]?key|token|password|passwd|"
    r"secret|private_key_id|private_key|account_?key|shared_?access_?key|subscription[_\-]?key)\b"
    r"['\"]?{S}*[:=]{S}*\[?{S}*['\"]?{S}*)(?P<secret>[^\s'\",};]{4,})",
    # PEM private keys, whole or cut off (also with JSON's escaped newlines)
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(?:\\n|\n|[A-Za-z0-9+/=])*)",
)


@functools.cache
def _pattern(index: int) -> re.Pattern[str]:
    """The Python form of `_TEMPLATES[index]`, compiled the first time a segment may hold it: the
    RE2 passes below find no candidate in almost every log, and compiling all of them cost every
    process about 7 ms."""
    return re.compile(_TEMPLATES[index].replace("{S}", r"\s"))


# RE2's candidate scan: one linear-time pass that finds every place a pattern above could match (a
# superset: its `\b` and negated `\s` are ASCII, so they match more). Almost no log holds a secret,
# so most texts cost this scan alone; only the lines around a candidate meet the patterns themselves.
_SPACE = r"[\s\x0b\x1c-\x1f\x{85}\pZ]"
_UNNAMED = re.compile(r"\(\?P<\w+>")
_CANDIDATE = re2.compile("|".join(_UNNAMED.sub("(?:", t.replace("{S}", _SPACE)) for t in _TEMPLATES))


def _candidates(text: str) -> Iterable[tuple[int, int]]:
    """Spans of every candidate; on ASCII text RE2 scans the bytes and byte offsets are the spans."""
    if text.isascii():
        for match in _CANDIDATE.finditer(text.encode("ascii")):
            yield match.span()
    else:
        for match in _CANDIDATE.finditer(text):
            yield match.span()


# A line break between two token characters may be a terminal's hard wrap, unless the next line
# starts a record of its own (a logger level, a timestamp, a traceback, a compose prefix).
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.~%:@")
_RECORD_START = re.compile(
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b|\d{2,4}-\d{2}[- T]\d{2}|Traceback\b|File\b"
    r"|[A-Za-z0-9][\w.\-]*[ ]+\|[ ]|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b"
)


# Which patterns may match a segment (RE2 set, same candidate forms): only those run in Python `re`.
_FORMS = tuple(_UNNAMED.sub("(?:", t.replace("{S}", _SPACE)) for t in _TEMPLATES)


def _pattern_set() -> Any:
    options = re2.Options()
    options.log_errors = False
    found = re2.Set.SearchSet(options)
    for form in _FORMS:
        found.Add(form)
    found.Compile()
    return found


_MAY_MATCH = _pattern_set()


def _secret_spans(segment: str) -> Iterable[tuple[int, int]]:
    for index in sorted(_MAY_MATCH.Match(segment) or ()):
        pattern = _pattern(index)
        for match in pattern.finditer(segment):
            start, end = match.span("secret") if "secret" in pattern.groupindex else match.span()
            already = segment.startswith(REDACTED, start) or segment.startswith(REDACTED, max(start - 1, 0))
            if end > start and not already:
                yield start, end


# How much text around a candidate the patterns see: more than any secret's key and separators, so a
# joined view of thousands of lines still costs only a window per candidate.
_CONTEXT = 1024


def _candidate_segments(text: str) -> list[tuple[int, int]]:
    """Windows of the lines that hold a candidate, merged where they touch."""
    spans: list[tuple[int, int]] = []
    for found_start, found_end in _candidates(text):
        start = max(text.rfind("\n", 0, found_start) + 1, found_start - _CONTEXT)
        end = text.find("\n", found_end)
        end = min(len(text) if end == -1 else end, found_end + _CONTEXT)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


_TOKEN_CLASS = f"[{re.escape(''.join(sorted(_TOKEN_CHARS)))}]"
# a line break between two token characters (not at the very start of the text); the pattern starts
# with the break itself, so `re` jumps from break to break instead of trying every position
_JOINABLE_BREAK = re.compile(f"\n(?<={_TOKEN_CLASS}\n)(?={_TOKEN_CLASS})")


def _joined(text: str) -> str:
    """The text with every break between two token characters removed (one pass in C)."""
    return _JOINABLE_BREAK.sub("", text)


def _breaks(text: str) -> list[int]:
    """Where `_joined` removed a break, in raw positions (only needed once a secret is found)."""
    return [match.start() for match in _JOINABLE_BREAK.finditer(text)]


def _to_raw(
    span: tuple[int, int], breaks: list[int], text: str, joined_at: list[int] | None = None
) -> tuple[int, int]:
    """A span of the joined view in raw positions, ending at the first break before a new record.

    The k-th removed break sat before joined index joined_at[k] = breaks[k] - k (computed once per
    text by the caller); a joined index moves right by the number of breaks removed before it.
    """
    if joined_at is None:
        joined_at = [position - k for k, position in enumerate(breaks)]
    start = span[0] + bisect.bisect_right(joined_at, span[0])
    end = span[1] - 1 + bisect.bisect_right(joined_at, span[1] - 1) + 1
    for k in range(bisect.bisect_left(breaks, start), bisect.bisect_left(breaks, end)):
        if _RECORD_START.match(text, breaks[k] + 1):
            return start, breaks[k]
    return start, end


def _spans_in(text: str, view: str) -> list[tuple[int, int]]:
    """Secret spans in raw positions of `text`, found on `view` (the text itself or its joined view)."""
    found: list[tuple[int, int]] = []
    for seg_start, seg_end in _candidate_segments(view):
        found.extend((seg_start + s, seg_start + e) for s, e in _secret_spans(view[seg_start:seg_end]))
    if not found or len(view) == len(text):  # joining only removes breaks: same length, same text
        return found
    breaks = _breaks(text)
    joined_at = [position - k for k, position in enumerate(breaks)]
    return [_to_raw(span, breaks, text, joined_at) for span in found]


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    pieces: list[str] = []
    done = 0
    for start, end in _merge(spans):
        pieces.append(text[done:start])
        pieces.append(REDACTED + "\n" * text.count("\n", start, end))
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED], line count unchanged."""
    if not text:
        return text
    view = _joined(text)
    spans = _spans_in(text, view)
    if not spans and len(view) == len(text):
        return text  # no break joined and nothing found: the raw pass would read the same text again
    text = _replace(text, spans)
    return _replace(text, _spans_in(text, text))


def redact_value(value: Any, *, keep: frozenset[str] = frozenset()) -> Any:
    """Redact every string inside a nested value (dicts, lists, tuples); keys of dicts included.
    Values under a key in `keep` (identifiers a program reads back, such as Slack's action_id)
    stay as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {
            redact_value(key): item if key in keep else redact_value(item, keep=keep)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(item, keep=keep) for item in value]
    return value
