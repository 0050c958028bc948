"""Evidence weights: what each kind of clue is worth when a failure is placed in a stage.

The table lives in `rules/evidence.yaml` (one home; DESIGN §2 "weighted evidence"); this module
only decodes and checks it. `service.diagnosis.placement` gathers the clues and combines them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from service.packs.loader import load_yaml_file

__all__ = ["CLUE_KINDS", "ClueKind", "EvidenceWeights", "InUseMargins", "load_evidence"]

ClueKind = Literal[
    "frame",
    "neutral_frame",
    "table_frame",
    "construction_frame",
    "inner_frame",
    "marker",
    "superseded_marker",
    "other_marker",
    "frame_after",
    "budget",
    "budget_room",
    "in_use",
    "wrapper",
    "message_sign",
    "prose",
    "prose_context",
    "marker_after",
    "marker_after_log",
    "rule",
    "template_fragment",
    "cut_frame",
    "cut_stage_frame",
    "cut_after_stage_end",
    "error_line",
    "stated_error",
    "stated_failure",
    "cause_words",
    "remedy",
    "remedy_failed",
]
CLUE_KINDS: tuple[ClueKind, ...] = ClueKind.__args__  # type: ignore[attr-defined]


class InUseMargins(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Where the failing process's in-use memory reads as a stage, against the budget's weights and
    KV pool per GPU (shares in (0, 1))."""

    below_weights: float
    pool_share: float

    def __post_init__(self) -> None:
        for name in ("below_weights", "pool_share"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1)")


class EvidenceWeights(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Weight per clue kind in (0, 1), and how the runner-up and the bounds shape the confidence."""

    weights: dict[ClueKind, float]
    in_use_margins: InUseMargins
    # a host memory limit the paste states holding this many times what vLLM keeps in host RAM
    # (the checkpoint read while loading, CPU offload, V0's swap space): memory that ran out was not
    # the host's (service/diagnosis/host_limit.py)
    host_plenty: float
    # library folders whose code runs in every stage that runs the model (`torch/_dynamo/`): a frame of
    # one weighs `neutral_frame`
    neutral_libraries: tuple[str, ...] = ()
    contest: float
    floor: float
    ceiling: float

    def __post_init__(self) -> None:
        missing = [kind for kind in CLUE_KINDS if kind not in self.weights]
        if missing:
            raise ValueError(f"weights miss {', '.join(missing)}")
        for kind, weight in self.weights.items():
            if not 0 < weight < 1:
                raise ValueError(f"weight of {kind} must be in (0, 1), not {weight}")
        for folder in self.neutral_libraries:
            if folder.startswith("/") or not folder.endswith(("/", ".py")):
                raise ValueError(f"neutral library {folder!r} must be a relative folder or module path")
        if self.host_plenty < 1:
            raise ValueError("host_plenty must be at least 1 (a limit holding what the host keeps)")
        if not 0 <= self.contest <= 1:
            raise ValueError("contest must be in [0, 1]")
        if not 0 < self.floor <= self.ceiling < 1:
            raise ValueError("need 0 < floor <= ceiling < 1")


def load_evidence(rules_dir: Path) -> EvidenceWeights:
    """Decode `rules_dir/evidence.yaml`; a bad field raises PackError with its line."""
    return load_yaml_file(rules_dir / "evidence.yaml", EvidenceWeights, root=rules_dir)
