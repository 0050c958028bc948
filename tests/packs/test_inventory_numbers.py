"""Every count and ratio vLLM prints in a wording the rules match comes out as a fact, so a wording
nobody pasted yet is already read (memory sizes: test_inventory_figures.py).

Each inventory template with rules is rendered with a distinct number in every `int` and `float`
hole (size holes take the inventory's placeholder) and classified; each number must be one of the
facts unless the words just before its hole say it counts something no DESIGN §3.2 fact holds
(a device index, a process id, the world size, ...): that list, with why, is below.
"""

from __future__ import annotations

import re

import msgspec
import pytest

from service.diagnosis import classify_text
from service.packs import RulePacks, default_rules_dir
from service.packs.inventory import PLACEHOLDER, Template, load_inventories, pieces

# what the words before a hole say it counts (RE2-free `re`, matched at the end of those words)
# -> why no fact holds it
NOT_A_FACT: dict[str, str] = {
    r"\b(?:GPU|NPU|XPU|[Nn]ode|Engine|id|device) \(?$|rank=$": "a device, node, engine or rank index",
    r"^\d*$|^ Engines: ": "a prefix vLLM prints before the message (an index)",
    r"\bProcess $": "a process id: other_processes holds it with the process's size",
    r"\b(?:[Ww]orld size|world_size|world_size =) \(?$|world size does not match [\w.]+ \($|^ vs\. $": (
        "the world size (tp x pp x dp), which no single fact holds"
    ),
    r"available GPUs \($|number of GPUs \($|max local gpu count \($|[Dd]evices: $|resources: $"
    r"|allocate $|only created $": ("GPUs or Ray resources the node has, not a setting"),
    r"hidden layers \($": "the model's layer count",
    r"(?:kv_heads|kv heads|KV heads|key_value_heads)\b.*[=( ]$"
    r"|sink heads \($|ETP=$|\b(?:total_)?num_heads[ =]$": (
        "one layer's head counts (key-value, sink, a vision tower's): num_attention_heads is read"
        " where vLLM names the model's"
    ),
    r"(?:input|output)_size_per_partition ?= ?$|group_size ?= ?$|min_thread_[kn] ?= ?$": (
        "a quantized layer's shard shape"
    ),
    r"sparse_indexer_num_heads=$|index_tp_size=$|\boutput_size=$": (
        "a sub-module's own shape and TP group (Step5's sparse indexer), not the model's heads or TP size"
    ),
    r"Requests longer than $": "the fitted length again, read as estimated_max_model_len",
    r"\bcode=$|\(code=$|\(error $": "a CUDA error code",
    r"Sequence group $|Failing the request $|preempted by $|task=$": "a request id or mode",
    r"lookahead slots \($": "speculative decoding's lookahead slots",
    r"CPU blocks: $": "CPU swap blocks (V0 swap space), not the GPU KV cache",
    r"Mamba cache blocks \($": "Mamba state blocks, not attention KV blocks",
    r"num_gpu_blocks=$": "the number before the override replaces it (the override is the fact)",
    r"with $": "dummy requests of a warm-up",
    r" at $| of $|\) \($|GiB \($": "a share or part of a figure stated elsewhere",
    r"(?:takes|and) $": "seconds",
    r"placement group $|bundles $": "a Ray placement group",
    r"derived max_model_len \($|or model_max_length=$": (
        "the config key vLLM derived the limit from; context_limit is the value after `=`"
    ),
    r"[Ii]nitial (?:free|used) memory $|current(?:ly used)? (?:free )?memory $": (
        "profiling's before/after readings, stated as sizes elsewhere"
    ),
    r"memory_usage_post_profile=$": "usage after profiling, which no fact holds",
    r"ESTIMATE_CUDAGRAPHS=$|default in v0\.$": "an environment switch or a release number",
    r"equivalent to --gpu-memory-utilization=$": (
        "the utilization that would be equivalent, not the one set"
    ),
    r"\bto (?:at most )?$|cluster has $|--kv-cache-memory=$": "vLLM's suggestion, not the setting",
    r"cumulative_preemption=$": "a running count of preemptions",
    r"kv cache memory in use is $": "bytes the KV cache holds, stated as available_kv_cache_gib",
    r"tokens per request: $": "max_concurrency is read from the same line's `x` figure",
    # the OpenAI server's request-length refusals (OpenAIServing._validate_input, renderers/params.py):
    # requested_tokens holds the request's total, context_limit the limit
    r"(?:you|and) requested $": "the output tokens a request asked for (max_tokens), a part of the total",
    r"prompt contains (?:at least )?$|and your request has $|tokens \($| in the messages, $| [-+=>] $": (
        "the prompt's or the completion's share of the requested total, or the total restated as a sum"
    ),
    r"(?:more than|upper bound for|at most|You passed|maximum input length of) $": (
        "the character bound vLLM checks before tokenizing, and the input it leaves room for"
    ),
    r"in the input for $": "the operation's name (score, classification), a text hole",
    # the scale-out derender's bounds on a remote engine's answer (scale_out/derender/serving.py)
    r"^token_ids length \($|\) in choice $": "the tokens of one choice of an answer, and its index",
    r"^prompt_token_ids length \($": (
        "the prompt's share of a sum with the output (alone before `exceeds`, read as requested_tokens)"
    ),
    r"^\) plus (?:output_token_ids length|delta) \($": "the output's and the delta's share of a sum",
    r"^ KV cache size: $": (
        "rendered after a placeholder device name (`{} KV cache size`, 0.30+), which the rule naming"
        " vLLM's devices does not read; the 0.28 wording's count is checked with its `GPU`"
    ),
}
_EXCUSED = [(re.compile(words), why) for words, why in NOT_A_FACT.items()]
_NUMBER = ("int", "float")


