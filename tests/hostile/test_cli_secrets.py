"""The CLI echoes no secret it was given: a token in a command, a hint, a host name or a draft model
comes back redacted in the verdict, the corrected command and every one-sentence error (CI logs keep
what `vramdoc preflight` prints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import main

HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
API_KEY = "sk-" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _leaks(text: str) -> list[str]:
    """Runs of 8 secret characters that survived (the hypothesis suite's bound)."""
    return [s[i : i + 8] for s in (HF_TOKEN, API_KEY) for i in range(len(s) - 7) if s[i : i + 8] in text]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (
            [
                "preflight",
                f"vllm serve {MODEL} --hf-token {HF_TOKEN} --api-key {API_KEY} --max-model-len 999999",
                "--gpu",
                "L4",
                "--json",
            ],
            1,
        ),
        (["preflight", f"vllm serve {MODEL} --hf-token {HF_TOKEN} --max-model-len 999999", "--gpu", "L4"], 1),
        (["preflight", f"vllm serve {MODEL} --hf-token {HF_TOKEN} -tp 0", "--gpu", "L4"], 2),
        (["preflight", f"vllm serve {MODEL}", "--gpu", f"RTX {HF_TOKEN}"], 2),
        (["preflight", f"vllm serve {MODEL}", "--gpu", "L4", "--vllm-version", HF_TOKEN], 2),
        (["preflight", f"vllm serve {HF_TOKEN}", "--gpu", "L4"], 2),
        (["estimate", "--model", HF_TOKEN, "--gpu", "L4"], 2),
        (
            [
                "estimate",
                "--model",
                MODEL,
                "--gpu",
                "L4",
                "--speculative-config",
                f'{{"model": "{HF_TOKEN}"}}',
            ],
            2,
        ),
    ],
    ids=[
        "preflight-json",
        "preflight-text",
        "preflight-invalid",
        "gpu-hint",
        "version-hint",
        "model-token",
        "estimate-model",
        "estimate-draft-model",
    ],
)
def test_the_cli_echoes_no_secret_it_was_given(
    argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert not _leaks(out + err)
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err


def test_a_diagnosis_echoes_no_secret_from_its_log_hints_or_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        f"INFO vllm serve {MODEL} --hf-token {HF_TOKEN}\n"
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`\n"
    )
    argv = ["diagnose", str(log), "--gpu", HF_TOKEN, "--command", f"vllm serve {MODEL} --api-key {API_KEY}"]

    assert main([*argv, "--json"]) == 1
    assert main(argv) == 1

    out, err = capsys.readouterr()
    assert not _leaks(out + err)
