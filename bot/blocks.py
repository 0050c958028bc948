"""Block Kit rendering of diagnoses, budgets and live GPUs (pure: wire types in, JSON-able dicts out).

Every message is built to Slack's limits (50 blocks, 3,000 characters per section, 150 per header,
10 fields); what does not fit goes into a report file the bot uploads into the thread. Every string
posted passes through `redact` once more, so no secret pasted in a log is echoed back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from bot.clients import HostFailure
from bot.slack_message import LIMITS, Block, Message, Upload, cut, limit_violations, recut
from service.redact import redact, redact_value
from service.schemas import FACT_LABELS, Budget, Diagnosis, Evidence, Facts, Fix, Preflight, Snapshot

__all__ = [
    "ACTION_FIXED_IT",
    "ACTION_RECHECK",
    "ACTION_SHOW_ALL",
    "LIMITS",
    "Message",
    "Upload",
    "limit_violations",
    "render_budget",
    "render_diagnosis",
    "render_error",
    "render_help",
    "render_snapshots",
    "scrub",
]


ACTION_SHOW_ALL = "show_all_fixes"
ACTION_RECHECK = "recheck_host"
ACTION_FIXED_IT = "fix_worked"
SHOWN_FIXES = 3
MAX_FIXES = 20

_PHASE_LABELS = {
    "startup_budget": ("Not enough free memory at startup", ":no_entry:"),
    "weights_oom": ("Out of memory loading the weights", ":package:"),
    "kv_cache_capacity": ("No room for the KV cache", ":card_file_box:"),
    "warmup_oom": ("Out of memory during warm-up", ":fire:"),
    "runtime_oom": ("Out of memory while serving", ":boom:"),
    "kv_preemption": ("Requests preempted for KV-cache space", ":hourglass:"),
    "request_too_long": ("Request longer than the model length", ":straight_ruler:"),
    "profiling_inconsistent": ("Memory changed during profiling", ":twisted_rightwards_arrows:"),
    "parallelism_config": ("Parallelism misconfigured", ":jigsaw:"),
    "quantization_config": ("Quantization mismatch", ":abacus:"),
    "dtype_unsupported": ("Dtype not supported on this GPU", ":no_entry_sign:"),
    "host_oom": ("The host ran out of RAM (not the GPU)", ":desktop_computer:"),
    "not_memory": ("An error that is not about memory", ":grey_question:"),
    "no_failure": ("No failure found", ":white_check_mark:"),
}


# --- small block builders ----------------------------------------------------------------------


def _header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": cut(text, LIMITS["header_text"])}}


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, LIMITS["section_text"])}}


def _context(*parts: str) -> Block:
    elements = [{"type": "mrkdwn", "text": cut(p, 2000)} for p in parts if p][: LIMITS["context_elements"]]
    return {"type": "context", "elements": elements}


def _code(lines: Sequence[str], limit: int = LIMITS["section_text"]) -> tuple[str, bool]:
    """A code block holding as many whole lines as fit; True when some were left out."""
    budget = limit - 8
    kept: list[str] = []
    for line in lines:
        line = line.replace("```", "'''")
        if sum(len(k) + 1 for k in kept) + len(line) + 1 > budget:
            return "```\n" + "\n".join(kept) + "\n```", True
        kept.append(line)
    return "```\n" + "\n".join(kept) + "\n```", False


def _button(text: str, action_id: str, value: str) -> Block:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": cut(text, LIMITS["button_text"])},
        "action_id": action_id,
        "value": cut(value, LIMITS["button_value"], ""),
    }


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


# --- pieces ------------------------------------------------------------------------------------


EVIDENCE_WIDTH = 640


def _evidence_lines(evidence: Iterable[Evidence], width: int = EVIDENCE_WIDTH) -> list[str]:
    return [f"{e.line:>5} | {cut(e.text.rstrip(), width)}{_repeated(e)}" for e in evidence]


def _repeated(evidence: Evidence) -> str:
    """How many identical lines (every rank, every retry) one shown line stands for."""
    return f"  (×{evidence.repeats})" if evidence.repeats > 1 else ""


def _fact_value(name: str, value: object) -> str:
    if name == "other_processes" and isinstance(value, list):
        return ", ".join(f"pid {p.pid}: {p.used_gib:.2f} GiB" for p in value)
    if isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:.0f}"
        return f"{text} GiB" if name.endswith("_gib") else text
    return str(value)


def _facts_block(facts: Facts) -> Block | None:
    raw = msgspec.structs.asdict(facts)
    fields = [
        {"type": "mrkdwn", "text": cut(f"*{label}*\n{_fact_value(name, raw[name])}", LIMITS["field_text"])}
        for name, label in FACT_LABELS.items()
        if raw.get(name) is not None
    ][: LIMITS["fields"]]
    return {"type": "section", "fields": fields} if fields else None


def _fix_block(fix: Fix, fingerprint_key: str | None = None) -> Block:
    """One fix; with a fingerprint key (team memory on) it carries a "This fixed it" button."""
    exact = "" if fix.exact else " _(estimated value)_"
    needs = f"\n_Needs: {', '.join(fix.needs)}_" if fix.needs else ""
    change = fix.change.replace("```", "'''")
    text = f"*{fix.rank}. {fix.title}*{exact}\n```{change}```\n{fix.why}\n_Trade-off: {fix.tradeoff}_{needs}"
    block = _section(text)
    if fingerprint_key is not None:
        block["accessory"] = _button("This fixed it", ACTION_FIXED_IT, f"{fingerprint_key}|{fix.id}")
    return block


def _budget_bar(budget: Budget, width: int = 40) -> list[str]:
    total = max(budget.total_gib, 1e-9)
    overhead = budget.activation_peak_gib + budget.non_torch_gib + budget.cuda_graph_gib
    kv = max(budget.available_kv_gib, 0.0)
    free = max(budget.total_gib - budget.requested_gib, 0.0)
    parts = [(budget.weights_gib, "█"), (overhead, "▓"), (kv, "▒"), (free, "░")]
    cells = [round(width * max(v, 0.0) / total) for v, _ in parts]
    while sum(cells) > width:
        cells[cells.index(max(cells))] -= 1
    bar = "".join(ch * n for n, (_, ch) in zip(cells, parts, strict=True)).ljust(width, " ")
    over = budget.weights_gib + overhead - budget.requested_gib
    lines = [
        f"[{bar}] {budget.total_gib:.1f} GiB per GPU",
        f"█ weights {_gib(budget.weights_gib)}  ▓ activations+graphs+non-torch {_gib(overhead)}",
        f"▒ KV cache {_gib(kv)} ({budget.kv_cache_tokens:,} tokens)  ░ left free {_gib(free)}",
    ]
    if over > 0:
        lines.append(f"short by {over:.1f} GiB before any KV cache")
    return lines


def _budget_blocks(budget: Budget) -> list[Block]:
    verdict = ":white_check_mark: fits" if budget.fits else ":x: does not fit"
    bar, _ = _code(_budget_bar(budget))
    parallel = "".join(
        f", {name} {size}"
        for name, size in (
            ("TP", budget.tensor_parallel_size),
            ("DP", budget.data_parallel_size),
            ("EP", budget.expert_parallel_size),
        )
        if size > 1
    )
    summary = (
        f"*Budget* ({verdict}): `{budget.model}` on {budget.gpus}× {budget.gpu}{parallel}, "
        f"{budget.dtype}, max_model_len {budget.max_model_len:,}, "
        f"gpu_memory_utilization {budget.gpu_memory_utilization:g}\n{budget.verdict}"
    )
    return [_section(summary), _section(bar)]


def _gpu_rows(snapshot: Snapshot) -> list[str]:
    rows: list[str] = []
    for gpu in snapshot.gpus:
        util = "" if gpu.utilization_pct is None else f"{gpu.utilization_pct:>3}%"
        name = cut(gpu.name.removeprefix("NVIDIA "), 18)
        rows.append(
            f"{cut(snapshot.host, 14):<14} {gpu.index:>2} {name:<18} "
            f"{gpu.used_gib:>6.1f}/{gpu.total_gib:<6.1f} {gpu.free_gib:>6.1f} {util}"
        )
        for proc in sorted(gpu.processes, key=lambda p: -(p.used_gib or 0.0))[:3]:
            label = cut(proc.name or (proc.cmdline or "?").split(" ")[0], 24)
            where = f" [{cut(proc.container, 16)}]" if proc.container else ""
            rows.append(f"{'':<17}pid {proc.pid} {label}{where} {_gib(proc.used_gib)} GiB")
    for server in snapshot.vllm:
        usage = "?" if server.kv_cache_usage is None else f"{server.kv_cache_usage:.0%}"
        rows.append(
            f"{'':<17}vLLM {cut(server.model or server.url, 28)}: KV {usage}, "
            f"running {server.requests_running}, waiting {server.requests_waiting}"
        )
    for error in snapshot.errors:
        rows.append(f"{'':<17}! {error.source}: {cut(error.reason, 80)}")
    return rows


def _snapshot_blocks(
    snapshots: Sequence[Snapshot], failures: Sequence[HostFailure]
) -> tuple[list[Block], list[str], bool]:
    header = f"{'host':<14} {'#':>2} {'GPU':<18} {'used/total GiB':<13} {'free':>6} util"
    rows = [header] + [row for snap in snapshots for row in _gpu_rows(snap)]
    blocks: list[Block] = []
    cut = False
    if snapshots:
        table, cut = _code(rows)
        blocks.append(_section(f"*Live GPUs*\n{table}"))
    if failures:
        blocks.append(_section("\n".join(f":warning: {f.reason}." for f in failures)))
    return blocks, rows, cut


def _fit(blocks: list[Block]) -> list[Block]:
    """Never more than Slack's block limit: keep the head and say what went to the report."""
    if len(blocks) <= LIMITS["blocks"]:
        return blocks
    kept = blocks[: LIMITS["blocks"] - 1]
    return [*kept, _context(f"{len(blocks) - len(kept)} more sections are in the attached report.")]


