"""Secrets in pasted logs are scrubbed before anything is echoed (DESIGN §6)."""

from __future__ import annotations

import pytest

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
