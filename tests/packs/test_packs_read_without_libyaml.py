"""The pack loader falls back to PyYAML's pure-Python loader where PyYAML was built without libyaml;
libyaml accepts a few forms the pure loader refuses (a plain `word?` in a flow list), so every pack
must read the same under both."""

from pathlib import Path

import pytest
import yaml

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.mark.parametrize("path", sorted(RULES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(RULES)))
def test_every_rule_file_reads_the_same_with_the_pure_python_loader(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    pure = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 - SafeLoader is the safe one
    if hasattr(yaml, "CSafeLoader"):
        assert pure == yaml.load(text, Loader=yaml.CSafeLoader)  # noqa: S506
