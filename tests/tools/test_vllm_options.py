"""tools/vllm_options.py reads a release's long options from its sources: the literals its parsers
add and the fields of the frontend argument dataclasses (generated options from 0.10 on)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from vllm_options import options_of  # noqa: E402


def test_literals_and_frontend_dataclass_fields_are_options(tmp_path: Path) -> None:
    engine = tmp_path / "vllm" / "engine"
    entry = tmp_path / "vllm" / "entrypoints" / "openai"
    engine.mkdir(parents=True)
    entry.mkdir(parents=True)
    (engine / "arg_utils.py").write_text('parser.add_argument("--max-model-len", type=int)\n')
    (entry / "cli_args.py").write_text(
        "class FrontendArgs(BaseFrontendArgs):\n    api_key: str | None = None\n    port: int = 8000\n\n"
        "def helper():\n    name: str = 'x'\n"
    )
    assert options_of(tmp_path) == {"--max-model-len", "--api-key", "--port"}