# Block Kit identifiers the bot reads back (redacting one would break a button); they hold no log text.
_UNSCRUBBED_KEYS = frozenset({"type", "action_id", "block_id", "value", "style"})


def scrub(message: Message) -> Message:
    """The message with every secret redacted: text, blocks and the report file alike."""
    upload = message.upload
    return Message(
        text=cut(redact(message.text), LIMITS["message_text"]),
        blocks=[recut(block) for block in redact_value(message.blocks, keep=_UNSCRUBBED_KEYS)],
        upload=Upload(upload.filename, upload.title, redact(upload.content)) if upload else None,
        failed=message.failed,
    )


def _message(
    text: str, blocks: list[Block], upload: Upload | None = None, *, failed: bool = False
) -> Message:
    message = Message(
        text=cut(text, LIMITS["message_text"]), blocks=_fit(blocks), upload=upload, failed=failed
    )
    return scrub(message)


# --- public renderers --------------------------------------------------------------------------


def _report(diagnosis: Diagnosis, snapshot_rows: Sequence[str]) -> str:
    parts = [
        f"# {diagnosis.phase}: {diagnosis.title}",
        "",
        diagnosis.summary,
        "",
        "## Evidence",
        *_evidence_lines(diagnosis.evidence, width=100_000),
        "",
        "## Facts",
        *(
            f"{k}: {_fact_value(k, v)}"
            for k, v in msgspec.structs.asdict(diagnosis.facts).items()
            if v is not None
        ),
        "",
        "## Fixes",
    ]
    for fix in diagnosis.fixes:
        parts += [
            f"{fix.rank}. {fix.title}",
            f"   {fix.change}",
            f"   why: {fix.why}",
            f"   trade-off: {fix.tradeoff}",
        ]
    if diagnosis.budget is not None:
        parts += ["", "## Budget", *_budget_bar(diagnosis.budget), diagnosis.budget.verdict]
    if snapshot_rows:
        parts += ["", "## Live GPUs", *snapshot_rows]
    parts += ["", f"rules {diagnosis.rules_version}"]
    return "\n".join(parts) + "\n"


