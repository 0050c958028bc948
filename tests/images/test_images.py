"""The built images, run: each image's entry point starts as a container and is probed from outside.

`make images` builds the images with `docker/build-local` and then runs this module with
VRAMDOC_IMAGE_TAG set; under a plain `make test` (no images built) it is skipped. Each container runs
with `buildah run --isolation chroot` on the host network as the image's own non-root USER, so the
probes are real HTTP over loopback: the service diagnoses a corpus log, the bot answers Slack's
url_verification and one signed mention against the Slack stand-in, the agent serves its snapshot
behind its token (no NVIDIA library in the image here, so NVML's absence must be an `errors[]` entry).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from service.packs import load_packs

from .containers import Container, image_config, process_uid, start

TAG = os.environ.get("VRAMDOC_IMAGE_TAG", "")
if not TAG or shutil.which("buildah") is None:
    pytest.skip(
        "no images built here: `make images` builds them and runs these tests", allow_module_level=True
    )

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bot"))
from slack_standin import BOT_TOKEN, BOT_USER, SlackStandin  # noqa: E402

CORPUS_LOG = ROOT / "tests" / "corpus" / "v0.32-kv-capacity-qwen.log"
IMAGE_UID = 10001
SIGNING_SECRET = "images-smoke-signing-secret-5d41402abc4b2a76"
AGENT_TOKEN = "images-smoke-agent-token-7c4a8d09ca3762af61e59520943dc26494f8941b"
# terminationGracePeriodSeconds of each part in docker/k8s (SIGTERM must end it well inside).
GRACE_S = {"service": 30.0, "bot": 30.0, "agent": 15.0}


# The ports each image's own CMD serves (and its HEALTHCHECK probes); tests/deploy pins the same.
PORTS = {"service": 8080, "bot": 3000, "agent": 9400}


def own_cmd(part: str) -> list[str]:
    """The image's own CMD, unchanged, once its port is known to be free on this host network."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", PORTS[part]))
        except OSError:
            pytest.fail(
                f"port {PORTS[part]} is taken on this host: the {part} image serves it (stop that first)"
            )
    return image_config(image(part)).cmd


def wait_until(probe: Callable[[], bool], container: Container, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if container.process.poll() is not None:
            pytest.fail(
                f"{container.image} exited ({container.process.returncode}) before {what}:\n"
                f"{container.output()[-3000:]}"
            )
        try:
            if probe():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{container.image}: no {what} within {timeout_s:.0f} s:\n{container.output()[-3000:]}")


def image(part: str) -> str:
    return f"vramdoc/{part}:{TAG}"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Container, str]]:
    container = start(image("service"), own_cmd("service"), {}, tmp_path_factory.mktemp("service") / "log")
    url = f"http://127.0.0.1:{PORTS['service']}"
    try:
        wait_until(
            lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200, container, "/healthz 200"
        )
        yield container, url
    finally:
        container.remove()


