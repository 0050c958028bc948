"""Scrubbing secrets out of pasted text before anything is echoed, stored or reported (DESIGN §6).

People paste whole terminals: Hugging Face tokens in `HF_TOKEN=…`, Slack tokens, cloud keys, bearer
headers and passwords inside URLs. Each pattern replaces only the secret, so the line stays readable.
"""

from __future__ import annotations

import re

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
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"), REDACTED),
)


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED]."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
