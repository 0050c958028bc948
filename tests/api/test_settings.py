"""Settings come from VRAMDOC_* variables; a bad value is one sentence naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.api.settings import DEFAULT_MAX_BODY_BYTES, RateLimit, Settings, SettingsError


def test_defaults_suit_make_run_in_memory() -> None:
    settings = Settings.from_env({})
    assert settings.redis_url is None
    assert settings.max_body_bytes == DEFAULT_MAX_BODY_BYTES == 2 * 1024 * 1024
    assert settings.rate_limit == RateLimit(600, 60)
    assert settings.api_tokens == ()


def test_every_variable_is_read() -> None:
    settings = Settings.from_env(
        {
            "VRAMDOC_REDIS_URL": "redis://127.0.0.1:6379/0",
            "VRAMDOC_SENTRY_DSN": "http://key@127.0.0.1:9/1",
            "VRAMDOC_RULES_DIR": "some/rules",
            "VRAMDOC_API_TOKENS": " alpha, beta ,,",
            "VRAMDOC_MAX_BODY_BYTES": "1_048_576",
            "VRAMDOC_RATE_LIMIT": "10/second",
            "VRAMDOC_CACHE_TTL_S": "0",
        }
    )
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.sentry_dsn == "http://key@127.0.0.1:9/1"
    assert settings.rules_dir == Path("some/rules")
    assert settings.api_tokens == ("alpha", "beta")
    assert settings.max_body_bytes == 1_048_576
    assert settings.rate_limit == RateLimit(10, 1)
    assert settings.cache_ttl_s == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("600/minute", RateLimit(600, 60)),
        ("600/minutes", RateLimit(600, 60)),
        ("5 / h", RateLimit(5, 3600)),
        ("100/day", RateLimit(100, 86400)),
        ("off", None),
        ("0", None),
    ],
)
def test_rate_limit_parses_count_per_unit(text: str, expected: RateLimit | None) -> None:
    assert RateLimit.parse(text) == expected


@pytest.mark.parametrize("text", ["600", "600/fortnight", "-1/minute", "0/minute", "lots"])
def test_bad_rate_limit_names_the_variable(text: str) -> None:
    with pytest.raises(SettingsError, match="VRAMDOC_RATE_LIMIT"):
        RateLimit.parse(text)


@pytest.mark.parametrize("value", ["big", "0", "-5", "1.5"])
def test_bad_body_limit_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match="VRAMDOC_MAX_BODY_BYTES"):
        Settings.from_env({"VRAMDOC_MAX_BODY_BYTES": value})


@pytest.mark.parametrize("value", [",", " , ", ",,,"])
def test_api_tokens_set_but_empty_refuse_to_start_rather_than_serve_without_auth(value: str) -> None:
    with pytest.raises(SettingsError, match="VRAMDOC_API_TOKENS is set but names no token"):
        Settings.from_env({"VRAMDOC_API_TOKENS": value})


@pytest.mark.parametrize("value", ["notaurl", "http://localhost:6379", "localhost:6379"])
def test_redis_url_without_a_redis_scheme_is_one_sentence_not_a_startup_traceback(value: str) -> None:
    with pytest.raises(SettingsError, match="VRAMDOC_REDIS_URL must start with redis://"):
        Settings.from_env({"VRAMDOC_REDIS_URL": value})


@pytest.mark.parametrize("value", ["redis://localhost:6379/0", "rediss://h:6380", "unix:///run/redis.sock"])
def test_redis_urls_with_a_redis_scheme_are_accepted(value: str) -> None:
    assert Settings.from_env({"VRAMDOC_REDIS_URL": value}).redis_url == value
