"""vLLM prints each message at one level (the inventory's `level`, from its source), and its logger
prefix shows the level a line was printed at. A start-up warning is no fragment of a message vLLM
raises, and a line that is the warning-level printing of a wording (one that another era raised)
does not outrank an error elsewhere in the paste."""

from __future__ import annotations

from service.diagnosis import classify_text
from service.diagnosis.fragments import loudest_printing
from service.diagnosis.normalize import Document
from service.packs import RulePacks
from service.packs.inventory import template_regex

# vllm/engine/arg_utils.py _raise_or_fallback (0.8.x), logger.warning: printed on every V0 fallback
FALLBACK = (
    "--disable-async-output-proc is not supported by the V1 Engine. Falling back to V0. We recommend "
    "to remove --disable-async-output-proc from your config in favor of the V1 Engine."
)
# vllm/executor/ray_utils.py _wait_until_pg_ready: raised as ValueError in 0.5.5-0.6.4, logged as a
# warning (while it keeps waiting) from 0.6.6 on
PLACEMENT = "The number of required GPUs exceeds the total number of available GPUs in the placement group."
# vllm/worker/worker.py raise_if_cache_size_invalid (0.4.3-0.10.2)
NO_BLOCKS = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine."
)


def test_a_startup_warning_is_no_fragment_of_a_message_vllm_raises(packs: RulePacks) -> None:
    log = f"WARNING 04-24 20:02:01 [arg_utils.py:1731] {FALLBACK}\n"
    diagnosis = classify_text(log, packs)
    assert diagnosis.phase == "no_failure"


def test_a_warning_printing_of_a_once_raised_wording_does_not_outrank_an_error(packs: RulePacks) -> None:
    log = (
        f"WARNING 03-18 10:00:10 [ray_utils.py:320] {PLACEMENT}\n"
        f"ERROR 03-18 10:05:00 [core.py:343] {NO_BLOCKS}\n"
    )
    assert classify_text(log, packs).phase == "kv_cache_capacity"


def test_the_same_wording_as_an_exception_still_decides(packs: RulePacks) -> None:
    log = f"ValueError: {PLACEMENT}\nERROR 03-18 10:05:00 [core.py:343] {NO_BLOCKS}\n"
    assert classify_text(log, packs).phase == "parallelism_config"


def test_a_lone_placement_warning_still_names_the_layout(packs: RulePacks) -> None:
    log = f"WARNING 03-18 10:00:10 [ray_utils.py:320] {PLACEMENT}\n"
    assert classify_text(log, packs).phase == "parallelism_config"


def test_a_logger_prefix_picks_the_eras_printing_of_a_wording(packs: RulePacks) -> None:
    levels = packs.fragments.printed_at("vllm-world-size-exceeds-gpus", PLACEMENT)
    assert {"raise", "warning"} <= levels
    warned = Document(f"WARNING 03-18 10:00:10 [ray_utils.py:320] {PLACEMENT}").line(1)
    raised = Document(f"ValueError: {PLACEMENT}").line(1)
    assert loudest_printing(warned, levels) == 2
    assert loudest_printing(raised, levels) == 3


def test_the_levels_a_line_shows_are_its_templates_as_re_reads_them(packs: RulePacks) -> None:
    # printed_at reads a rule's templates as one RE2 set; each template's regex (`template_regex`,
    # lazy holes) as `re` searches it must say the same of every template's own first line
    table = packs.fragments.table
    rules = sorted({t.rule for t in table.templates if t.rule})
    assert rules
    for rule in rules:
        templates = [t for t in table.templates if t.rule == rule]
        regexes = [(template_regex(t.text), t.level) for t in templates]
        firsts = {t.text.split("\n", 1)[0] for t in templates}
        for line in firsts | {f"ERROR x {first} (y)" for first in firsts}:
            expected = frozenset(level for regex, level in regexes if regex.search(line))
            assert packs.fragments.printed_at(rule, line) == expected, (rule, line)
