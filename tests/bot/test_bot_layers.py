"""The bot knows only wire types: importing it must not load the diagnosis core or the rule packs."""

from __future__ import annotations

import json
import subprocess
import sys

ALLOWED_SERVICE_MODULES = {
    "service",
    "service.env_settings",
    "service.errors",
    "service.quantities",
    "service.redact",
    "service.redis_link",
    "service.registry",
    "service.schemas",
    "service.serving",
    "service.team_memory",
}


def test_importing_bot_app_loads_no_core_module() -> None:
    probe = (
        "import json, sys; import bot.app, bot.command; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'service' or m.startswith('service.'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "service.schemas" in loaded  # the probe saw the bot's real imports
    assert loaded <= ALLOWED_SERVICE_MODULES, sorted(loaded - ALLOWED_SERVICE_MODULES)
