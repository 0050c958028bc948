"""Requests with their secrets scrubbed before they are sized, cached, stored or echoed.

A token pasted into a log, a command (`--hf-token`, `--api-key`), a hint or a snapshot's process
command line comes back in evidence, facts, a corrected command or a 4xx sentence; the HTTP service
and the CLI scrub the request once, on the way in, with the same rule.
"""

from __future__ import annotations

import msgspec

from service.redact import redact
from service.schemas import DiagnoseRequest, EstimateRequest, PreflightRequest, Snapshot

__all__ = [
    "redacted_diagnose",
    "redacted_estimate",
    "redacted_hint",
    "redacted_preflight",
    "redacted_snapshot",
]


def redacted_hint(hint: str | None) -> str | None:
    """A free-text name (model, GPU, version, host) with any secret in it replaced."""
    return redact(hint) if hint else hint


def redacted_snapshot(snapshot: Snapshot | None) -> Snapshot | None:
    """The snapshot with its processes' command lines scrubbed (they carry launch flags)."""
    if snapshot is None:
        return None
    gpus = [
        msgspec.structs.replace(
            gpu,
            processes=[msgspec.structs.replace(p, cmdline=redacted_hint(p.cmdline)) for p in gpu.processes],
        )
        for gpu in snapshot.gpus
    ]
    return msgspec.structs.replace(snapshot, gpus=gpus)


def redacted_diagnose(req: DiagnoseRequest) -> DiagnoseRequest:
    """The log, the hints, the command and the snapshot, scrubbed."""
    return msgspec.structs.replace(
        req,
        log=redact(req.log),
        model=redacted_hint(req.model),
        gpu=redacted_hint(req.gpu),
        command=redacted_hint(req.command),
        vllm_version=redacted_hint(req.vllm_version),
        snapshot=redacted_snapshot(req.snapshot),
    )


def redacted_estimate(req: EstimateRequest) -> EstimateRequest:
    """An estimate's names (the draft model's too) are echoed in its answer and in 422 details."""
    speculative = req.speculative_config
    if speculative is not None and speculative.model:
        speculative = msgspec.structs.replace(speculative, model=redacted_hint(speculative.model))
    return msgspec.structs.replace(
        req,
        model=redacted_hint(req.model),
        gpu=redacted_hint(req.gpu),
        vllm_version=redacted_hint(req.vllm_version),
        speculative_config=speculative,
    )


def redacted_preflight(req: PreflightRequest) -> PreflightRequest:
    """The command is echoed (corrected) in the answer: its tokens go first, and the snapshot's."""
    return msgspec.structs.replace(
        req,
        command=redact(req.command),
        model=redacted_hint(req.model),
        gpu=redacted_hint(req.gpu),
        vllm_version=redacted_hint(req.vllm_version),
        snapshot=redacted_snapshot(req.snapshot),
    )
