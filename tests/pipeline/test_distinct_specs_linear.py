"""Issue 25 R1: checking specs is linear in layers when every layer has its own spec object.

Counted, not timed: the table's passes over its values are counted, so the test is exact on any machine.
"""

from __future__ import annotations

from typing import Any

from kvrules import EngineConfig, FullAttentionSpec
from kvrules.plugin.ask import Asker
from kvrules.plugin.manager import collect_registries, default_manager


class CountingTable(dict[str, Any]):
    """A layer table that counts how often its values or items are walked."""

    walks = 0

    def values(self) -> Any:  # type: ignore[override]
        CountingTable.walks += 1
        return super().values()

    def items(self) -> Any:  # type: ignore[override]
        CountingTable.walks += 1
        return super().items()


def _walks(layers: int) -> int:
    table = CountingTable(
        (f"l{i}", FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16"))
        for i in range(layers)
    )
    CountingTable.walks = 0
    Asker(collect_registries(default_manager())).specs(table, EngineConfig(max_model_len=4096))
    return CountingTable.walks


def test_distinct_spec_objects_cost_a_fixed_number_of_passes() -> None:
    # before the fix each distinct object cost one pass: 1,000 layers -> about 1,000 walks
    assert _walks(1000) == _walks(50) <= 3
