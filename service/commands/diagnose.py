"""`vramdoc diagnose [FILE|-]`: classify a pasted log in-process and print a report or the JSON.

Exit codes (DESIGN §3.7): 0 no failure found, 1 a failure diagnosed, 2 unreadable input or bad
usage (one sentence on stderr). `--json` prints the Diagnosis contract on stdout and nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from service import core
from service.core import load_rules
from service.diagnosis.normalize import decode_bytes
from service.errors import InputError, PackError
from service.fixes.render import render_fixes
from service.redacted import redacted_diagnose
from service.schemas import MAX_TOP, DiagnoseRequest, Diagnosis, Snapshot

__all__ = ["render_report", "run"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
MAX_INPUT_BYTES = 64 * 2**20


def _read_log(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    path = Path(name)
    if path.is_dir():
        raise InputError(f"{name} is a folder, not a log file.")
    with path.open("rb") as handle:
        return handle.read(MAX_INPUT_BYTES + 1)


def _read_snapshot(name: str | None) -> Snapshot | None:
    if not name:
        return None
    try:
        return msgspec.json.decode(Path(name).read_bytes(), type=Snapshot)
    except OSError as exc:
        raise InputError(f"The snapshot file {name} cannot be read ({exc.strerror or exc}).") from exc
    except msgspec.DecodeError as exc:
        raise InputError(f"The snapshot file {name} is not a vramdoc snapshot JSON ({exc}).") from exc


def _request(args: argparse.Namespace, data: bytes) -> DiagnoseRequest:
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"The log is larger than {MAX_INPUT_BYTES // 2**20} MiB; paste the part around the failure."
        )
    fields = {
        "log": decode_bytes(data),
        "model": args.model,
        "gpu": args.gpu,
        "command": args.vllm_command,
        "vllm_version": args.vllm_version,
        "snapshot": _read_snapshot(getattr(args, "snapshot", None)),
    }
    if args.top is not None:
        fields["top"] = args.top
    try:  # the request's Meta bounds --top, as it bounds the API's field
        return msgspec.convert(fields, DiagnoseRequest)
    except msgspec.ValidationError:
        raise InputError(f"--top must be between 0 and {MAX_TOP}, not {args.top}.") from None


def render_report(diagnosis: Diagnosis) -> str:
    """A readable plain-text report of a Diagnosis."""
    out = [f"{diagnosis.title}", f"phase: {diagnosis.phase}  (confidence {diagnosis.confidence:.2f})", ""]
    out.append(diagnosis.summary)
    engine = diagnosis.engine
    version = engine.version or (f"unknown ({engine.range})" if engine.range else "unknown")
    out.append(f"vLLM: {version}{' (assumed)' if engine.assumed and engine.version else ''}")
    facts = msgspec.to_builtins(diagnosis.facts)
    if facts:
        out += ["", "facts:"]
        for name, value in facts.items():
            source = diagnosis.fact_sources.get(name, "")
            shown = f"{value:.4g}" if isinstance(value, float) else value
            out.append(f"  {name:32} {shown}" + (f"   [{source}]" if source else ""))
    for flag in diagnosis.misleading:
        use = "its figure is right as read" if flag.usable else "not computed with"
        out.append(f"  ! {flag.fact} is misleading as vLLM printed it ({use}): {flag.note}")
    if diagnosis.evidence:
        out += ["", "evidence:"]
        for item in diagnosis.evidence:
            marker = "»" if item.rule else " "
            repeated = f"  (×{item.repeats} identical lines)" if item.repeats > 1 else ""
            out.append(f" {marker}{item.line:>6} | {item.text[:240]}{repeated}")
    problems = [f for f in diagnosis.findings if f.severity != "info"]
    if problems:
        out += ["", "findings:"]
        for finding in problems:
            where = f"line {finding.line}" if finding.line else "command"
            out.append(f"  [{finding.severity}] {finding.rule} ({where}): {finding.message or finding.phase}")
    if diagnosis.fixes:
        out += ["", render_fixes(diagnosis.fixes, diagnosis.corrected_command)]
    out.append("")
    out.append(f"rules {diagnosis.rules_version}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Handler of `vramdoc diagnose`."""
    try:
        data = _read_log(args.file)
        request = redacted_diagnose(_request(args, data))
        packs = load_rules()
        diagnosis = core.diagnose(request, packs)
    except FileNotFoundError:
        print(f"vramdoc diagnose: The log file {args.file} does not exist.", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(
            f"vramdoc diagnose: The log file {args.file} cannot be read ({exc.strerror or exc}).",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except InputError as exc:
        print(f"vramdoc diagnose: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PackError as exc:
        print(f"vramdoc diagnose: A rule pack is broken: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(diagnosis) + b"\n")
    else:
        print(render_report(diagnosis))
    return EXIT_OK if diagnosis.phase == "no_failure" else EXIT_FAILURE