def _engine_line(diagnosis: Diagnosis) -> str:
    engine = diagnosis.engine
    version = engine.version or "unknown"
    how = "assumed" if engine.assumed else "from the log"
    span = f", range {engine.range}" if engine.range else ""
    return (
        f"vLLM {version} ({how}{span}) · confidence {diagnosis.confidence:.0%} · "
        f"rules `{diagnosis.rules_version[:19]}`"
    )


def render_diagnosis(
    diagnosis: Diagnosis,
    *,
    snapshots: Sequence[Snapshot] = (),
    failures: Sequence[HostFailure] = (),
    hosts: Sequence[str] = (),
    notes: Sequence[str] = (),
    all_fixes: bool = False,
    fix_buttons: bool = False,
) -> Message:
    """The threaded answer to a log: phase, summary, decisive lines, facts, fixes, budget, GPUs.

    `fix_buttons`: team memory is on, so each fix gets a "This fixed it" button.
    """
    label, emoji = _PHASE_LABELS[diagnosis.phase]
    blocks: list[Block] = [
        _header(f"{label}: {diagnosis.title}" if diagnosis.title else label),
        _section(f"{emoji} *{diagnosis.phase}* — {diagnosis.summary}"),
    ]
    blocks += [_section(f":information_source: {note}") for note in notes]
    cut = False
    if diagnosis.evidence:
        code, cut = _code(_evidence_lines(diagnosis.evidence))
        cut = cut or any(len(e.text.rstrip()) > EVIDENCE_WIDTH for e in diagnosis.evidence)
        blocks.append(_section(f"*Decisive lines*\n{code}"))
    facts = _facts_block(diagnosis.facts)
    if facts is not None:
        blocks.append(facts)
    shown = diagnosis.fixes[:MAX_FIXES] if all_fixes else diagnosis.fixes[:SHOWN_FIXES]
    if shown:
        blocks.append(_section(f"*Fixes* ({len(shown)} of {len(diagnosis.fixes)}, best first)"))
        key = diagnosis.fingerprint.key if fix_buttons and diagnosis.fingerprint else None
        blocks += [_fix_block(fix, key) for fix in shown]
    if diagnosis.corrected_command:
        command, _ = _code([diagnosis.corrected_command])
        blocks.append(_section(f"*Corrected command* (top fix applied)\n{command}"))
    if diagnosis.budget is not None:
        blocks += _budget_blocks(diagnosis.budget)
    gpu_blocks, rows, rows_cut = _snapshot_blocks(snapshots, failures)
    blocks += gpu_blocks
    buttons = []
    if len(diagnosis.fixes) > len(shown):
        buttons.append(_button("Show all fixes", ACTION_SHOW_ALL, "all"))
    if hosts:
        buttons.append(_button("Re-check host", ACTION_RECHECK, ",".join(hosts)))
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    upload = None
    if cut or rows_cut or len(diagnosis.fixes) > MAX_FIXES:
        upload = Upload("vramdoc-report.txt", f"vramdoc report: {diagnosis.phase}", _report(diagnosis, rows))
        blocks.append(_context(":page_facing_up: The full report is attached in this thread."))
    blocks.append(_context(_engine_line(diagnosis)))
    text = f"{diagnosis.phase}: {diagnosis.summary}"
    return _message(text, blocks, upload)


