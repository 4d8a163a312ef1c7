"""The short summary under a plan: groups by kind, block and page sizes, capacity, efficiency.

Rows aggregate groups that look alike (same kind, target/draft role, layer count, block size,
page and padding, as :func:`~kvrules.report.groups.group_facts` gives them); the last line gives
``num_blocks``, max concurrency and, when the plan carries a waste report (``plan.waste``), its
efficiency.
"""

from __future__ import annotations

import math

from kvrules.plan import Plan
from kvrules.report.groups import GroupFacts, group_facts
from kvrules.report.tables import table

HEADERS = ("groups", "layers/group", "type", "model", "block", "page B", "padding B")


def efficiency(plan: Plan) -> float | None:
    """``plan.waste.efficiency`` when the plan carries a waste report, else ``None``."""
    return None if plan.waste is None else plan.waste.efficiency


def _look(facts: GroupFacts) -> tuple[str, str, int, int, int, int]:
    """What makes two groups one summary row."""
    return (
        facts.kind,
        facts.role,
        facts.layer_count,
        facts.block_size,
        facts.page_bytes,
        facts.padding_bytes,
    )


def _padding(facts: GroupFacts) -> str:
    if not facts.padding_bytes:
        return "-"
    return f"{facts.padding_bytes:,} ({100 * facts.padding_bytes / facts.page_bytes:.1f}%)"


def render_summary(plan: Plan) -> str:
    """A few lines a person reads first (see the module docstring)."""
    rows: dict[tuple[str, str, int, int, int, int], tuple[GroupFacts, int]] = {}
    for facts in group_facts(plan):
        first, count = rows.get(_look(facts), (facts, 0))
        rows[_look(facts)] = (first, count + 1)
    lines = [f"summary: {len(plan.groups)} KV-cache groups, {len(plan.specs)} layers"]
    body = [
        [count, f.layer_count, f.kind, f.role, f.block_size, f"{f.page_bytes:,}", _padding(f)]
        for f, count in rows.values()
    ]
    if body:
        lines.append(table(HEADERS, body))
    mc = "unlimited" if math.isinf(plan.max_concurrency) else f"{plan.max_concurrency:.2f}"
    tail = (
        f"  num_blocks {plan.num_blocks:,}, max concurrency {mc} at {plan.max_model_len:,} tokens, "
        f"capacity {plan.capacity_tokens:,} tokens"
    )
    eff = efficiency(plan)
    if eff is not None:
        tail += f", efficiency {100 * eff:.1f}%"
    lines.append(tail)
    return "\n".join(lines)
