"""The core imports no web framework, Slack, Redis or HTTP client (DESIGN §2, STYLE)."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("litestar", "slack_bolt", "slack_sdk", "redis", "httpx", "aiohttp", "uvicorn", "sentry_sdk")

SCRIPT = """
import sys
import service.core, service.diagnosis, service.packs, service.redact
from service.core import classify
from service.packs import load_packs
from service.schemas import DiagnoseRequest
classify(DiagnoseRequest(log="torch.OutOfMemoryError: CUDA out of memory."), load_packs())
print(",".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_core_runs_without_importing_any_shell_dependency() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    loaded = set(result.stdout.strip().split(","))
    assert "service" in loaded
    assert not loaded & set(FORBIDDEN)
