"""Agent settings from the environment: defaults, the token sources, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.agent.settings import DEFAULT_VLLM_URL, host_name, load_settings, load_token
from service.errors import SettingsError

LONG = "0123456789abcdef0123456789abcdef"  # MIN_TOKEN_CHARS long


def test_defaults_scrape_the_local_vllm_and_do_not_register() -> None:
    settings = load_settings({})
    assert settings.vllm_urls == (DEFAULT_VLLM_URL,)
    assert (settings.redis_url, settings.dcgm_url, settings.heartbeat_s) == (None, None, 15.0)
    assert settings.proc_root == Path("/proc")


def test_settings_read_every_variable() -> None:
    settings = load_settings(
        {
            "VRAMDOC_AGENT_VLLM_URLS": " http://127.0.0.1:8000 , http://127.0.0.1:8001/metrics,",
            "VRAMDOC_AGENT_DCGM_URL": "http://127.0.0.1:9400",
            "VRAMDOC_REDIS_URL": "redis://redis:6379/0",
            "VRAMDOC_AGENT_URL": "https://gpu-7.internal:9400",
            "VRAMDOC_AGENT_HEARTBEAT_S": "5",
            "VRAMDOC_AGENT_SCRAPE_TIMEOUT_S": "0.5",
            "VRAMDOC_AGENT_PROC_ROOT": "/host/proc",
        }
    )
    assert settings.vllm_urls == ("http://127.0.0.1:8000", "http://127.0.0.1:8001/metrics")
    assert settings.dcgm_url == "http://127.0.0.1:9400"
    assert (settings.redis_url, settings.url) == ("redis://redis:6379/0", "https://gpu-7.internal:9400")
    assert (settings.heartbeat_s, settings.scrape_timeout_s, settings.proc_root) == (
        5.0,
        0.5,
        Path("/host/proc"),
    )


def test_empty_vllm_urls_means_scrape_nothing() -> None:
    assert load_settings({"VRAMDOC_AGENT_VLLM_URLS": ""}).vllm_urls == ()


def test_token_comes_from_the_variable_or_the_file(tmp_path: Path) -> None:
    assert load_token({"VRAMDOC_AGENT_TOKEN": f" {LONG} "}) == LONG
    path = tmp_path / "token"
    path.write_text(f"from-file-{LONG}\n")
    path.chmod(0o600)
    assert load_token({"VRAMDOC_AGENT_TOKEN_FILE": str(path)}) == f"from-file-{LONG}"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "needs a bearer token"),
        ({"VRAMDOC_AGENT_TOKEN": "a", "VRAMDOC_AGENT_TOKEN_FILE": "/x"}, "Set only one of"),
        ({"VRAMDOC_AGENT_TOKEN_FILE": "{missing}"}, "cannot be read (FileNotFoundError)"),
        ({"VRAMDOC_AGENT_TOKEN_FILE": "{empty}"}, "is empty"),
        ({"VRAMDOC_AGENT_TOKEN": "two words"}, "must not contain whitespace"),
        ({"VRAMDOC_AGENT_TOKEN": "abc"}, "has 3 characters; use at least 32"),
    ],
    ids=["none", "both", "missing-file", "empty-file", "whitespace", "short"],
)
def test_unusable_token_settings_refuse_with_a_sentence(
    env: dict[str, str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o640)
    paths = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty")}
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_token({k: v.format(**paths) for k, v in env.items()})


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o660, 0o620])
def test_a_token_file_others_can_read_or_its_group_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text(f"{LONG}\n")
    path.chmod(mode)
    with pytest.raises(SettingsError, match=f"\\(mode {mode:04o}\\): run `chmod 600 {path}`"):
        load_token({"VRAMDOC_AGENT_TOKEN_FILE": str(path)})


@pytest.mark.parametrize("mode", [0o400, 0o600, 0o440, 0o640])
def test_a_token_file_kept_to_its_owner_or_group_is_accepted(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text(f"{LONG}\n")
    path.chmod(mode)
    assert load_token({"VRAMDOC_AGENT_TOKEN_FILE": str(path)}) == LONG


def test_host_name_is_lowercased_and_checked() -> None:
    assert host_name("GPU-Node-07") == "gpu-node-07"
    with pytest.raises(SettingsError, match="pass --name"):
        host_name("gpu node")


@pytest.mark.parametrize(
    "url", ["localhost:8000", "ftp://h/metrics", "http://", "http://127.0.0.1:99999", "http://h :80"]
)
def test_urls_that_cannot_be_scraped_are_refused(url: str) -> None:
    with pytest.raises(SettingsError, match="is not an http:// or https:// URL"):
        load_settings({"VRAMDOC_AGENT_VLLM_URLS": url})


@pytest.mark.parametrize("value", ["nope", "localhost:6379", "http://redis:6379"])
def test_malformed_redis_url_is_one_sentence_not_a_startup_traceback(value: str) -> None:
    with pytest.raises(SettingsError, match="VRAMDOC_REDIS_URL must start with redis://"):
        load_settings({"VRAMDOC_REDIS_URL": value})


def test_the_agent_registers_under_the_installations_redis_prefix() -> None:
    assert load_settings({}).redis_prefix == "vramdoc"
    assert load_settings({"VRAMDOC_REDIS_PREFIX": "team-b"}).redis_prefix == "team-b"
