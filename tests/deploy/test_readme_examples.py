"""README's curl examples, run against a real `vramdoc serve` over loopback, still print what it shows.

Each example is a ```sh block holding one `curl` command followed by a ```json block with the
output pasted from a real run. The comparison covers what a reader acts on (phase, facts, the fixes
and their exact changes, the budget's verdict and figures), not the rules digest, which changes with
every rule edit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from .conftest import REPO_ROOT

_EXAMPLE_RE = re.compile(r"```sh\n(curl [^`]*?)\n```\n+(?:<details>.*?\n+)?```json\n(.*?)\n```", re.DOTALL)


class Example(NamedTuple):
    command: list[str]
    shown: dict[str, Any]


def readme_examples() -> list[Example]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    examples = []
    for command, output in _EXAMPLE_RE.findall(text):
        words = shlex.split(command.replace("\\\n", " ").split(" | ", 1)[0])
        examples.append(Example(words, json.loads(output)))
    return examples


def _request(words: list[str], base: str) -> httpx.Request:
    """The request `curl` would send for the subset of curl options the README uses."""
    headers: dict[str, str] = {}
    body: bytes | None = None
    url = ""
    args = iter(words[1:])
    for word in args:
        if word in ("-s", "--silent", "-S", "--show-error", "--fail", "-f"):
            continue
        if word in ("-H", "--header"):
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif word in ("--data-binary", "-d", "--data"):
            data = next(args)
            body = (REPO_ROOT / data[1:]).read_bytes() if data.startswith("@") else data.encode()
        elif word.startswith("http"):
            url = word
        else:
            raise AssertionError(f"teach this test curl's {word} option")
    parts = urlsplit(url)
    target = urlunsplit((parts.scheme, urlsplit(base).netloc, parts.path, parts.query, ""))
    if body is not None and "Content-Type" not in headers:
        headers["Content-Type"] = "application/x-www-form-urlencoded"  # what curl sends
    return httpx.Request("POST" if body is not None else "GET", target, headers=headers, content=body)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_service() -> Iterator[str]:
    """A real `vramdoc serve` on a free loopback port, with the in-memory defaults `make run` uses."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMDOC_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "serve exited"
            assert time.monotonic() < deadline, "vramdoc serve did not answer /healthz"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    with running_service() as base:
        yield base


def _what_a_reader_acts_on(document: dict[str, Any]) -> dict[str, Any]:
    if "phase" in document:  # a Diagnosis
        return {
            "phase": document["phase"],
            "facts": document["facts"],
            "fixes": [(fix["id"], fix["change"]) for fix in document["fixes"]],
            "engine": document["engine"],
            "budget": None if document["budget"] is None else _what_a_reader_acts_on(document["budget"]),
        }
    return {key: value for key, value in document.items() if not key.startswith("source")}


def test_readme_shows_diagnose_as_raw_log_and_json_and_estimate() -> None:
    examples = readme_examples()
    paths = [urlsplit(_url(e)).path for e in examples]
    assert paths.count("/v1/diagnose") >= 2 and "/v1/estimate" in paths
    assert any("--data-binary" in e.command for e in examples), "a raw log body example"
    assert any("Content-Type: application/json" in e.command for e in examples), "a JSON body example"


def _url(example: Example) -> str:
    return next(word for word in example.command if word.startswith("http"))


@pytest.mark.parametrize("example", readme_examples(), ids=lambda e: urlsplit(_url(e)).path)
def test_readme_example_prints_what_the_readme_shows(service_url: str, example: Example) -> None:
    request = _request(example.command, service_url)
    with httpx.Client(timeout=30) as client:
        response = client.send(request)
    assert response.status_code == 200, response.text
    assert _what_a_reader_acts_on(response.json()) == _what_a_reader_acts_on(example.shown), (
        "README's output is stale: refresh it with `.venv/bin/python -m tests.deploy.test_readme_examples`"
    )


def test_readme_examples_use_files_that_exist() -> None:
    for example in readme_examples():
        for word in example.command:
            if word.startswith("@"):
                assert Path(REPO_ROOT / word[1:]).is_file(), word


def refresh_readme() -> None:
    """Rewrite each example's output block in README.md with what the service prints now."""
    path = REPO_ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    with running_service() as base, httpx.Client(timeout=30) as client:

        def replace(match: re.Match[str]) -> str:
            words = shlex.split(match.group(1).replace("\\\n", " ").split(" | ", 1)[0])
            response = client.send(_request(words, base))
            response.raise_for_status()
            shown = json.dumps(response.json(), indent=4)  # as `python3 -m json.tool` prints it
            return match.group(0).replace(match.group(2), shown)

        path.write_text(_EXAMPLE_RE.sub(replace, text), encoding="utf-8")


if __name__ == "__main__":
    refresh_readme()
