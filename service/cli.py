"""The `vramdoc` command line: one parser, each subcommand's work in its own module.

Exit codes (DESIGN §3.7): 0 nothing wrong / fits / starts, 1 failure diagnosed / does not fit, 2 usage or
input error. Handlers are imported lazily so `vramdoc diagnose` never pays for the web stack.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

# subcommand -> "module:function" returning an exit code
_HANDLERS = {
    "diagnose": "service.commands.diagnose:run",
    "estimate": "service.commands.estimate:run",
    "preflight": "service.commands.preflight:run",
    "rules": "service.commands.rules:run",
    "serve": "service.commands.serve:run",
    "agent": "service.agent.command:run_agent",
    "snapshot": "service.agent.command:run_snapshot",
    "bot": "bot.command:run",
}


def _diagnose_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="log file, or - for standard input")
    p.add_argument("--json", action="store_true", help="print the Diagnosis JSON contract only")
    p.add_argument("--model", help="model id (catalog or Hugging Face), when the log does not say")
    p.add_argument("--gpu", help="GPU name from the catalog, or total GiB")
    p.add_argument("--vllm-version", help="vLLM version, when the log does not say")
    p.add_argument("--command", dest="vllm_command", help="the `vllm serve ...` command that was run")
    p.add_argument("--snapshot", help="a snapshot JSON file from `vramdoc snapshot --json`")
    p.add_argument("--top", type=int, default=5, help="how many fixes to show (default 5)")


def _estimate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        help="catalog id, Hugging Face id (read from the HF cache or the Hub: HF_ENDPOINT, HF_TOKEN, "
        "HF_HUB_OFFLINE) or a local checkpoint folder",
    )
    p.add_argument("--config", help="a Hugging Face config.json for a model not in the catalog")
    p.add_argument("--gpu", help="GPU name from the catalog, or its total memory in GiB")
    p.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    p.add_argument("--dtype")
    p.add_argument("--quantization")
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--max-model-len", type=str)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=str)
    p.add_argument("--block-size", type=int)
    p.add_argument("--tensor-parallel-size", "-tp", type=int)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int)
    p.add_argument("--data-parallel-size", "-dp", type=int)
    p.add_argument(
        "--enable-expert-parallel", action="store_true", help="MoE experts split whole over the TP × DP GPUs"
    )
    p.add_argument(
        "--speculative-config",
        help='vLLM\'s JSON, e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\' or {"model": "<draft>"}',
    )
    p.add_argument("--kv-cache-memory-bytes", type=str)
    p.add_argument("--free-gib", type=float, help="free memory per GPU at startup, in GiB")
    p.add_argument("--vllm-version")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (none in the budget)")
    p.add_argument(
        "--entrypoint",
        choices=("serve", "llm"),
        help="serve (vllm serve, the default) or llm (the LLM(...) class: larger default batch)",
    )
    p.add_argument("--json", action="store_true", help="print the Budget JSON contract only")


def _preflight_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("launch", metavar="COMMAND", help="the launch command, quoted: 'vllm serve MODEL ...'")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--snapshot", help="the host's snapshot JSON file (`vramdoc snapshot --json` there)")
    where.add_argument("--host", help="a registered host: its agent's live snapshot (VRAMDOC_REDIS_URL)")
    where.add_argument("--gpu", help="without a host: a catalog GPU, assumed empty")
    p.add_argument("--vllm-version", help="the host's vLLM version, when its vLLM server does not say")
    p.add_argument("--top", type=int, default=3, help="how many fixes to show (default 3)")
    p.add_argument("--json", action="store_true", help="print the Preflight JSON only")


def _rules_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "test"])
    p.add_argument("--rules-dir", help="rule pack folder (default: the packaged rules/)")
    p.add_argument("--json", action="store_true")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1)


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="0.0.0.0:9400", help="address:port to listen on")
    p.add_argument("--name", help="host name to register under (default: this host's name)")
    p.add_argument("--url", help="URL the bot should use to reach this agent")


def _snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--name", help="host name to report (default: this host's name)")


def _bot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", action="store_true", help="serve the Events API over HTTP instead")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=3000)


class _Parser(argparse.ArgumentParser):
    """A usage error is one sentence on stderr and exit 2, not argparse's multi-line usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message[:1].upper()}{message[1:]} (see `{self.prog} --help`).\n")


# subcommand -> (its help, what adds its arguments), in the order `--help` lists them
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "diagnose": ("classify a vLLM log and rank fixes", _diagnose_arguments),
    "estimate": ("estimate the weight and KV-cache budget for a model on a GPU", _estimate_arguments),
    "preflight": ("will a `vllm serve ...` command start on a host right now?", _preflight_arguments),
    "rules": ("list rule packs or run every rule's own examples", _rules_arguments),
    "serve": ("run the HTTP diagnosis service", _serve_arguments),
    "agent": ("run the GPU host agent", _agent_arguments),
    "snapshot": ("print this host's GPU snapshot once", _snapshot_arguments),
    "bot": ("run the Slack bot (Socket Mode when SLACK_APP_TOKEN is set)", _bot_arguments),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand with its arguments; given `command`, the others by name and help alone (what
    one run parses: `vramdoc --help` and a usage error read the same, and a run pays for one table)."""
    parser: argparse.ArgumentParser = _Parser(
        prog="vramdoc", description="Diagnose vLLM GPU-memory failures and rank exact fixes."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments) in _COMMANDS.items():
        subparser = sub.add_parser(name, help=help_text)
        if command is None or name == command:
            add_arguments(subparser)
    return parser


def _imported(module_name: str, func_name: str) -> Callable[[argparse.Namespace], int]:
    """The handler, imported with the cyclic collector paused: importing a command's modules makes
    thousands of classes, functions and Structs that live as long as the process, and each collection
    meanwhile walks all of them again (about 3.5 % of the instructions of `vramdoc diagnose` on a
    short log). Frozen afterwards, they are left out of every later collection; the command itself
    runs with the collector on."""
    gc.disable()
    try:
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module_name), func_name
        )
    finally:
        gc.freeze()
        gc.enable()
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(given[0] if given and given[0] in _COMMANDS else None).parse_args(given)
    module_name, func_name = _HANDLERS[args.command].split(":")
    handler = _imported(module_name, func_name)
    try:
        code: int = handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
