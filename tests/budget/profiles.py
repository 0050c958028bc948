"""The shape of realworld_numbers.yaml: vLLM start-ups whose memory profile a public source quoted.

One point is one engine start as its log printed it. Inputs (model, GPU, parallelism, lengths,
utilization …) are what the run states; a field the run does not state but that was derived (from
that version's defaults in vLLM's source, the fact sheet, or another line of the same thread) is
named in `inferred` with how. Logged figures are GiB (2**30 bytes; V0's "GB" is GiB too) exactly as
printed, and each one appears verbatim in `excerpt`. `thread` groups the points of one discussion so
a fit can leave a whole thread out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

from service.packs.loader import load_yaml_file

HERE = Path(__file__).resolve().parent

Engine = Literal["v0", "v1"]


class Point(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One vLLM start-up as a public thread logged it."""

    id: str
    url: str
    model: str
    gpu: str
    # None only where the source does not say; `inferred["vllm_version"]` then gives the range
    vllm_version: str | None
    # which engine printed the profile: V0's worker.py lines or V1's gpu_worker.py lines
    engine: Engine | None = None
    tp: int = 1
    pp: int = 1
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int = 16
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    # --speculative-config's method and num_speculative_tokens
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    # logged figures (GiB unless a count)
    total_gpu_gib: float | None = None
    usable_gib: float | None = None
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None
    graph_capture_gib: float | None = None
    kv_gib: float | None = None
    kv_decimals: int = 2
    pool_tokens: int | None = None
    num_blocks: int | None = None
    estimated_max_len: int | None = None
    excerpt: str | None = None
    inferred: dict[str, str] = msgspec.field(default_factory=dict)
    # False where the checkpoint is outside rules/catalog (it needs Hub or config.json resolution)
    model_in_catalog: bool = True
    # for a checkpoint outside the catalog: the Hugging Face id of the checked-in config.json
    # (tests/models/configs) of the release it is an export of, which the estimate is given as the
    # pasted config (its quantization is the run's own flag); `inferred["config"]` says why that one
    config: str | None = None
    skip_weights: str | None = None
    skip_pool: str | None = None
    # why the logged KV memory cannot be compared with one GPU's estimate (tools/fit_overheads.py)
    skip_kv: str | None = None
    note: str | None = None

    @property
    def thread(self) -> str:
        """The discussion a point comes from, for leave-one-thread-out.

        owner/repo#number for a GitHub issue or pull request; owner/repo for files committed in a
        repository (one author's runs); otherwise the page without its anchor.
        """
        github = _GITHUB.match(self.url)
        if github and github["number"]:
            return f"{github['repo']}#{github['number']}"
        if github:
            return github["repo"]
        return self.source

    @property
    def source(self) -> str:
        """The URL without its anchor: one thread, one committed file or one page."""
        return self.url.split("#", 1)[0]


_GITHUB = re.compile(
    r"https://github\.com/(?P<repo>[\w.-]+/[\w.-]+)(?:/(?:issues|pull|discussions)/(?P<number>\d+))?"
)

# Logged GiB figures, and the count fields, that an excerpt must contain verbatim.
LOGGED_GIB = (
    "total_gpu_gib",
    "usable_gib",
    "weights_gib",
    "activation_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "graph_capture_gib",
    "kv_gib",
)
LOGGED_COUNTS = ("pool_tokens", "num_blocks", "estimated_max_len")
# Inputs that, unless `inferred` says how they were derived, the excerpt must state.
STATED_INPUTS = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens")


class Points(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    points: list[Point]


def load_points(path: Path = HERE / "realworld_numbers.yaml") -> list[Point]:
    """The points of one data file, decoded strictly (an unknown field is an error)."""
    return load_yaml_file(path, Points).points
