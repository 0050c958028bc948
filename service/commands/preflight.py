"""`vramdoc preflight 'vllm serve …'`: will the command start on that host now (DESIGN §3.7 exit codes).

The host's state comes from a snapshot file (`vramdoc snapshot --json` there), or from its agent:
`--host gpu-07` looks the name up in the agent registry (VRAMDOC_REDIS_URL) or the hosts file
(VRAMDOC_HOSTS_FILE) and asks that agent with VRAMDOC_AGENT_TOKEN, with the bot's own directory and
client; a name is a lookup key, never a URL. Without either,
`--gpu` sizes it on an empty catalog GPU. Exit 0 it starts, 1 it does not, 2 bad input, so a deploy
script can gate a rollout on it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import msgspec

from service.commands.estimate import model_cache
from service.core import launch_model, load_rules, preflight
from service.env_settings import read_agent_token
from service.errors import InputError, PackError, SettingsError
from service.models.chain import ModelResolver, ModelSettings, cite
from service.packs import RulePacks
from service.redacted import redacted_hint, redacted_preflight
from service.schemas import EstimateRequest, Preflight, PreflightRequest, Snapshot

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


async def fetch_snapshot(
    host: str, redis_url: str | None, token: str | None, hosts_file: str | None
) -> Snapshot:
    """The live snapshot of a host the bot could reach (the registry, then the hosts file), asked the
    way the bot asks it (bot.hosts, bot.clients); InputError with the bot's sentence when it fails.
    Their HTTP and Redis clients are imported here: `--snapshot` and `--gpu` never need them."""
    from bot.clients import AgentClient, HostFailure
    from bot.hosts import HostDirectory, load_hosts_file
    from service.redis_link import connect_redis, redis_prefix

    static = load_hosts_file(Path(hosts_file)) if hosts_file else {}
    directory = HostDirectory(
        connect_redis(redis_url, timeout_s=_AGENT_TIMEOUT_S) if redis_url else None,
        static,
        key_prefix=f"{redis_prefix(os.environ)}:",
    )
    agents = AgentClient(token, timeout_s=_AGENT_TIMEOUT_S)
    try:
        found = await directory.resolve((host,))
        if not found.found:
            why = "the agent registry is unreachable" if found.registry_down else "no agent registered it"
            raise HostUnreachableError(f"I don't know the host {redacted_hint(host)} ({why}).")
        (result,) = await agents.snapshots(found.found)
    finally:
        await agents.close()
        await directory.close()
    if isinstance(result, HostFailure):
        raise HostUnreachableError(f"{result.reason}.")
    return result


def _snapshot(args: argparse.Namespace) -> Snapshot | None:
    if args.snapshot:
        return _read_snapshot(args.snapshot)
    if not args.host:
        return None
    redis_url = os.environ.get("VRAMDOC_REDIS_URL", "").strip() or None
    hosts_file = os.environ.get("VRAMDOC_HOSTS_FILE", "").strip() or None
    if redis_url is None and hosts_file is None:
        raise InputError(
            "--host needs the agent registry (VRAMDOC_REDIS_URL) or a hosts file (VRAMDOC_HOSTS_FILE); "
            "or pass --snapshot."
        )
    import asyncio

    return asyncio.run(fetch_snapshot(args.host, redis_url, read_agent_token(os.environ), hosts_file))


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


def _preflight(request: PreflightRequest, packs: RulePacks) -> Preflight:
    """Resolve the command's model through the chain (catalog, the host's agent, HF cache, Hub) as
    `vramdoc estimate` does, then pre-flight it."""
    resolver = ModelResolver(ModelSettings.from_env(), model_cache())
    snapshots = (request.snapshot,) if request.snapshot is not None else ()
    wanted, resolved = resolver.prepare(
        EstimateRequest(model=launch_model(request, packs)), packs.catalog, snapshots
    )
    request = msgspec.structs.replace(request, config=wanted.config, parameters=wanted.parameters)
    result = preflight(request, packs)
    return msgspec.structs.replace(result, budget=cite(result.budget, resolved))


def run(args: argparse.Namespace) -> int:
    """Print the verdict; exit 0 it starts, 1 it does not, 2 input error."""
    try:
        request = redacted_preflight(
            PreflightRequest(
                command=args.launch,
                snapshot=_snapshot(args),
                gpu=args.gpu,
                vllm_version=args.vllm_version,
                top=args.top,
            )
        )
        result = _preflight(request, load_rules())
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
