"""What a text alone yields is worked out once per process: a sentence's reading, a pasted command's
parse, a multi-line record's reading come back from memory when the same text is pasted again (on
every rank, in a later request), and the passes that look at a repeated paste look at its distinct
lines."""

from __future__ import annotations

import uuid

import pytest

from service.core import classify
from service.diagnosis import continued, facts, prose
from service.diagnosis.normalize import Document
from service.diagnosis.prose import read_prose, shown_not_run
from service.diagnosis.scan import scan_document
from service.packs import RulePacks
from service.schemas import DiagnoseRequest

KV = (
    "ValueError: To serve at least one request with the model's max seq len (32768), (4.26 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (2.50 GiB). Based on the available "
    "memory, the estimated maximum model length is 21952. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Replace `module.name` with a wrapper counting its calls; the count is the list's length."""
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_sentence_pasted_in_a_later_paste_is_read_once(
    packs: RulePacks, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counting(monkeypatch, prose, "_read_line")
    sentence = f"it crashed with an out of memory error while loading the weights of model {uuid.uuid4().hex}"
    first = read_prose(Document(f"{sentence}\n{KV}"), packs.prose)
    read = len(calls)
    again = read_prose(Document(f"some other line\n\n{sentence}"), packs.prose)
    assert read >= 1 and len(calls) == read
    assert [(c.stage, c.text) for c in first] == [(c.stage, c.text) for c in again]
    assert [c.line for c in first] == [1] and [c.line for c in again] == [3]


def test_a_command_pasted_again_is_parsed_once(packs: RulePacks, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch, facts, "parse_command")
    command = f"vllm serve org/model-{uuid.uuid4().hex} --max-model-len 32768 --gpu-memory-utilization 0.9"
    answers = [classify(DiagnoseRequest(log=f"{command}\n{KV}"), packs) for _ in range(3)]
    assert len(calls) == 1
    assert {a.facts.max_model_len for a in answers} == {32768}
    assert {a.facts.gpu_memory_utilization for a in answers} == {0.9}


def test_a_record_pasted_in_a_later_paste_is_read_once(
    packs: RulePacks, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counting(monkeypatch, continued, "_outcome")
    # a message a terminal hard-wrapped over three lines, with a token no other test pastes
    wrapped = f"{KV[:90]}\n{KV[90:200]}\n{KV[200:]} ({uuid.uuid4().hex})"
    found = []
    for _ in range(2):
        doc = Document(wrapped)
        hits = scan_document(doc, packs.signatures.eager).hits
        found.append([h.facts for h in continued.continue_hits(doc, packs.signatures.eager, hits)])
    assert len(calls) == 1
    assert found[0] == found[1]
    assert any(f.get("estimated_max_model_len") == 21952 for f in found[0])


def test_a_diff_hunk_in_a_repeated_paste_is_still_no_run(packs: RulePacks) -> None:
    hunk = "@@ -231,4 +231,6 @@ def _check_if_gpu_supports_dtype(dtype):"
    oom = "(EngineCore_DP0 pid=210) ERROR 05-12 10:11:12 [core.py:700] CUDA out of memory."
    lines = [oom] * 5000
    lines += ["", hunk, "             raise ValueError(", "+                f'use --dtype=half.'"]
    doc = Document("\n".join(lines))
    scan_document(doc, packs.signatures.eager)
    assert doc.repeating is True
    assert shown_not_run(doc, packs.prose) == {5003, 5004}
