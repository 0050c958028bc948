"""Command-line usage errors: exit 2 and one sentence on stderr, never argparse's usage dump."""

from __future__ import annotations

import pytest

from service.cli import main


@pytest.mark.parametrize(
    ("argv", "prog", "message"),
    [
        ([], "vramdoc", "The following arguments are required: COMMAND"),
        (["nosuch"], "vramdoc", "invalid choice: 'nosuch'"),
        (["estimate", "--gpu-memory-utilization", "abc"], "vramdoc estimate", "invalid float value: 'abc'"),
        (["diagnose", "--top", "x"], "vramdoc diagnose", "invalid int value: 'x'"),
        (["rules"], "vramdoc rules", "required: action"),
        (["snapshot", "--bogus"], "vramdoc", "Unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2_with_one_sentence_naming_the_help(
    argv: list[str], prog: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{prog}: ") and message in captured.err
    assert captured.err.endswith(f"(see `{prog} --help`).\n")
    assert captured.err.count("\n") == 1