def render_budget(budget: Budget, *, notes: Sequence[str] = ()) -> Message:
    """The answer to a sizing question: verdict, compact bar, the numbers behind it."""
    verdict = "Fits" if budget.fits else "Does not fit"
    blocks: list[Block] = [_header(f"{verdict}: {budget.model} on {budget.gpus}× {budget.gpu}")]
    blocks += [_section(f":information_source: {note}") for note in notes]
    if (question := _version_question(budget)) is not None:
        blocks.append(_section(f":question: {question}"))
    blocks += _budget_blocks(budget)
    numbers = {
        "Weights": f"{budget.weights_gib:.2f} GiB",
        "KV cache available": f"{budget.available_kv_gib:.2f} GiB",
        "KV cache tokens": f"{budget.kv_cache_tokens:,}",
        "Longest length that fits": f"{budget.max_model_len_fit:,}",
        "Concurrent full-length requests": f"{budget.max_concurrency:.2f}",
        "KV bytes per token": f"{budget.kv_bytes_per_token:,}",
        "Requested by vLLM": f"{budget.requested_gib:.2f} GiB",
        "Smallest utilization that fits": (
            None if budget.min_gpu_memory_utilization is None else f"{budget.min_gpu_memory_utilization:g}"
        ),
        "Smallest TP that fits": (
            None if budget.min_tensor_parallel_size is None else str(budget.min_tensor_parallel_size)
        ),
    }
    fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in numbers.items() if v is not None]
    blocks.append({"type": "section", "fields": fields[: LIMITS["fields"]]})
    if budget.notes:
        blocks.append(_section("\n".join(f"• {note}" for note in budget.notes)))
    blocks.append(_context(f"vLLM {budget.vllm_version} · sources: " + _sources(budget)))
    return _message(f"{verdict}: {budget.verdict}", blocks, failed=False)


