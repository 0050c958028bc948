"""KV-cache arithmetic as vLLM's V1 engine does it (fact sheet §3.4, §4).

Layers with the same spec share a KV-cache group; every group draws block ids from one pool. A block
costs one page in each of `group_size` layer tensors. A request of length L needs cdiv(L, block) blocks
in each full-attention group, a window's worth in each sliding group and one (the request's
recurrent state, padded to the same page) in each linear-attention/Mamba group. The capacity check sums the
same need over layers in bytes, and since 0.29 first subtracts the reserved null block.
"""

from __future__ import annotations

import msgspec

__all__ = ["KvLayout", "cdiv", "group_layout", "largest_fitting_length"]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KvLayout(msgspec.Struct, frozen=True):
    """The KV cache of one GPU: page per layer, how layers group, and the sliding window if any."""

    bytes_per_token_layer: int
    block_size: int
    full_layers: int
    sliding_layers: int
    window: int | None
    group_size: int
    full_groups: int
    sliding_groups: int
    in_flight_tokens: int
    # linear-attention / Mamba layers: one state page (padded to the attention page) per request
    state_layers: int = 0
    state_groups: int = 0
    # state pages one request holds in each state group (MambaSpec.max_memory_usage_bytes)
    state_blocks: int = 1
    # a separate draft model's attention layers (speculative decoding): vLLM merges them with the
    # target's full-attention layers, so each full-attention block also holds the draft's tokens
    draft_bytes_per_token: int = 0

    @property
    def page_bytes(self) -> int:
        return self.bytes_per_token_layer * self.block_size

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_size + self.draft_bytes_per_token * self.block_size

    @property
    def bytes_per_token(self) -> int:
        return (
            self.bytes_per_token_layer * (self.full_layers + self.sliding_layers) + self.draft_bytes_per_token
        )

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups + self.state_groups

    def _sliding_blocks(self, length: int) -> int:
        assert self.window is not None
        return cdiv(min(self.window - 1 + self.in_flight_tokens, length), self.block_size) + 1

    def blocks_per_request(self, length: int) -> int:
        """Blocks one request of `length` tokens takes from the shared pool (all groups)."""
        blocks = self.full_groups * cdiv(length, self.block_size)
        if self.sliding_groups:
            blocks += self.sliding_groups * self._sliding_blocks(length)
        return blocks + self.state_groups * self.state_blocks

    def need_bytes(self, length: int) -> int:
        """Bytes the capacity check asks for one request of `length` tokens (summed over layers)."""
        need = cdiv(length, self.block_size) * (
            self.full_layers * self.page_bytes + self.draft_bytes_per_token * self.block_size
        )
        if self.sliding_layers:
            need += self.sliding_layers * self._sliding_blocks(length) * self.page_bytes
        return need + self.state_layers * self.state_blocks * self.page_bytes


def group_layout(full: int, sliding: int, state: int = 0) -> tuple[int, int, int, int]:
    """(group_size, full, sliding and state groups) by vLLM's uniform-page grouping of layer types."""
    counts = [n for n in (full, sliding, state) if n]
    smallest, largest = min(counts), max(counts)
    size = largest if largest < smallest * 1.25 else smallest
    full_groups, sliding_groups, state_groups = (cdiv(n, size) if n else 0 for n in (full, sliding, state))
    return size, full_groups, sliding_groups, state_groups


def largest_fitting_length(layout: KvLayout, available: int, upper: int) -> int:
    """vLLM's binary search: the largest length in [1, upper] whose need fits, or 0 if none."""
    if upper < 1 or layout.need_bytes(1) > available:
        return 0
    low, high = 1, upper
    while low < high:
        mid = (low + high + 1) // 2
        if layout.need_bytes(mid) <= available:
            low = mid
        else:
            high = mid - 1
    return low
