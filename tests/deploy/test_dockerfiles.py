"""The Dockerfiles, parsed: each builds one part from the project and runs a command the CLI has.

No Docker engine is available here, so these tests read the files the way `docker build` would and
check them against the project (CLI parser, pyproject, the files they copy, the ports they serve).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from service.cli import build_parser

from .conftest import PARTS, Dockerfile, dockerignore_excludes, parse_healthcheck

# The subcommand each image runs by default, and the port it serves (the bot: Events API mode).
PART_COMMAND = {"service": "serve", "bot": "bot", "agent": "agent"}
PART_PORT = {"service": 8080, "bot": 3000, "agent": 9400}


def listening_port(argv: list[str]) -> int:
    """The TCP port a `vramdoc` command line listens on, read with the real CLI parser."""
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        return int(args.listen.rsplit(":", 1)[1])
    return int(args.port)


@pytest.mark.parametrize("part", PARTS)
def test_image_is_multi_stage_on_slim_python(dockerfiles: dict[str, Dockerfile], part: str) -> None:
    dockerfile = dockerfiles[part]
    assert len(dockerfile.stages) >= 2
    for stage in dockerfile.stages:
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", stage.base), stage.base
    assert "nvidia/cuda" not in dockerfile.path.read_text(encoding="utf-8")
    copies_from_build = [i for i in dockerfile.runtime.all("COPY") if i.value.startswith("--from=build ")]
    assert copies_from_build, "the runtime stage takes the built virtual environment from the build stage"


@pytest.mark.parametrize("part", PARTS)
def test_runtime_stage_runs_as_a_numeric_non_root_user(dockerfiles: dict[str, Dockerfile], part: str) -> None:
    user = dockerfiles[part].runtime.last("USER")
    assert user is not None
    uid, _, gid = user.value.partition(":")
    assert uid.isdigit() and int(uid) != 0, "a numeric uid lets Kubernetes verify runAsNonRoot"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    later = [i for i in dockerfiles[part].runtime.instructions if i.line > user.line]
    assert not any(i.keyword == "USER" for i in later)


@pytest.mark.parametrize("part", PARTS)
def test_default_command_is_the_parts_cli_subcommand_in_exec_form(
    dockerfiles: dict[str, Dockerfile], part: str
) -> None:
    runtime = dockerfiles[part].runtime
    entrypoint, cmd = runtime.last("ENTRYPOINT"), runtime.last("CMD")
    assert entrypoint is not None and cmd is not None
    assert entrypoint.exec_form == ["tini", "--", "vramdoc"], "exec form, so signals reach vramdoc via tini"
    argv = cmd.exec_form
    assert argv is not None, "CMD must use the exec (JSON) form"
    assert build_parser().parse_args(argv).command == PART_COMMAND[part]


@pytest.mark.parametrize("part", ["service", "agent"])
def test_exposed_port_is_the_port_the_default_command_listens_on(
    dockerfiles: dict[str, Dockerfile], part: str
) -> None:
    runtime = dockerfiles[part].runtime
    cmd = runtime.last("CMD")
    assert cmd is not None and cmd.exec_form is not None
    exposed = [int(i.value.split("/")[0]) for i in runtime.all("EXPOSE")]
    assert exposed == [listening_port(cmd.exec_form)] == [PART_PORT[part]]


def test_bot_image_exposes_the_events_api_port_of_the_cli_default(dockerfiles: dict[str, Dockerfile]) -> None:
    exposed = [int(i.value) for i in dockerfiles["bot"].runtime.all("EXPOSE")]
    assert exposed == [listening_port(["bot", "--http"])]


@pytest.mark.parametrize("part", ["service", "agent"])
def test_healthcheck_asks_healthz_on_the_exposed_port(dockerfiles: dict[str, Dockerfile], part: str) -> None:
    runtime = dockerfiles[part].runtime
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    options, command = parse_healthcheck(healthcheck)
    assert {"interval", "timeout", "start-period", "retries"} <= set(options)
    assert command[:2] == ["python", "-c"], "the slim image has no curl; Python's urllib is there"
    assert f"http://127.0.0.1:{PART_PORT[part]}/healthz" in command[2]
    compile(command[2], "<healthcheck>", "exec")


@pytest.mark.parametrize("part", PARTS)
def test_stop_signal_reaches_vramdoc_through_tini(dockerfiles: dict[str, Dockerfile], part: str) -> None:
    runtime = dockerfiles[part].runtime
    stopsignal = runtime.last("STOPSIGNAL")
    assert stopsignal is not None and stopsignal.value == "SIGTERM"
    installs = " ".join(i.value for i in runtime.all("RUN"))
    assert re.search(r"apt-get install .*\btini\b", installs), "tini must be installed in the runtime stage"
    assert "rm -rf /var/lib/apt/lists/*" in installs


def _copy_sources(dockerfile: Dockerfile) -> list[str]:
    sources: list[str] = []
    for stage in dockerfile.stages:
        for copy in stage.all("COPY"):
            words = [w for w in copy.value.split() if not w.startswith("--")]
            if not copy.value.startswith("--from="):
                sources.extend(words[:-1])
    return sources


@pytest.mark.parametrize(
    "part",
    [
        "service",
        "bot",
        "agent",
    ],
)
def test_every_copied_path_exists_and_is_in_the_build_context(
    dockerfiles: dict[str, Dockerfile], dockerignore: list[str], repo_root: Path, part: str
) -> None:
    for source in _copy_sources(dockerfiles[part]):
        assert (repo_root / source).exists(), f"{part}.Dockerfile copies {source}, which is not in the repo"
        assert not dockerignore_excludes(dockerignore, source), f".dockerignore leaves out {source}"


@pytest.mark.parametrize(
    "path", [".venv/bin/python", ".git/HEAD", "tests/conftest.py", "bench/README.md", "docker/.env"]
)
def test_dockerignore_keeps_local_and_secret_files_out_of_the_context(
    dockerignore: list[str], path: str
) -> None:
    assert dockerignore_excludes(dockerignore, path)


def test_dockerignore_drops_bytecode_inside_copied_packages(dockerignore: list[str]) -> None:
    assert dockerignore_excludes(dockerignore, "service/__pycache__/cli.cpython-311.pyc")
    assert not dockerignore_excludes(dockerignore, "service/cli.py")


def _requirements(repo_root: Path, part: str) -> list[Requirement]:
    text = (repo_root / "docker" / "requirements" / f"{part}.txt").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("part", PARTS)
def test_image_requirements_use_pyprojects_own_specifiers(
    repo_root: Path, pyproject: dict[str, Any], part: str
) -> None:
    declared = {Requirement(d).name.lower(): Requirement(d) for d in pyproject["project"]["dependencies"]}
    for requirement in _requirements(repo_root, part):
        name = requirement.name.lower()
        assert name in declared, f"{part} image installs {name}, which pyproject.toml does not declare"
        assert requirement.specifier == declared[name].specifier, f"{name}: {part}.txt differs from pyproject"
        assert requirement.extras == declared[name].extras, f"{name}: extras differ from pyproject"


@pytest.mark.parametrize("part", PARTS)
def test_build_stage_installs_the_parts_requirements_then_the_project_without_deps(
    dockerfiles: dict[str, Dockerfile], part: str
) -> None:
    build = dockerfiles[part].stages[0]
    copies = " ".join(i.value for i in build.all("COPY"))
    assert f"docker/requirements/{part}.txt" in copies
    runs = [i.value for i in build.all("RUN")]
    assert any("--requirement" in run for run in runs)
    assert runs[-1].endswith("pip install --no-deps ."), "the project must not pull every part's dependencies"


def test_service_image_ships_the_rule_packs_where_vramdoc_rules_dir_points(
    dockerfiles: dict[str, Dockerfile],
) -> None:
    runtime = dockerfiles["service"].runtime
    rules_dir = runtime.env()["VRAMDOC_RULES_DIR"]
    assert any(i.value.split()[-2:] == ["rules", rules_dir] for i in runtime.all("COPY"))


def test_agent_image_asks_the_nvidia_runtime_for_nvml_only(dockerfiles: dict[str, Dockerfile]) -> None:
    env = dockerfiles["agent"].runtime.env()
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


@pytest.mark.parametrize("part", ["bot", "agent"])
def test_only_the_service_image_carries_rule_packs(dockerfiles: dict[str, Dockerfile], part: str) -> None:
    runtime = dockerfiles[part].runtime
    assert "VRAMDOC_RULES_DIR" not in runtime.env()
    assert not any(i.value.split()[0] == "rules" for i in runtime.all("COPY"))
