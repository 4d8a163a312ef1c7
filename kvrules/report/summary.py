"""The short summary under a plan: groups by kind, block and page sizes, capacity, efficiency.

Rows aggregate groups that look alike (same spec type, target/draft role, layer count, block
size and page); the last line gives ``num_blocks``, max concurrency and, when the plan carries a
waste report (``plan.waste``), its efficiency.
"""

from __future__ import annotations

import math
from typing import Any

from kvrules.plan import KVCacheGroup, Plan
from kvrules.report.tables import table
from kvrules.specs.uniform import UniformTypeKVCacheSpecs


def group_kind(group: KVCacheGroup) -> str:
    """The group's spec type (``uniform_type[mla,...]`` for a uniform-type group)."""
    spec = group.spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        kinds = sorted({m.type_name for m in spec.kv_cache_specs.values()})
        return f"uniform_type[{','.join(kinds)}]"
    return spec.type_name


def group_role(plan: Plan, group: KVCacheGroup) -> str:
    """``target``, ``draft`` or ``mixed``, from ``EngineConfig.draft_layer_prefixes``."""
    draft = [plan.config.is_draft_layer(n) for n in group.layer_names]
    if draft and all(draft):
        return "draft"
    return "mixed" if any(draft) else "target"


def group_padding(group: KVCacheGroup) -> int:
    """Padding bytes in one block of the group (summed over members of a uniform-type group)."""
    spec = group.spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return sum(s.page_size_bytes - s.unpadded_page_size_bytes for s in spec.kv_cache_specs.values())
    return spec.page_size_bytes - spec.unpadded_page_size_bytes


def efficiency(plan: Plan) -> float | None:
    """``plan.waste.efficiency`` when the plan carries a waste report, else ``None``."""
    waste: Any = getattr(plan, "waste", None)
    value = getattr(waste, "efficiency", None) if waste is not None else None
    return float(value) if value is not None else None


def render_summary(plan: Plan) -> str:
    """A few lines a person reads first (see the module docstring)."""
    rows: dict[tuple[str, str, int, int, int, int], int] = {}
    for group in plan.groups:
        page = group.spec.page_size_bytes
        key = (
            group_kind(group),
            group_role(plan, group),
            len(group.layer_names),
            group.spec.block_size,
            page,
            group_padding(group),
        )
        rows[key] = rows.get(key, 0) + 1
    lines = [f"summary: {len(plan.groups)} KV-cache groups, {len(plan.specs)} layers"]
    body = []
    for (kind, role, layers, block, page, padding), count in rows.items():
        pad = "-" if not padding else f"{padding:,} ({100 * padding / page:.1f}%)"
        body.append([count, layers, kind, role, block, f"{page:,}", pad])
    if body:
        lines.append(table(["groups", "layers/group", "type", "model", "block", "page B", "padding B"], body))
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
