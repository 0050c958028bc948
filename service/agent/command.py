"""`vramdoc agent` (serve snapshots) and `vramdoc snapshot` (print one, locally).

Exit codes: 0 success (a snapshot with errors[] entries is still a success: it says what it could
not read), 2 a usage or configuration error, with one sentence on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import sys

import msgspec

from service.agent.settings import host_name, load_settings, load_token
from service.agent.snapshot import collect_snapshot
from service.errors import SettingsError
from service.schemas import Snapshot

__all__ = ["agent_url", "parse_listen", "render_snapshot", "run_agent", "run_snapshot"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def parse_listen(listen: str) -> tuple[str, int]:
    """Split `address:port` (`[::]:9400` for IPv6); raises SettingsError when it is not one."""
    address, sep, port_text = listen.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SettingsError(f"--listen {listen!r} is not address:port (e.g. 0.0.0.0:9400).")
    address = address.strip("[]") or "0.0.0.0"
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not all(part.isalnum() or "-" in part for part in address.split(".")):
            raise SettingsError(f"--listen {listen!r} does not start with an address or host name.") from None
    return address, int(port_text)


def agent_url(listen_host: str, port: int, given: str | None) -> str:
    """The URL the bot should use: the given one, else this host's name when listening everywhere."""
    if given:
        return given.rstrip("/")
    host = socket.gethostname() if listen_host in ("0.0.0.0", "::") else listen_host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _fail(command: str, err: SettingsError) -> int:
    print(f"vramdoc {command}: {err}", file=sys.stderr)
    return EXIT_USAGE


def run_agent(args: argparse.Namespace) -> int:
    """Serve `/v1/snapshot` and `/healthz` until interrupted."""
    import uvicorn

    from service.agent.app import AgentIdentity, create_app
    from service.serving import server_options

    try:
        settings = load_settings(os.environ)
        token = load_token(os.environ)
        host = host_name(args.name)
        address, port = parse_listen(args.listen)
    except SettingsError as err:
        return _fail("agent", err)
    identity = AgentIdentity(host=host, url=agent_url(address, port, args.url or settings.url), token=token)
    uvicorn.run(create_app(settings, identity), host=address, port=port, log_level="info", **server_options())
    return EXIT_OK


def run_snapshot(args: argparse.Namespace) -> int:
    """Read this host once and print the snapshot (JSON contract with --json, else a table)."""
    try:
        settings = load_settings(os.environ)
        host = host_name(args.name)
    except SettingsError as err:
        return _fail("snapshot", err)
    snapshot = asyncio.run(collect_snapshot(settings, host))
    if args.json:
        sys.stdout.write(msgspec.json.encode(snapshot).decode() + "\n")
    else:
        sys.stdout.write(render_snapshot(snapshot))
    if not snapshot.gpus and any(e.source.startswith(("nvml", "dcgm")) for e in snapshot.errors):
        # `snapshot --json > snap.json && diagnose …` must not carry on with a snapshot of nothing.
        print(f"vramdoc snapshot: no GPU could be read on {host} (see errors).", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def render_snapshot(snapshot: Snapshot) -> str:
    """A readable plain-text table of one snapshot."""
    lines = [
        f"host {snapshot.host}  driver {snapshot.driver_version or '-'}  CUDA {snapshot.cuda_version or '-'}"
        f"  captured {snapshot.captured_at}",
        "",
    ]
    if snapshot.gpus:
        lines.append(
            f"{'GPU':<4}{'NAME':<30}{'USED GiB':>10}{'TOTAL':>8}{'FREE':>8}{'RSVD':>7}{'UTIL':>6}  CC   MIG"
        )
    else:
        lines.append("no GPU could be read (see errors)")
    for gpu in snapshot.gpus:
        mig = {True: "on", False: "off", None: "-"}[gpu.mig_mode]
        lines.append(
            f"{gpu.index:<4}{gpu.name[:29]:<30}{gpu.used_gib:>10.1f}{gpu.total_gib:>8.1f}{gpu.free_gib:>8.1f}"
            f"{_num(gpu.reserved_gib):>7}{_num(gpu.utilization_pct, '{}%'):>6}"
            f"  {gpu.compute_capability or '-':<4} {mig}"
        )
        for inst in gpu.mig_instances:
            lines.append(
                f"    MIG {inst.index}: {inst.name}  {inst.used_gib:.1f} of {inst.total_gib:.1f} GiB used"
            )
        for proc in gpu.processes:
            where = f" [{proc.container}]" if proc.container else ""
            lines.append(
                f"    pid {proc.pid:<8} {_num(proc.used_gib):>6} GiB  {proc.name or '?'}{where}"
                f"  {proc.cmdline or ''}".rstrip()
            )
    for server in snapshot.vllm:
        usage = _num(None if server.kv_cache_usage is None else server.kv_cache_usage * 100, "{:.0f}%")
        lines.append(
            f"vLLM {server.url}  model {server.model or '-'}  KV cache {usage}  running "
            f"{_num(server.requests_running, '{}')}  waiting {_num(server.requests_waiting, '{}')}  "
            f"preemptions {_num(server.preemptions_total, '{}')}"
        )
    if snapshot.errors:
        lines += ["", "could not read:"] + [f"  {e.source}: {e.reason}" for e in snapshot.errors]
    return "\n".join(lines) + "\n"