def _rendered(template: Template) -> tuple[str, dict[int, float]]:
    """The template with a distinct number per int/float hole (index -> number)."""
    parts = pieces(template.text)
    out: list[str] = []
    numbers: dict[int, float] = {}
    for index, piece in enumerate(parts):
        out.append(piece)
        if index == len(parts) - 1:
            break
        shape = template.holes[index] if index < len(template.holes) else "text"
        if shape in _NUMBER and not parts[index + 1].lstrip().startswith(("GiB", "GB", "Gi")):
            number = 3001 + 17 * index if shape == "int" else round(0.25 + 0.05 * index, 2)
            numbers[index] = number
            out.append(str(number))
        else:
            out.append(PLACEHOLDER[shape])
    text = "".join(out)
    if template.level in ("raise", "assert") and template.exception:
        text = f"{template.exception}: {text}"
    return text, numbers


def _excused(template: Template, index: int) -> bool:
    before = pieces(template.text)[index]
    return any(words.search(before) for words, _ in _EXCUSED)


def _cases() -> list[Template]:
    seen: set[str] = set()
    cases: list[Template] = []
    # vLLM's and the allocators' own wordings; the plugins' (plugins.yaml) are held to their rules by
    # test_inventory.py, their numbers not yet read as facts (tests/corpus/REALWORLD.md, plugins4)
    for name, inventory in load_inventories(default_rules_dir()).items():
        if name == "plugins.yaml":
            continue
        for template in inventory.templates:
            if template.decision.rules and template.text not in seen and _rendered(template)[1]:
                seen.add(template.text)
                cases.append(template)
    return cases


_CASES = _cases()


@pytest.mark.parametrize("template", _CASES, ids=[t.text[:60] for t in _CASES])
def test_every_count_of_a_matched_wording_is_a_fact(packs: RulePacks, template: Template) -> None:
    text, numbers = _rendered(template)
    facts = msgspec.to_builtins(classify_text(text, packs).facts)
    stated = {
        round(float(v), 6) for v in facts.values() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    missing = [
        i for i, n in numbers.items() if round(float(n), 6) not in stated and not _excused(template, i)
    ]
    assert not missing, f"holes {missing} of {text!r} state no fact (facts: {facts})"


def test_the_counts_of_every_era_of_the_block_and_parallel_lines_are_checked() -> None:
    texts = [t.text for t in _CASES]
    for wording in (
        "# GPU blocks: {}",
        "num_gpu_blocks is: {}",
        "must be divisible by tp_size",
        "max_num_seqs (",
    ):
        assert any(wording in text for text in texts), wording