def _version_question(budget: Budget) -> str | None:
    """One short question when the answer depends on the vLLM release the person did not name."""
    older = budget.older_release
    if older is None or older.fits == budget.fits:
        return None
    on_older, on_newest = (("fits" if fits else "does not fit") for fits in (older.fits, budget.fits))
    return (
        f"Which vLLM version runs this? It {on_older} on {older.vllm_version} and {on_newest} on "
        f"{budget.vllm_version}; reply `vllm <version>` in this thread."
    )


def _sources(budget: Budget) -> str:
    kinds = sorted({source.kind for source in budget.sources.values()})
    return ", ".join(kinds) if kinds else "formula"


def render_snapshots(
    snapshots: Sequence[Snapshot],
    failures: Sequence[HostFailure],
    *,
    hosts: Sequence[str],
    notes: Sequence[str] = (),
) -> Message:
    """Live GPUs of the named hosts, and which hosts did not answer."""
    blocks: list[Block] = [_header("Live GPUs: " + ", ".join(hosts))]
    blocks += [_section(f":information_source: {note}") for note in notes]
    gpu_blocks, rows, cut = _snapshot_blocks(snapshots, failures)
    blocks += gpu_blocks
    blocks.append(
        {"type": "actions", "elements": [_button("Re-check host", ACTION_RECHECK, ",".join(hosts))]}
    )
    captured = ", ".join(f"{s.host} at {s.captured_at}" for s in snapshots)
    if captured:
        blocks.append(_context(f"captured {captured}"))
    upload = Upload("vramdoc-gpus.txt", "Live GPUs", "\n".join(rows) + "\n") if cut else None
    failed = not snapshots
    text = "; ".join([f"{len(snapshots)} host(s) answered"] + [f.reason for f in failures])
    return _message(text, blocks, upload, failed=failed)


_OUTCOME_HEADERS = {
    "starts": ":large_green_circle: Starts",
    "rejected": ":red_circle: Rejected by vLLM's arguments",
    "refused": ":red_circle: Refused at the startup check",
    "fails": ":red_circle: Fails after loading",
}


def render_preflight(result: Preflight) -> Message:
    """The answer to "will this command start on gpu-07?": verdict, corrected command, fixes, doubts."""
    where = f" on {result.host}" if result.host else ""
    gpus = f" (GPU {', '.join(map(str, result.gpus))})" if result.gpus else ""
    blocks: list[Block] = [
        _header(f"{_OUTCOME_HEADERS[result.outcome]}{where}{gpus}"),
        _section(result.verdict),
    ]
    if result.corrected_command:
        blocks.append(_section(f"*Corrected command*\n```{result.corrected_command}```"))
    blocks += [_fix_block(fix) for fix in result.fixes]
    blocks += _budget_blocks(result.budget)
    if result.uncertain:
        blocks.append(_section("*Uncertain*\n" + "\n".join(f"• {note}" for note in result.uncertain)))
    blocks.append(_context(f"vLLM {result.vllm_version} ({result.version_source}) · pre-flight"))
    return _message(result.verdict, blocks, failed=False)


def render_error(sentence: str) -> Message:
    """One sentence telling the person what went wrong and, where possible, what to do."""
    return _message(sentence, [_section(f":x: {sentence}")], failed=True)


HELP_TEXT = """*vramdoc* diagnoses vLLM GPU-memory failures.
• Paste a log (in a code block or not) or upload a log file, mentioning me: I name the phase that failed, \
the decisive lines and ranked fixes.
• Name a host (`gpu-07`, `on gpu-07 and gpu-08`): I show its live GPUs. With a log, the snapshot goes \
into the diagnosis.
• Ask before a launch: `will \\`vllm serve Qwen/Qwen2.5-72B-Instruct -tp 4\\` start on gpu-07?` checks \
its flags for the host's vLLM and sizes it on the GPUs' free memory right now.
• Ask a sizing question: `will Llama-3.1-70B fit on 2×A100-80GB at 32k?` or `estimate qwen2.5-7b on L4`.
• Follow up in the same thread (e.g. a host name after a log): I combine it with what the thread gave.
• `/vramdoc recent` (or `recent 30`) lists the team's most frequent failures, their hosts and the fix \
that worked.
• `/vramdoc help` shows this; the message shortcut *Diagnose with vramdoc* works on anyone's message."""


def render_help(known_hosts: Sequence[str] = ()) -> Message:
    blocks = [_section(HELP_TEXT)]
    if known_hosts:
        blocks.append(_context("Known hosts: " + ", ".join(known_hosts[:100])))
    return _message("vramdoc help", blocks)
