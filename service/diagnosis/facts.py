"""Collecting facts (DESIGN §3.2) from hits, the pasted command and the request, each with its source.

Precedence: for what failed (sizes, lengths, counts) the decisive lines first, then the other lines
in log order; for what the run is (model, dtype, parallelism, weights: FIRST_STATED) the first
line stating it; then a command found in the log, then a flag stated anywhere else in the paste
(a script line, a YAML key, a sentence), then the caller's request and command.

The vLLM version is explicit when a line states it; otherwise each matched wording's release range
narrows where the log can be from ("models's" up to 0.21, the estimated-length sentence from 0.8.5).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from service.diagnosis.command import FlagIssue, ParsedCommand, parse_command
from service.diagnosis.normalize import MEMO_LINES
from service.diagnosis.scan import Hit
from service.diagnosis.settings import StatedSetting
from service.packs.derived import per_pack
from service.packs.fixes import FixPack
from service.packs.signatures import SignatureRule
from service.processes import failing_process
from service.schemas import Engine, Facts, OtherProcess

__all__ = ["FIRST_STATED", "FactSet", "collect_facts", "infer_engine"]

# Facts about the run itself (configuration, weights): the first line stating them wins, since a
# failure line restating them (e.g. V0's profiling summary) rounds them. "command" is no fact.
FIRST_STATED = frozenset(
    {
        "command",
        "vllm_version",
        "gpu_name",
        "model",
        "dtype",
        "quantization",
        "kv_cache_dtype",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "enforce_eager",
        "model_weights_gib",
        "compute_capability",
        "num_attention_heads",
    }
)


@dataclass(slots=True)
class FactSet:
    """Facts by name with where each came from ("line 12", "command", "request"), first set wins."""

    values: dict[str, object] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    flag_issues: list[tuple[FlagIssue, int | None]] = field(default_factory=list)

    def add(self, name: str, value: object, source: str) -> None:
        if name not in self.values and value is not None:
            self.values[name] = value
            self.sources[name] = source

    def to_facts(self) -> Facts:
        """The typed Facts; a value that does not fit its field is dropped, never raised."""
        try:
            return msgspec.convert(self.values, Facts)
        except msgspec.ValidationError:
            kept: dict[str, object] = {}
            for name, value in self.values.items():
                try:
                    msgspec.convert({**kept, name: value}, Facts)
                except msgspec.ValidationError:
                    self.sources.pop(name, None)
                    continue
                kept[name] = value
            return msgspec.convert(kept, Facts)


def _command_hits(hits: list[Hit]) -> list[Hit]:
    return [h for h in hits if "command" in h.facts]


@per_pack()
def _parsed_commands(history: FixPack) -> dict[tuple[str, str | None], ParsedCommand]:
    return {}


def _parsed(text: str, history: FixPack, version: str | None) -> ParsedCommand:
    """parse_command of a pasted command, once per process for the same text and version: a paste
    is read for facts more than once (the budget's hint, the answer), and the same command is
    pasted again on every rank and in later requests. The result is shared: it is only read."""
    memo = _parsed_commands(history)
    key = (text, version)
    parsed = memo.get(key)
    if parsed is None:
        if len(memo) >= MEMO_LINES:
            memo.clear()
        parsed = memo[key] = parse_command(text, history, version)
    return parsed


def collect_facts(
    hits: list[Hit],
    decisive_lines: set[int],
    request_facts: dict[str, object],
    request_command: str | None,
    version: str | None,
    history: FixPack,
    settings: Iterable[StatedSetting] = (),
) -> FactSet:
    """Merge facts by precedence; pasted commands also yield flag findings for `version`. `settings`
    (flags stated outside a recognised command: service/diagnosis/settings.py) fill what the lines
    and commands left, first line first."""
    found = FactSet()
    ordered = sorted(hits, key=lambda h: (h.line.number not in decisive_lines, h.line.number))
    for hit in ordered:  # what failed: the decisive lines' numbers first
        for name, value in hit.facts.items():
            if name not in FIRST_STATED:
                found.add(name, value, f"line {hit.line.number}")
    for hit in hits:  # what the run is: the first line that states it
        for name, value in hit.facts.items():
            if name in FIRST_STATED and name != "command":
                found.add(name, value, f"line {hit.line.number}")
    for hit in _command_hits(hits):
        parsed = _parsed(str(hit.facts["command"]), history, version)
        for name, value in parsed.facts.items():
            found.add(name, value, f"line {hit.line.number}")
        found.flag_issues.extend((issue, hit.line.number) for issue in parsed.issues)
    for setting in settings:
        found.add(setting.fact, setting.value, f"line {setting.line}")
    for name, value in request_facts.items():
        found.add(name, value, "request")
    if request_command:
        parsed = _parsed(request_command, history, version)
        for name, value in parsed.facts.items():
            found.add(name, value, "command")
        found.flag_issues.extend((issue, None) for issue in parsed.issues)
    _own_process(found)
    return found


def _own_process(found: FactSet) -> None:
    """The failing process's own use when PyTorch listed it as "Process N has X memory in use" and
    printed no "this process has" sentence (service.processes: containers report host PIDs)."""
    values = found.values
    listed = values.get("other_processes")
    allocated = values.get("torch_allocated_gib")
    if "process_in_use_gib" in values or not isinstance(listed, list) or not isinstance(allocated, float):
        return
    unallocated = values.get("torch_reserved_unallocated_gib")
    processes = [p for p in listed if isinstance(p, OtherProcess)]
    own = failing_process(processes, allocated, unallocated if isinstance(unallocated, float) else None)
    if own is not None:
        found.add("process_in_use_gib", own.used_gib, found.sources.get("other_processes", ""))


def _range_text(low: tuple[int, int, int], high: tuple[int, int, int]) -> str | None:
    parts = []
    if low != (0, 0, 0):
        parts.append(f">={low[0]}.{low[1]}.{low[2]}")
    if high[0] < 999:
        parts.append(f"<={high[0]}.{high[1]}" + ("" if high[2] == 999 else f".{high[2]}"))
    return ",".join(parts) or None


def infer_engine(rules: list[SignatureRule], stated: str | None, requested: str | None) -> Engine:
    """The vLLM version: stated by the log, else given by the caller, else a range from wording."""
    if stated:
        return Engine(version=stated, assumed=False)
    if requested:
        return Engine(version=requested, assumed=False)
    low, high = (0, 0, 0), (999, 0, 0)
    for rule in rules:
        versions = rule.versions
        if versions.is_open:
            continue
        rule_low, rule_high = versions.inclusive()
        new_low, new_high = max(low, rule_low), min(high, rule_high)
        if new_low <= new_high:  # a contradicting rule (wrong range or mixed logs) is ignored
            low, high = new_low, new_high
    return Engine(version=None, assumed=True, range=_range_text(low, high))
