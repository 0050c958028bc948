"""Secrets in pasted logs are scrubbed before anything is echoed (DESIGN §6)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service import redact as redact_module
from service.redact import REDACTED, redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "hf_AbCdEf"),
        ("SLACK_BOT_TOKEN xoxb-1234567890-abcdefghijkl", "xoxb-1234567890"),
        ("aws AKIAIOSFODNN7EXAMPLE key", "AKIAIOSFODNN7EXAMPLE"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtn"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGci"),
        ("redis://default:s3cretpass@redis:6379/0", "s3cretpass"),
        ("--api-key sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdef"),
        ("password: hunter22", "hunter22"),
    ],
)
def test_secret_is_replaced(text: str, secret: str) -> None:
    scrubbed = redact(text)
    assert secret not in scrubbed
    assert REDACTED in scrubbed


def test_ordinary_log_lines_are_unchanged() -> None:
    line = (
        "Maximum concurrency for 32,768 tokens per request: 14.41x; max_num_batched_tokens=8192 tokenizer=x"
    )
    assert redact(line) == line


def test_url_user_is_kept_and_only_the_password_goes() -> None:
    assert redact("https://alice:pw1234@example.com/x") == f"https://alice:{REDACTED}@example.com/x"


_FRAGMENTS = [
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "xoxb-1234567890-abcdefghijkl",
    "AKIAIOSFODNN7EXAMPLE",
    "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "bearer\u00a0abcdefgh1234",
    "redis://default:s3cretpass@redis:6379/0",
    "password\u2003:\u00a0hunter22",
    "api_key=None",
    "token = 'abcd1234'",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "Maximum concurrency for 32,768 tokens per request: 14.41x",
    "max_num_batched_tokens=8192",
    "é",
    "K",
    " ",
    "\n",
    "\t",
    ":",
    "=",
    "'",
    "@",
    "/",
]


def _redact_everywhere(text: str) -> str:
    text = redact_module._PRIVATE_KEY.sub(REDACTED, text)
    for pattern, replacement in redact_module._PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=12), max_size=25).map("".join))
def test_the_candidate_scan_never_changes_what_is_redacted(text: str) -> None:
    assert redact(text) == _redact_everywhere(text)


def test_a_secret_behind_a_unicode_space_is_still_found() -> None:
    assert "hunter22" not in redact("db password\u2003:\u00a0hunter22 ok")
