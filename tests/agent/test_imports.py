"""The agent stays a thin shell: no Slack code, no rule packs, no diagnosis core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_agent_imports_no_slack_code_and_no_rule_packs() -> None:
    probe = (
        "import sys, service.agent.app, service.agent.command, service.agent.registry; "
        "core = ('service.packs', 'service.diagnosis', 'service.budget', 'service.fixes', 'service.core'); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('slack_bolt', 'slack_sdk', 'bot') "
        "or m.startswith(core)); "
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
