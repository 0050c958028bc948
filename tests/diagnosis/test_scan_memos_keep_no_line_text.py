"""The scan's process-wide memos (a line's reading, a (rule, text) match, a line's prefixes) outlive
the request that pasted the line: they are keyed by the line's digest and keep where its message
lies, so no text a paste held stays in them once its request is answered."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from service.diagnosis import normalize
from service.packs import RulePacks
from service.schemas import Diagnosis

MARK = "private-marker-7Qz"
LOG = "\n".join(
    [
        f"(EngineCore_DP0 pid=412) INFO 01-02 03:04:05 core.py:58] Loading model /models/{MARK}/llama",
        "(EngineCore_DP0 pid=412) ERROR 01-02 03:04:09 core.py:700] torch.OutOfMemoryError: CUDA out of "
        f"memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.10 GiB "
        f"is free. Of the allocated memory 70.00 GiB is allocated by PyTorch ({MARK})",
        f"(EngineCore_DP0 pid=412) ERROR 01-02 03:04:09 core.py:701] RuntimeError: {MARK} failed",
    ]
)


def _texts(value: object, depth: int = 0) -> Iterator[str | bytes]:
    """Every str and bytes inside a memo's keys and values (containers walked, rules skipped)."""
    if isinstance(value, str | bytes):
        yield value
    elif depth < 6 and isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(key, depth + 1)
            yield from _texts(item, depth + 1)
    elif depth < 6 and isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _texts(item, depth + 1)


def _holding_mark(memos: dict[str, object]) -> list[str]:
    found = []
    for name, memo in memos.items():
        if any(MARK in (t if isinstance(t, str) else t.decode("utf-8", "replace")) for t in _texts(memo)):
            found.append(name)
    return found


def test_the_scan_memos_hold_no_text_of_a_scanned_line(
    packs: RulePacks, run_classify: Callable[..., Diagnosis]
) -> None:
    diagnosis = run_classify(LOG)
    assert diagnosis.phase != "no_failure"  # the lines were read, so remembered
    index = packs.signatures.eager
    assert index.memo.get("lines")  # the memo the test reads is the one the scan filled
    memos: dict[str, object] = {"lines": index.memo["lines"], "rules": index.memo.get("rules", {})}
    memos["prefixes"] = normalize._SPLITS
    assert _holding_mark(memos) == []


def test_a_line_read_from_the_memo_has_the_message_of_its_own_text() -> None:
    line = "(EngineCore_DP0 pid=412) ERROR 01-02 03:04:09 core.py:700] RuntimeError: boom  **"
    assert normalize.split_prefixes(line) == ("EngineCore_DP0 pid=412", "ERROR", "RuntimeError: boom")
    source, level, start, end = normalize.split_spans(line)
    assert (source, level, line[start:end]) == normalize.split_prefixes(line)
