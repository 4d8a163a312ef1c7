"""The ``kpool_tail`` spec type: a one-block circular scratch cache.

A kpool indexer (GLM-5.3-Flash's "Glm5Next" attention) keeps the raw keys of the last
``block_size`` tokens of each request in one block, written at slot ``token % block_size``.
A request owns exactly one block for its whole life, and the block is never prefix-cached.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from kvrules import AttentionSpec, EngineConfig


@dataclass(frozen=True, eq=False, kw_only=True)
class KpoolTailSpec(AttentionSpec):
    """A one-block circular scratch cache (kpool indexer tail): one block per request, never prefix-cached.

    A page holds ``block_size`` tokens x ``num_kv_heads`` x ``head_size`` keys. Fields are :class:`kvrules.AttentionSpec`'s; ``head_size_v`` defaults to 0 (keys only).
    Memory per request is one page, whatever ``max_model_len`` is.
    """

    type_name: ClassVar[str] = "kpool_tail"
    default_head_size_v_is_head_size: ClassVar[bool] = False
    #: the ring is rewritten in place, so its blocks can never be shared between requests
    prefix_cacheable: ClassVar[bool] = False
    #: blocks one request ever holds
    states_per_request: ClassVar[int] = 1

    def uniform_type_key(self) -> Hashable | None:
        return ("kpool_tail",)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return self.states_per_request * self.page_size_bytes
