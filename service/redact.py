"""Scrubbing secrets out of pasted text before anything is echoed, stored or reported (DESIGN §6).

People paste whole terminals: Hugging Face tokens in `HF_TOKEN=…`, Slack tokens, cloud keys, bearer
headers and passwords inside URLs. Each pattern replaces only the secret, so the line stays readable.
"""

from __future__ import annotations

import re

import re2

__all__ = ["REDACTED", "redact"]

REDACTED = "[REDACTED]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host -> keep the user, drop the password
    (re.compile(r"(?P<keep>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), rf"\g<keep>{REDACTED}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{8,}"), REDACTED),
    (re.compile(r"\bxapp-\d-[A-Za-z0-9\-]{8,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), REDACTED),
    (re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/\-]{8,}=*"), rf"\g<keep>{REDACTED}"),
    (
        re.compile(
            r"(?i)(?P<keep>\b(?:aws_secret_access_key|aws_session_token|[a-z_]*api[_-]?key|[a-z_]*token|"
            r"password|passwd|secret|signing_secret)\b['\"]?\s*[:=]\s*['\"]?)(?!\[REDACTED\])[^\s'\",}]{4,}"
        ),
        rf"\g<keep>{REDACTED}",
    ),
)

_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----")

# Python's \s is Unicode-aware, RE2's is ASCII: the candidate scan widens it so it never misses.
_SPACE = r"[\s\x0b\x1c-\x1f\x{85}\pZ]"

# One linear-time pass that finds every place a pattern above could match (a superset: lookarounds
# dropped). Almost no log holds a secret, so most texts cost this single scan; only the lines around a
# candidate go through the patterns themselves.
_CANDIDATE = re2.compile(
    "|".join(
        (
            r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:[^\s@/]+@",
            r"\bhf_[A-Za-z0-9]{20,}",
            r"\bxox[abposre]-[A-Za-z0-9\-]{8,}",
            r"\bxapp-\d-[A-Za-z0-9\-]{8,}",
            r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
            r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}",
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",
            r"\bglpat-[A-Za-z0-9_\-]{20,}",
            r"\bAIza[0-9A-Za-z_\-]{35}\b",
            rf"(?i:\bbearer{_SPACE}+[A-Za-z0-9._~+/\-]{{8,}})",
            r"(?i:\b(?:aws_secret_access_key|aws_session_token|[a-z_]*api[_-]?key|[a-z_]*token|"
            rf"password|passwd|secret|signing_secret)\b['\"]?{_SPACE}*[:=]{_SPACE}*['\"]?[^\s'\",}}]{{4,}})",
        )
    )
)


def _redact_segment(segment: str) -> str:
    for pattern, replacement in _PATTERNS:
        segment = pattern.sub(replacement, segment)
    return segment


def _candidate_lines(text: str) -> list[tuple[int, int]]:
    """Spans of whole lines that hold a candidate, merged where they touch."""
    spans: list[tuple[int, int]] = []
    for match in _CANDIDATE.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end == -1 else end
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED]."""
    if "PRIVATE KEY-----" in text:
        text = _PRIVATE_KEY.sub(REDACTED, text)
    spans = _candidate_lines(text)
    if not spans:
        return text
    pieces: list[str] = []
    done = 0
    for start, end in spans:
        pieces.append(text[done:start])
        pieces.append(_redact_segment(text[start:end]))
        done = end
    pieces.append(text[done:])
    return "".join(pieces)
