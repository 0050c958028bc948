"""Secrets in pasted logs are scrubbed before anything is echoed (DESIGN §6)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service import redact as redact_module
from service.core import classify
from service.diagnosis import evidence
from service.packs import RulePacks
from service.redact import REDACTED, redact, redact_value
from service.schemas import DiagnoseRequest


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
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNz"),
        ("authorization: Token 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a"),
        (
            '{"Authorization": "Digest username=\\"bob\\", response=\\"6629fae49393a05397450978507c4ef1\\""}',
            "6629fae4",
        ),
        ("curl -H 'X-Api-Key: 0123456789abcdef0123' https://x", "0123456789abcdef"),
        ("token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "eyJhbGciOiJI"),
        ("vllm serve m --hf-token=abcdefghijklmnop1234 --port 8000", "abcdefghijklmnop"),
        ("vllm serve m --api-key mysecretkey12345", "mysecretkey"),
        (
            '{"type": "service_account", "private_key_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"}',
            "0a1b2c3d",
        ),
        ('"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n', "MIIEvQIBADAN"),
        ("AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4cXV1eA==;EndpointSuffix=core", "Zm9vYmFyYmF6"),
        ("https://acct.blob.core.windows.net/c?sv=2021&sig=AbCdEf0123456789%2B", "AbCdEf012345"),
        ("SLACK_APP_TOKEN=xapp-1-A0123456789-0123456789012-abcdef", "A0123456789"),
        ("https://hooks.slack.com/services/T01234567/B01234567/AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKl"),
        ("GITHUB_TOKEN ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "ghp_AbCdEfGh"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "11ABCDEFG0123"),
        ("redis://:s3cretpass@redis:6379/0", "s3cretpass"),
        ("postgresql://app:pa55word@db/x", "pa55word"),
        ("curl -u bob:hunter2hunter2 https://x", "hunter2hunter2"),
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
    """The reference: every pattern over the whole text (joined view, then raw), no candidate scan."""
    for join in (True, False):
        view = redact_module._joined(text) if join else text
        breaks = redact_module._breaks(text) if join else []
        spans = list(redact_module._secret_spans(view))
        if breaks:
            spans = [redact_module._to_raw(span, breaks, text) for span in spans]
        text = redact_module._replace(text, spans)
    return text


def _joined_char_by_char(text: str) -> tuple[str, list[int]]:
    """The reference for the joined view: every break between two token characters, one by one."""
    tokens = redact_module._TOKEN_CHARS
    breaks = [
        at
        for at, char in enumerate(text)
        if char == "\n" and 0 < at < len(text) - 1 and text[at - 1] in tokens and text[at + 1] in tokens
    ]
    return "".join(char for at, char in enumerate(text) if at not in breaks), breaks


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["\n", "\n\n", "a", "=", " ", "é", "hf_", "INFO "]), max_size=30).map("".join)
)
def test_the_joined_view_removes_exactly_the_breaks_between_token_characters(text: str) -> None:
    assert (redact_module._joined(text), redact_module._breaks(text)) == _joined_char_by_char(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=12), max_size=25).map("".join))
def test_the_candidate_scan_never_changes_what_is_redacted(text: str) -> None:
    assert redact(text) == _redact_everywhere(text)


def test_a_secret_behind_a_unicode_space_is_still_found() -> None:
    assert "hunter22" not in redact("db password\u2003:\u00a0hunter22 ok")


def test_line_count_and_numbers_survive_redaction() -> None:
    text = "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nb HF_TOKEN=hf_x"
    assert redact(text).count("\n") == text.count("\n")
    assert redact(text).split("\n")[-1] == "b HF_TOKEN=[REDACTED]"


def test_a_secret_wrapped_across_lines_is_one_secret() -> None:
    token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    for cut in range(1, len(token)):
        text = f"export HF_TOKEN=x; vllm serve m --hf-token {token[:cut]}\n{token[cut:]} --port 8000"
        scrubbed = redact(text)
        assert token[:cut] not in scrubbed or cut < 4, cut
        assert token[cut:] not in scrubbed or len(token) - cut < 4, cut
        assert scrubbed.endswith(" --port 8000")


def test_a_secret_that_ends_a_line_does_not_swallow_the_next_record() -> None:
    scrubbed = redact("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\nINFO 12-01 10:00:00 [core.py:1] ready")
    assert scrubbed == "HF_TOKEN=[REDACTED]\nINFO 12-01 10:00:00 [core.py:1] ready"


# Secrets shaped like the real ones, each in the context people paste it in.
_PLANTED = {
    "hf": "hf_Qw3rTyUiOpAsDfGhJkLzXcVbNm0123456789",
    "openai": "sk-proj-Zx9Cv8Bn7Mm6Ll5Kk4Jj3Hh2Gg1Ff0Dd",
    "slack": "xoxb-1234567890123-0987654321098-AbCdEfGhIjKlMnOpQrStUvWx",
    "github": "ghp_Z1y2X3w4V5u6T7s8R9q0P1o2N3m4L5k6J7i8",
    "aws": "AKIAZ7Y6X5W4V3U2T1S0",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlc2lnbmF0dXJl",
    "apikey": "q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3",
    "password": "Tr0ub4dor-and-3-horses",
}


def _pasted_log(secrets: dict[str, str]) -> str:
    return "\n".join(
        [
            "(APIServer pid=12) INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.9.2",
            f"(APIServer pid=12) INFO 12-01 10:00:00 [cli_args.py:2] non-default args: {{'model': 'm', "
            f"'hf_token': '{secrets['hf']}', 'api_key': ['{secrets['apikey']}']}}",
            f"$ OPENAI_API_KEY={secrets['openai']} SLACK_BOT_TOKEN={secrets['slack']} vllm serve m "
            f"--hf-token {secrets['hf']} --api-key {secrets['apikey']}",
            f"export GITHUB_TOKEN={secrets['github']} AWS_ACCESS_KEY_ID={secrets['aws']}",
            f"curl -H 'Authorization: Bearer {secrets['jwt']}' http://admin:{secrets['password']}@gpu-7:8000/v1",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 1.50 GiB is free.",
        ]
    )


# Widths spread over the hypothesis range below, for the end-to-end checks (the bot's Slack calls,
# Sentry events) where a round trip per example is too slow for hypothesis' many examples.
WRAP_WIDTHS = (12, 17, 29, 41, 64, 80, 111, 140)


def hard_wrap(text: str, width: int) -> str:
    """What a terminal does to long lines: cut every `width` characters, mid-word."""
    return "\n".join(
        line[i : i + width] for line in text.split("\n") for i in range(0, max(len(line), 1), width)
    )


def leaked(secret: str, text: str, run: int = 8) -> list[str]:
    """Every run of `run` consecutive secret characters that survives in `text`."""
    return [secret[i : i + run] for i in range(len(secret) - run + 1) if secret[i : i + run] in text]


@settings(max_examples=300, deadline=None)
@given(width=st.integers(min_value=12, max_value=140))
def test_no_eight_characters_of_a_wrapped_secret_survive(width: int) -> None:
    text = hard_wrap(_pasted_log(_PLANTED), width)
    scrubbed = redact(text)
    assert scrubbed.count("\n") == text.count("\n")
    for name, secret in _PLANTED.items():
        assert not leaked(secret, scrubbed), (name, width, scrubbed)


def test_redact_value_keeps_the_values_of_named_keys() -> None:
    secret = "hf_" + "a" * 34
    blocks = [{"type": "button", "action_id": "show_all_fixes", "text": {"text": f"token {secret}"}}]
    [button] = redact_value(blocks, keep=frozenset({"type", "action_id"}))
    assert (button["type"], button["action_id"]) == ("button", "show_all_fixes")
    assert secret not in button["text"]["text"]


def test_the_shown_lines_memo_keeps_no_secret_a_line_held(packs: RulePacks) -> None:
    token = "hf_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
    command = f"HF_TOKEN={REDACTED} vllm serve m"
    log = f"HF_TOKEN={token} vllm serve m\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2GiB"
    shown = classify(DiagnoseRequest(log=log), packs)
    assert command in [e.text for e in shown.evidence]  # the secret's line is shown
    assert token[:8] not in msgspec.json.encode(shown).decode()
    remembered = list(evidence._redacted.items())
    assert command in [value for _, value in remembered]
    assert all(token[:8] not in repr(key) + value for key, value in remembered)  # kept by digest, scrubbed
