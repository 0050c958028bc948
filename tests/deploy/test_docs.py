"""README, CONTRIBUTING and .env.example agree with the code they describe."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from service.cli import build_parser

_FENCE_RE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_TABLE_SETTING_RE = re.compile(r"^\| `((?:VRAMDOC|SLACK)_[A-Z0-9_]+)` \|", re.MULTILINE)
_COMPOSE_ONLY = frozenset({"VRAMDOC_AGENT_NAME"})


def _read(repo_root: Path, name: str) -> str:
    return (repo_root / name).read_text(encoding="utf-8")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the vramdoc parser has no subcommands")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _shell_commands(markdown: str) -> list[list[str]]:
    """Each `vramdoc …` command in the document's sh blocks, split like a shell would."""
    commands: list[list[str]] = []
    for language, body in _FENCE_RE.findall(markdown):
        if language != "sh":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            code = line.split(" #", 1)[0]
            for part in re.split(r"&&|\|", code):
                words = shlex.split(part.split(">", 1)[0])
                if words and (words[0] == "vramdoc" or words[0].endswith("/bin/vramdoc")):
                    commands.append(words[1:])
    return commands


@pytest.fixture(scope="module")
def readme(repo_root: Path) -> str:
    return _read(repo_root, "README.md")


def test_every_setting_the_code_reads_is_in_the_readme_table(readme: str, code_settings: set[str]) -> None:
    documented = set(_TABLE_SETTING_RE.findall(readme))
    assert code_settings - documented == set(), "add these to README's configuration table"


def test_every_setting_the_code_reads_is_in_env_example(
    env_example: dict[str, str], code_settings: set[str]
) -> None:
    assert code_settings - set(env_example) == set(), "add these to docker/.env.example"


def test_documented_settings_all_exist_in_the_code(
    readme: str, env_example: dict[str, str], code_settings: set[str]
) -> None:
    documented = set(_TABLE_SETTING_RE.findall(readme)) | set(env_example)
    assert documented - code_settings - _COMPOSE_ONLY == set(), "documented, but nothing reads them"


def test_compose_only_settings_are_really_used_by_compose(repo_root: Path) -> None:
    compose_text = _read(repo_root, "docker/compose.yaml")
    for name in _COMPOSE_ONLY:
        assert "${" + name in compose_text


def test_readme_documents_every_subcommand(readme: str) -> None:
    for name in _subparsers(build_parser()):
        assert f"`vramdoc {name}" in readme, f"README does not show `vramdoc {name}`"


def test_options_in_the_readme_cli_table_exist(readme: str) -> None:
    commands = _subparsers(build_parser())
    rows = re.findall(r"^\| `vramdoc (\w+)(.*?)` \|", readme, re.MULTILINE)
    assert {name for name, _ in rows} == set(commands)
    for name, usage in rows:
        for option in re.findall(r"(?<![\w-])(-{1,2}[a-z][\w-]*)", usage):
            assert option in _options(commands[name]), f"`vramdoc {name}` has no option {option}"


def test_every_vramdoc_command_in_the_docs_parses(repo_root: Path) -> None:
    parser = build_parser()
    found = 0
    for name in ("README.md", "CONTRIBUTING.md", "rules/README.md"):
        path = repo_root / name
        if not path.exists():
            continue
        for argv in _shell_commands(path.read_text(encoding="utf-8")):
            try:
                parser.parse_args(argv)
            except SystemExit as exc:
                raise AssertionError(f"{name}: `vramdoc {' '.join(argv)}` does not parse") from exc
            found += 1
    assert found >= 5


def test_files_the_readme_points_at_exist(readme: str, repo_root: Path) -> None:
    paths = set(re.findall(r"(?<![\w/.])((?:tests|docker|bot|rules|service|bench)/[\w./-]+\.\w+)", readme))
    assert paths
    for path in paths:
        assert (repo_root / path).exists(), f"README mentions {path}, which does not exist"


def test_contributing_names_the_make_targets_ci_runs(repo_root: Path) -> None:
    contributing = _read(repo_root, "CONTRIBUTING.md")
    makefile = _read(repo_root, "Makefile")
    for target in ("setup", "lint", "test", "bench"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE)
        assert f"make {target}" in contributing


def test_contributing_layout_lists_only_paths_that_exist(repo_root: Path) -> None:
    contributing = _read(repo_root, "CONTRIBUTING.md")
    layout = next(body for lang, body in _FENCE_RE.findall(contributing) if "service/" in body and not lang)
    parent = ""
    for line in layout.splitlines():
        entry = line.split()[0]
        if not line.startswith(" "):
            parent = entry if entry.endswith("/") else ""
            path = entry
        else:
            path = parent + entry
        assert (repo_root / path).exists(), f"CONTRIBUTING's layout names {path}, which does not exist"


def test_env_example_ships_no_secret_values(env_example: dict[str, str]) -> None:
    secrets = [name for name in env_example if re.search(r"TOKEN|SECRET|DSN", name)]
    assert "VRAMDOC_AGENT_TOKEN" in secrets and "SLACK_BOT_TOKEN" in secrets
    for name in secrets:
        assert env_example[name] == "", f"{name} must be left empty in docker/.env.example"


def test_slack_steps_name_exactly_what_the_manifest_asks_for(readme: str, repo_root: Path) -> None:
    manifest = yaml.safe_load(_read(repo_root, "bot/manifest.yaml"))
    section = readme.split("\n## Slack\n", 1)[1].split("\n## ", 1)[0]
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    quoted = set(re.findall(r"`([a-z_.:]+)`", section))
    assert scopes <= quoted, "name every scope the manifest asks for"
    assert {q for q in quoted if ":" in q} - {"connections:write"} <= scopes, "no scope the manifest lacks"
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert events <= set(re.findall(r"`([a-z_.]+)`", section))
    for command in manifest["features"]["slash_commands"]:
        assert f"`{command['command']}" in section
    for shortcut in manifest["features"]["shortcuts"]:
        assert f'"{shortcut["name"]}"' in section or f"**{shortcut['name']}**" in section
    assert manifest["settings"]["socket_mode_enabled"] is True, "the steps describe Socket Mode"
    assert "bot/manifest.yaml" in section
