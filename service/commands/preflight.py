"""`vramdoc preflight 'vllm serve …'`: will the command start on that host now (DESIGN §3.7 exit codes).

The host's state comes from a snapshot file (`vramdoc snapshot --json` there), or from its agent:
`--host gpu-07` looks the name up in the agent registry (VRAMDOC_REDIS_URL) and asks that agent with
VRAMDOC_AGENT_TOKEN, exactly as the bot does; a name is a registry key, never a URL. Without either,
`--gpu` sizes it on an empty catalog GPU. Exit 0 it starts, 1 it does not, 2 bad input, so a deploy
script can gate a rollout on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import httpx
import msgspec
from redis.exceptions import RedisError

from service.core import load_rules, preflight
from service.env_settings import read_agent_token
from service.errors import InputError, PackError, SettingsError
from service.redis_link import connect_redis
from service.registry import get_agent
from service.schemas import Preflight, PreflightRequest, Snapshot

__all__ = ["fetch_snapshot", "render", "run"]

_AGENT_TIMEOUT_S = 5.0


class HostUnreachableError(InputError):
    problem_type = "host-unreachable"


def _read_snapshot(path: str) -> Snapshot:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"The snapshot file {path} cannot be read ({exc.strerror}).") from exc
    try:
        return msgspec.json.decode(raw, type=Snapshot)
    except msgspec.DecodeError as exc:
        raise InputError(f"The snapshot file {path} is not a snapshot ({exc}).") from exc


async def fetch_snapshot(host: str, redis_url: str, token: str | None) -> Snapshot:
    """The live snapshot of a registered host, from its agent; InputError naming what failed."""
    redis = connect_redis(redis_url, timeout_s=_AGENT_TIMEOUT_S)
    try:
        registration = await get_agent(redis, host)
    except (RedisError, OSError) as exc:
        raise HostUnreachableError(
            f"The agent registry at VRAMDOC_REDIS_URL is unreachable ({exc})."
        ) from exc
    finally:
        await redis.aclose()
    if registration is None:
        raise HostUnreachableError(f"No agent is registered for {host}; is `vramdoc agent` running there?")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = registration.url.rstrip("/") + "/v1/snapshot"
    try:
        async with httpx.AsyncClient(timeout=_AGENT_TIMEOUT_S, follow_redirects=False) as client:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise HostUnreachableError(f"The agent on {host} did not answer ({type(exc).__name__}).") from exc
    if response.status_code != 200:
        raise HostUnreachableError(
            f"The agent on {host} answered HTTP {response.status_code} to the snapshot."
        )
    try:
        return msgspec.json.decode(response.content, type=Snapshot)
    except msgspec.DecodeError as exc:
        raise HostUnreachableError(
            f"The agent on {host} sent something that is not a snapshot ({exc})."
        ) from exc


def _snapshot(args: argparse.Namespace) -> Snapshot | None:
    if args.snapshot:
        return _read_snapshot(args.snapshot)
    if not args.host:
        return None
    redis_url = os.environ.get("VRAMDOC_REDIS_URL", "").strip()
    if not redis_url:
        raise InputError("--host needs the agent registry: set VRAMDOC_REDIS_URL (or pass --snapshot).")
    return asyncio.run(fetch_snapshot(args.host, redis_url, read_agent_token(os.environ)))


def render(result: Preflight) -> str:
    """The answer for a terminal: verdict, corrected command, the fixes, what is uncertain."""
    where = f" on {result.host} (GPU {', '.join(map(str, result.gpus))})" if result.host else ""
    lines = [f"pre-flight{where}, vLLM {result.vllm_version} ({result.version_source})", result.verdict]
    lines += [f"flag: {issue.message}" for issue in result.issues]
    if result.corrected_command:
        lines.append(f"corrected: {result.corrected_command}")
    lines += [f"{fix.rank}. {fix.change}  ({fix.title})" for fix in result.fixes]
    lines += [f"uncertain: {note}" for note in result.uncertain]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the verdict; exit 0 it starts, 1 it does not, 2 input error."""
    try:
        request = PreflightRequest(
            command=args.launch,
            snapshot=_snapshot(args),
            gpu=args.gpu,
            vllm_version=args.vllm_version,
            top=args.top,
        )
        result = preflight(request, load_rules())
    except (InputError, SettingsError) as exc:
        print(f"vramdoc preflight: {exc}", file=sys.stderr)
        return 2
    except PackError as exc:
        print(f"vramdoc preflight: the rule packs cannot be loaded: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        print(render(result))
    return 0 if result.outcome == "starts" else 1
