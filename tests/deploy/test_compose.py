"""docker/compose.yaml, parsed: the images it builds, the commands and ports, the settings it passes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from service.cli import build_parser

from .conftest import PARTS, Dockerfile
from .test_dockerfiles import PART_COMMAND, PART_PORT
from .test_k8s import settings_read_by

_INTERPOLATION_RE = re.compile(r"\$\{([A-Z0-9_]+)(?::?-[^}]*)?\}")


def _interpolate_defaults(argv: list[str]) -> list[str]:
    """Replace compose's `${VAR:-default}` by its default, as with an empty .env."""
    return [re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", arg) for arg in argv]


def test_compose_runs_redis_and_every_part(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"redis", *PARTS}


@pytest.mark.parametrize("part", PARTS)
def test_each_part_is_built_from_its_dockerfile_and_tagged_with_the_project_version(
    compose: dict[str, Any], repo_root: Path, pyproject: dict[str, Any], part: str
) -> None:
    service = compose["services"][part]
    context = (repo_root / "docker" / service["build"]["context"]).resolve()
    assert context == repo_root.resolve(), (
        "the build context is the repository root, as the Dockerfiles expect"
    )
    assert service["build"]["dockerfile"] == f"docker/{part}.Dockerfile"
    assert service["image"] == f"vramdoc/{part}:{pyproject['project']['version']}"


@pytest.mark.parametrize("part", PARTS)
def test_each_command_is_the_parts_cli_subcommand_and_listens_where_the_image_expects(
    compose: dict[str, Any], dockerfiles: dict[str, Dockerfile], part: str
) -> None:
    argv = _interpolate_defaults(compose["services"][part]["command"])
    args = build_parser().parse_args(argv)
    assert args.command == PART_COMMAND[part]
    if part == "service":
        assert args.host == "0.0.0.0" and args.port == PART_PORT[part]
    if part == "agent":
        assert args.listen == f"0.0.0.0:{PART_PORT[part]}"
        assert args.url == f"http://agent:{PART_PORT[part]}", "the URL the bot uses must be the compose name"
        assert re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", args.name), "registry host names are lowercase"


def test_only_the_service_port_is_published_and_only_on_loopback(compose: dict[str, Any]) -> None:
    published = {name: svc.get("ports", []) for name, svc in compose["services"].items()}
    assert published.pop("service") == [f"127.0.0.1:{PART_PORT['service']}:{PART_PORT['service']}"]
    assert all(not ports for ports in published.values()), "Redis, the bot and the agent stay internal"


@pytest.mark.parametrize("part", PARTS)
def test_parts_read_settings_from_the_env_file_and_reach_redis_by_name(
    compose: dict[str, Any], part: str
) -> None:
    service = compose["services"][part]
    assert service["env_file"] == ".env"
    assert service["environment"]["VRAMDOC_REDIS_URL"] == "redis://redis:6379/0"
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_bot_reaches_the_service_by_its_compose_name_and_port(compose: dict[str, Any]) -> None:
    bot = compose["services"]["bot"]
    assert bot["environment"]["VRAMDOC_SERVICE_URL"] == f"http://service:{PART_PORT['service']}"
    assert bot["depends_on"]["service"]["condition"] == "service_healthy"


def test_services_waited_on_as_healthy_have_a_health_check(
    compose: dict[str, Any], dockerfiles: dict[str, Dockerfile]
) -> None:
    for service in compose["services"].values():
        for dependency, condition in service.get("depends_on", {}).items():
            if condition["condition"] != "service_healthy":
                continue
            if dependency in dockerfiles:
                assert dockerfiles[dependency].runtime.last("HEALTHCHECK") is not None, dependency
            else:
                assert compose["services"][dependency]["healthcheck"]["test"], dependency


def test_agent_reserves_the_gpus_through_the_nvidia_driver_for_nvml(compose: dict[str, Any]) -> None:
    agent = compose["services"]["agent"]
    devices = agent["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu", "utility"]}]
    assert agent["pid"] == "host", "NVML reports host PIDs; only the host PID namespace resolves them"


@pytest.mark.parametrize("part", PARTS)
def test_parts_run_with_a_read_only_root_and_no_capabilities(compose: dict[str, Any], part: str) -> None:
    service = compose["services"][part]
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert "user" not in service, "the images' own non-root user applies"


def test_every_variable_compose_sets_or_interpolates_is_documented_in_env_example(
    compose: dict[str, Any], repo_root: Path, env_example: dict[str, str]
) -> None:
    text = (repo_root / "docker" / "compose.yaml").read_text(encoding="utf-8")
    interpolated = set(_INTERPOLATION_RE.findall(text))
    set_here = {key for svc in compose["services"].values() for key in svc.get("environment", {})}
    assert interpolated | set_here <= set(env_example)


@pytest.mark.parametrize("part", PARTS)
def test_each_setting_compose_passes_is_read_by_that_part(compose: dict[str, Any], part: str) -> None:
    given = set(compose["services"][part].get("environment", {}))
    assert given <= settings_read_by(part), given - settings_read_by(part)
