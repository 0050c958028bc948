"""Health check for the bot container: healthy while it is connected to Slack.

In Socket Mode the bot serves no port, so "alive" means its websocket to Slack is up: an ESTABLISHED
TCP connection to port 443 in the container's own network namespace (/proc/net/tcp and tcp6). In
Events API mode (`vramdoc bot --http`) the bot's own GET /healthz answers instead. Exit 0 when
either holds, 1 otherwise: Docker's HEALTHCHECK and Kubernetes' exec probes read the exit code.
(Behind an HTTPS proxy the websocket goes to the proxy's port: pass it with --remote-port.)
"""

from __future__ import annotations

import argparse
import sys
import urllib.request
from pathlib import Path

ESTABLISHED = "01"


def has_established_connection(proc_net: Path, remote_port: int) -> bool:
    """Whether any TCP socket in this network namespace is connected to `remote_port`."""
    suffix = f":{remote_port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc_net / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for fields in (line.split() for line in lines):
            if len(fields) > 3 and fields[2].endswith(suffix) and fields[3] == ESTABLISHED:
                return True
    return False


def http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proc-net", type=Path, default=Path("/proc/net"))
    parser.add_argument("--remote-port", type=int, default=443, help="Slack's websocket port (default 443)")
    parser.add_argument("--health-url", default="http://127.0.0.1:3000/healthz", help="Events API mode")
    args = parser.parse_args()
    if has_established_connection(args.proc_net, args.remote_port) or http_answers(args.health_url):
        return 0
    print("bot is neither connected to Slack nor answering its health URL", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
