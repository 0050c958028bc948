"""Loading packs: the digest, the rules folder setting, and errors that point at the bad field."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.packs import PackError, load_packs

GOOD_RULE = """\
pack: scratch
description: a scratch pack
rules:
  - id: scratch-rule
    title: A scratch rule
    kind: failure
    phase: startup_budget
    severity: error
    patterns:
      - 'scratch (?P<n>\\d+) GiB'
    facts:
      n: {fact: free_gib, unit: GiB}
    examples:
      match:
        - line: 'scratch 12 GiB'
          facts: {free_gib: 12}
"""


def _write(rules: Path, text: str) -> None:
    (rules / "signatures" / "zz-scratch.yaml").write_text(text, encoding="utf-8")


def _error(rules: Path, text: str) -> PackError:
    _write(rules, text)
    with pytest.raises(PackError) as caught:
        load_packs(rules)
    return caught.value


def test_digest_is_sha256_over_all_pack_files_and_changes_with_them(rules_copy: Path) -> None:
    before = load_packs(rules_copy).digest
    assert before.startswith("sha256:") and len(before) == len("sha256:") + 64
    assert load_packs(rules_copy).digest == before
    _write(rules_copy, GOOD_RULE)
    assert load_packs(rules_copy).digest != before


def test_rules_dir_comes_from_the_environment(rules_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(rules_copy, GOOD_RULE)
    monkeypatch.setenv("VRAMDOC_RULES_DIR", str(rules_copy))
    assert "scratch-rule" in load_packs().signatures.by_id


def test_unknown_phase_names_file_rule_path_and_line(rules_copy: Path) -> None:
    error = _error(rules_copy, GOOD_RULE.replace("phase: startup_budget", "phase: exploded"))
    assert error.file == "signatures/zz-scratch.yaml"
    assert error.rule_id == "scratch-rule"
    assert error.path == "$.rules[0].phase"
    assert error.line == 7
    assert "signatures/zz-scratch.yaml:7 rule scratch-rule $.rules[0].phase" in str(error)


def test_pattern_re2_cannot_run_is_a_load_error(rules_copy: Path) -> None:
    error = _error(rules_copy, GOOD_RULE.replace("'scratch (?P<n>\\d+) GiB'", "'(a+)+\\1 (?P<n>\\d+)'"))
    assert error.path == "$.rules[0].patterns[0]"
    assert error.rule_id == "scratch-rule"
    assert error.line == 10
    assert "RE2 cannot compile" in str(error)


def test_named_group_without_a_fact_is_a_load_error(rules_copy: Path) -> None:
    error = _error(rules_copy, GOOD_RULE.replace("(?P<n>", "(?P<m>"))
    assert error.path == "$.rules[0].patterns[0]"
    assert "no entry under facts" in str(error)


def test_unknown_fact_name_is_a_load_error(rules_copy: Path) -> None:
    error = _error(rules_copy, GOOD_RULE.replace("fact: free_gib", "fact: free_gigs"))
    assert error.path is not None and error.path.startswith("$.rules[0].facts")
    assert error.rule_id == "scratch-rule"
    assert error.line == 11
    assert "unknown fact" in str(error)


def test_unknown_field_is_a_load_error(rules_copy: Path) -> None:
    error = _error(
        rules_copy, GOOD_RULE.replace("    severity: error\n", "    severity: error\n    colour: red\n")
    )
    assert error.path == "$.rules[0]"
    assert "colour" in str(error)


def test_duplicate_rule_id_across_packs_is_a_load_error(rules_copy: Path) -> None:
    error = _error(rules_copy, GOOD_RULE.replace("id: scratch-rule", "id: torch-cuda-oom"))
    assert error.rule_id == "torch-cuda-oom"
    assert "also defined in" in str(error)


def test_not_after_naming_no_rule_is_a_load_error(rules_copy: Path) -> None:
    text = GOOD_RULE.replace("    examples:", "    not_after: [no-such-rule]\n    examples:")
    error = _error(rules_copy, text)
    assert error.rule_id == "scratch-rule"
    assert "no-such-rule" in str(error)


def test_rule_without_examples_is_a_load_error(rules_copy: Path) -> None:
    text = GOOD_RULE.split("    examples:")[0] + "    examples:\n      match: []\n"
    error = _error(rules_copy, text)
    assert error.path == "$.rules[0].examples"
    assert "at least one line" in str(error)


def test_missing_rules_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="not a rules folder"):
        load_packs(tmp_path / "nowhere")
