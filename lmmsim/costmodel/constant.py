"""A cost model with constant, hand-set costs.

For tests with hand-computed timelines and for checking the queueing core
against closed forms (M/D/1): a step costs ``step_s`` plus ``per_token_s``
per token in the batch; encoding costs ``encode_item_s`` per media item.
"""

from __future__ import annotations

from typing import Sequence


class ConstantStepCost:
    def __init__(
        self,
        step_s: float = 0.01,
        per_token_s: float = 0.0,
        encode_item_s: float = 0.0,
        weight_bytes_per_gpu: float = 1e9,
        kv_bytes_per_token_per_gpu: float = 1e5,
    ):
        self.step_s = step_s
        self.per_token_s = per_token_s
        self.encode_item_s = encode_item_s
        self.weight_bytes_per_gpu = weight_bytes_per_gpu
        self.kv_bytes_per_token_per_gpu = kv_bytes_per_token_per_gpu

    def llm_step_s(self, prefill_chunks, num_decodes: int, decode_context_sum: int, num_sampled: int) -> float:
        tokens = num_decodes + sum(n for n, _ in prefill_chunks)
        return self.step_s + self.per_token_s * tokens

    def encode_s(self, works: Sequence) -> float:
        return self.encode_item_s * len(works)

    def encode_host_s(self, works: Sequence) -> float:
        return 0.0

    def encode_call_s(self, works: Sequence) -> float:
        return self.encode_s(works)
