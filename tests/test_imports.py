"""Each command imports what it uses: clients a configuration leaves out are never loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _loaded_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` that a fresh interpreter holds after running `code`."""
    listing = f"sorted(m for m in sys.modules if m.startswith({prefixes!r}))"
    probe = f"import sys\n{code}\nprint('modules:' + ','.join({listing}))"
    env = {"PATH": "/usr/bin:/bin", "VRAMDOC_PACK_CACHE": "off"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("modules:")]
    return [m for m in line.removeprefix("modules:").split(",") if m]


def test_a_service_without_a_sentry_dsn_never_loads_sentry_sdk() -> None:
    code = (
        "import asyncio\n"
        "from litestar.testing import TestClient\n"
        "from service.api.app import create_app\n"
        "from service.api.settings import Settings\n"
        "log = 'torch.OutOfMemoryError: CUDA out of memory'\n"
        "with TestClient(create_app(Settings())) as client:\n"
        "    assert client.post('/v1/diagnose', content=log).status_code == 200\n"
    )
    assert _loaded_after(code, ("sentry_sdk",)) == []


def test_a_catalog_estimate_loads_no_hub_client() -> None:
    code = (
        "from service.cli import main\n"
        "try:\n"
        "    main(['estimate', '--model', 'Qwen/Qwen2.5-0.5B-Instruct', '--gpu', 'L4', '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert _loaded_after(code, ("huggingface_hub.hf_api", "huggingface_hub.file_download", "httpx")) == []