class Standin:
    """The Slack stand-in on its own event loop thread, so synchronous tests can drive it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.slack = SlackStandin()
        self.run(self.slack.start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self.run(self.slack.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def bot(
    service: tuple[Container, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Container, str, SlackStandin]]:
    standin = Standin()
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "VRAMDOC_SLACK_API_URL": standin.slack.base_url,
        "VRAMDOC_SERVICE_URL": service[1],
    }
    container = start(image("bot"), own_cmd("bot"), env, tmp_path_factory.mktemp("bot") / "log")
    url = f"http://127.0.0.1:{PORTS['bot']}"
    try:
        wait_until(lambda: _url_verification(url) is not None, container, "an answer to url_verification")
        yield container, url, standin.slack
    finally:
        container.remove()
        standin.close()


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Container, str]]:
    env = {"VRAMDOC_AGENT_TOKEN": AGENT_TOKEN, "VRAMDOC_AGENT_VLLM_URLS": ""}
    container = start(image("agent"), own_cmd("agent"), env, tmp_path_factory.mktemp("agent") / "log")
    url = f"http://127.0.0.1:{PORTS['agent']}"
    try:
        wait_until(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code < 500, container, "/healthz")
        yield container, url
    finally:
        container.remove()


def _signed(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=ts, body=body)
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }


def _url_verification(url: str) -> str | None:
    body = json.dumps(
        {"token": "legacy", "challenge": "smoke-challenge-3f2a", "type": "url_verification"}
    ).encode()
    response = httpx.post(f"{url}/slack/events", content=body, headers=_signed(body), timeout=5)
    return response.text if response.status_code == 200 and "smoke-challenge-3f2a" in response.text else None


def test_service_diagnoses_a_corpus_log_with_the_rules_of_this_checkout(
    service: tuple[Container, str],
) -> None:
    _, url = service
    response = httpx.post(
        f"{url}/v1/diagnose",
        content=CORPUS_LOG.read_bytes(),
        timeout=30,
        headers={"Content-Type": "text/plain"},
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["phase"] == "kv_cache_capacity"
    assert answer["facts"]["estimated_max_model_len"] == 1344
    assert answer["rules_version"] == load_packs(ROOT / "rules").digest


def test_bot_answers_a_signed_mention_in_the_thread(bot: tuple[Container, str, SlackStandin]) -> None:
    _, url, slack = bot
    log = CORPUS_LOG.read_text()
    event = {
        "token": "legacy",
        "team_id": "T0001",
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": "EvSMOKE1",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": True}],
        "event": {
            "type": "app_mention",
            "user": "U0PERSON",
            "text": f"<@{BOT_USER}> ```{log}```",
            "ts": "1700000000.000100",
            "channel": "C0CHANNEL",
            "event_ts": "1700000000.000100",
        },
    }
    body = json.dumps(event).encode()
    assert (
        httpx.post(f"{url}/slack/events", content=body, headers=_signed(body), timeout=5).status_code == 200
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [r for r in slack.replies() if r.get("thread_ts")]:
        time.sleep(0.5)
    replies = [r for r in slack.replies() if r.get("thread_ts") == "1700000000.000100"]
    assert replies, f"no threaded reply; calls: {[c.method for c in slack.calls]}"
    assert "max-model-len" in json.dumps(replies[-1])


def test_agent_serves_its_snapshot_behind_its_token(agent: tuple[Container, str]) -> None:
    _, url = agent
    assert httpx.get(f"{url}/v1/snapshot", timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer " + "x" * 64}
    assert httpx.get(f"{url}/v1/snapshot", headers=wrong, timeout=10).status_code == 401
    response = httpx.get(f"{url}/v1/snapshot", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}, timeout=20)
    assert response.status_code == 200, response.text
    snapshot = response.json()
    assert snapshot["gpus"] == []
    assert any(
        "NVML" in e.get("reason", "") + e.get("what", "") or "libnvidia-ml" in json.dumps(e)
        for e in snapshot["errors"]
    ), snapshot["errors"]


@pytest.mark.parametrize("part", ["service", "bot", "agent"])
def test_processes_run_as_the_images_non_root_user(part: str, request: pytest.FixtureRequest) -> None:
    container: Container = request.getfixturevalue(part)[0]
    pids = container.vramdoc_processes()
    assert pids, f"no vramdoc process under {container.image}"
    assert {process_uid(pid) for pid in pids} == {IMAGE_UID}
    assert image_config(container.image).user.split(":")[0] == str(IMAGE_UID)


@pytest.mark.parametrize("part", ["service", "bot", "agent"])
def test_each_images_own_health_check_passes(part: str, request: pytest.FixtureRequest) -> None:
    container: Container = request.getfixturevalue(part)[0]
    check = image_config(container.image).healthcheck
    assert check and check[0] == "CMD", f"{container.image} declares no exec HEALTHCHECK: {check}"
    done = container.exec(check[1:])
    assert done.returncode == 0, (
        f"HEALTHCHECK {check[1:]} exited {done.returncode}: {done.stdout}{done.stderr}"
    )


def test_the_service_image_starts_from_rules_decoded_at_build_time(service: tuple[Container, str]) -> None:
    container, _ = service
    cache = "/opt/vramdoc/pack-cache"
    probe = f"import pathlib, sys; sys.exit(0 if list(pathlib.Path('{cache}').glob('*.msgpack')) else 1)"
    assert container.exec(["python", "-c", probe]).returncode == 0


@pytest.mark.parametrize("part", ["bot", "agent", "service"])
def test_sigterm_stops_each_part_within_its_grace_period(part: str, request: pytest.FixtureRequest) -> None:
    container: Container = request.getfixturevalue(part)[0]
    took = container.terminate(GRACE_S[part])
    assert took is not None, (
        f"{part} still running {GRACE_S[part]} s after SIGTERM:\n{container.output()[-2000:]}"
    )
