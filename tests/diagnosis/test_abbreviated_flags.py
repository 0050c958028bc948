"""vLLM's parsers keep argparse's `allow_abbrev` (no release passes False: tools/vllm_options.py), so
an unambiguous prefix of a long option is that option, judged against every option of the release
(rules/fixes/options.json), not only the flags vramdoc knows."""

from __future__ import annotations

from service.diagnosis.command import parse_command
from service.packs import RulePacks


def test_an_unambiguous_prefix_is_the_option_it_abbreviates(packs: RulePacks) -> None:
    parsed = parse_command("vllm serve Qwen/Qwen2.5-7B --gpu-memory-util=0.9 --max-model 8192", packs.fixes)
    assert parsed.facts["gpu_memory_utilization"] == 0.9
    assert parsed.facts["max_model_len"] == 8192


def test_a_prefix_of_two_options_is_read_as_neither(packs: RulePacks) -> None:
    # --max-num-seqs and --max-num-batched-tokens share `--max-num`
    parsed = parse_command("vllm serve Qwen/Qwen2.5-7B --max-num 8", packs.fixes)
    assert "max_num_seqs" not in parsed.facts and "max_num_batched_tokens" not in parsed.facts


def test_a_prefix_is_judged_by_the_options_of_the_stated_release(packs: RulePacks) -> None:
    # --device-memory-utilization came in 0.31: before it `--device-memory` is no option's prefix
    fixes = packs.fixes
    assert fixes.expand("--device-memory", "0.33.0") == "--device-memory-utilization"
    assert fixes.expand("--device-memory", "0.20.2") == "--device-memory"


def test_an_option_of_its_own_is_never_expanded(packs: RulePacks) -> None:
    assert packs.fixes.expand("--model") == "--model"
    assert packs.fixes.expand("-tp") == "-tp"
