"""The words channel on sentences composed from the general forms (tests/diagnosis/prose_probes.yaml):
a stage's words in English and Chinese attached to a failure place it, what ran out decides host or
GPU, a title reads like a sentence, words alone give a low-confidence verdict, words never outweigh a
decisive line, and sentences stating no failure leave a healthy log healthy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param

Classify = Callable[..., Diagnosis]

HERE = Path(__file__).resolve().parent
HEALTHY = HERE.parent / "healthy" / "v0.10-v1-boot-plus-metrics-scrape.log"
BARE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 512.00 MiB is free."
)
# vLLM's bug-report form (.github/ISSUE_TEMPLATE/400-bug-report.yml) with nothing filled in
FORM = (
    "### Your current environment\n\n<details>\n<summary>The output of <code>python collect_env.py</code>"
    "</summary>\n\n```text\nYour output of `python collect_env.py` here\n```\n\n</details>\n\n"
    "### 🐛 Describe the bug\n\n"
)
KV_LINE = (
    "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (2.50 GiB). Based on the available "
    "memory, the estimated maximum model length is 20480. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)
STARTUP_LINE = (
    "ValueError: Free memory on device (10.2/79.19 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
    "processes."
)
LOAD_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", '
    "line 1, in load_model\n"
    "    self.model = model_loader.load_model(\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/default_loader.py", '
    "line 1, in load_weights\n"
    "    loaded_weights = model.load_weights(\n"
    f"{BARE_OOM}"
)


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    text: str
    phase: Phase
    with_: str = msgspec.field(name="with")
    known_gap: str | None = None  # what the classifier still misses: run as a non-strict xfail


def paste(probe: Probe) -> str:
    """The paste a probe's sentence stands in."""
    if probe.with_ in ("alone", "log"):  # a log: the paste is the text itself, a program's lines in it
        return probe.text
    after = {
        "bare_oom": BARE_OOM,
        "title": FORM,
        "healthy": HEALTHY.read_text(encoding="utf-8"),
        "kv_line": KV_LINE,
        "startup_line": STARTUP_LINE,
        "load_frames": LOAD_FRAMES,
    }
    return f"{probe.text}\n\n{after[probe.with_]}"


PROBES = load_probes(
    Probe,
    "prose_probes.yaml",
    "prose_probes_second.yaml",
    "prose_probes_third.yaml",
    "prose_probes_fourth.yaml",
    "prose_probes_fifth.yaml",
    "prose_probes_sixth.yaml",
    "prose_probes_seventh.yaml",
    "prose_probes_eighth.yaml",
    "prose_probes_ninth.yaml",
    "prose_probes_tenth.yaml",
    "prose_probes_eleventh.yaml",
    "prose_probes_twelfth.yaml",
    "prose_probes_twelfth_second.yaml",
    "prose_probes_thirteenth.yaml",
    "prose_probes_fourteenth.yaml",
    "prose_probes_fifteenth.yaml",
    "prose_probes_sixteenth.yaml",
    "prose_probes_seventeenth.yaml",
    "prose_probes_eighteenth.yaml",
    "prose_probes_nineteenth.yaml",
)


def test_the_probes_are_many_and_close_to_half_chinese_or_mixed() -> None:
    chinese = [  # Chinese, Japanese (kana) or Korean (Hangul), or mixed with English
        p for p in PROBES if any("\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" for ch in p.text)
    ]
    assert len(PROBES) >= 80
    assert len(chinese) >= 0.4 * len(PROBES)


def _param(probe: Probe) -> object:
    return probe_param(probe, probe.text[:40])


@pytest.mark.parametrize("probe", [_param(p) for p in PROBES])
def test_a_sentence_gives_the_phase_a_reader_gives(run_classify: Classify, probe: Probe) -> None:
    diagnosis = run_classify(paste(probe))
    assert diagnosis.phase == probe.phase, diagnosis.summary
    if probe.with_ in ("alone", "title") and probe.phase != "no_failure":
        assert diagnosis.confidence <= 0.5  # words alone are never as sure as a log line
