"""Human-readable text for plans and rule listings (the CLI's tables)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kvrules.plan import Plan
from kvrules.plugin.presets import StrategySet, presets_of
from kvrules.plugin.registry import Registries
from kvrules.report.groups import first_names, group_facts
from kvrules.units import format_size


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_plan(plan: Plan, title: str) -> str:
    """The summary a person reads: groups, tensors, capacity and the decisions that changed something."""
    out = [f"{title}", f"strategy set: {plan.strategy_set}   route: {plan.route}"]
    types = Counter(s.type_name for s in plan.specs.values())
    out.append(f"layers: {len(plan.specs)} ({', '.join(f'{n} {t}' for t, n in types.most_common())})")
    out.append("")
    out.append(f"KV-cache groups ({len(plan.groups)}):")
    rows = [
        [
            f.index,
            f.layer_count,
            f.kind,
            f.block_size,
            f"{f.page_bytes:,}",
            f"{f.padding_bytes:,}" if f.padding_bytes else "-",
            f.blocks_per_request,
            f.first_layers(2),
        ]
        for f in group_facts(plan)
    ]
    out.append(
        table(["#", "layers", "type", "block", "page B", "padding B", "blocks/req", "first layers"], rows)
    )
    out.append("")
    for w, worker in enumerate(plan.workers):
        out.append(
            f"worker {w}: layout {worker.layout or '-'}, {len(worker.tensors)} tensors, "
            f"num_blocks {worker.num_blocks} (own {worker.own_num_blocks}), memory "
            f"{format_size(worker.available_memory)}, allocated {format_size(worker.allocated_bytes)}"
        )
        rows = [
            [
                t,
                f"{tensor.size:,}",
                tensor.offset,
                tensor.block_stride,
                len(tensor.shared_by),
                first_names(tensor.shared_by, 2),
            ]
            for t, tensor in enumerate(worker.tensors[:12])
        ]
        if rows:
            out.append(table(["#", "size B", "offset", "block_stride", "layers", "shared by"], rows))
        if len(worker.tensors) > 12:
            out.append(f"  ... {len(worker.tensors) - 12} more tensors")
    out.append("")
    mc = "unlimited" if math.isinf(plan.max_concurrency) else f"{plan.max_concurrency:.2f}"
    out.append(
        f"capacity: max_model_len {plan.max_model_len}, num_blocks {plan.num_blocks}, "
        f"max concurrency {mc}, capacity {plan.capacity_tokens:,} tokens"
    )
    if plan.waste is not None:
        waste = plan.waste
        ideal = (
            "unlimited" if math.isinf(waste.ideal_max_concurrency) else f"{waste.ideal_max_concurrency:.2f}"
        )
        out.append(
            f"efficiency: {waste.efficiency:.1%} of the {format_size(waste.allocated_bytes)} one request reserves is real "
            f"state; page padding {format_size(waste.page_padding_bytes)}, slot padding "
            f"{format_size(waste.slot_padding_bytes)} ({waste.padding_slots} padding slots); without padding: "
            f"max concurrency {ideal}, {waste.ideal_capacity_tokens:,} tokens"
        )
    applied: dict[tuple[str, str, str], list[str]] = {}
    for d in plan.decisions:
        if d.outcome == "applied" and d.layer is not None:
            applied.setdefault((d.stage, d.rule, d.reason), []).append(d.layer)
    if applied:
        out.append("")
        out.append("per-layer decisions (applied):")
        rows = [
            [stage, rule, len(layers), reason, first_names(layers, 2)]
            for (stage, rule, reason), layers in applied.items()
        ]
        out.append(table(["stage", "rule", "layers", "reason", "layers (first)"], rows))
    model = [d for d in plan.decisions if d.layer is None and d.outcome == "applied"]
    if model:
        out.append("")
        out.append("model-level decisions (applied):")
        out.append(table(["stage", "rule", "reason"], [[d.stage, d.rule, d.reason] for d in model]))
    return "\n".join(out)


def render_rules(registries: Registries, active: StrategySet) -> str:
    """Every registered rule with kind, priority, provider, whether active, and description; then
    the presets, spec types, allocators, view layouts and architectures."""
    active_names = set(active.names())
    rules = sorted(registries.rules.rules.values(), key=lambda r: (r.kind, r.sort_key))
    allocators = registries.allocators
    sections: list[tuple[str, list[str], list[list[Any]]]] = [
        (
            f"rules (active = in strategy set {active.name!r}):",
            ["name", "kind", "priority", "active", "provider", "description"],
            [
                [
                    r.name,
                    r.kind,
                    r.priority,
                    _yes(r.name in active_names),
                    registries.rules.providers[r.name],
                    r.description,
                ]
                for r in rules
            ],
        ),
        (
            "presets:",
            ["name", "rules"],
            [["default", "every rule marked default (built-ins and installed plugins)"]]
            + [[n, ", ".join(names)] for n, names in sorted(presets_of(registries.rules).items())],
        ),
        (
            "spec types:",
            ["name", "class", "provider", "description"],
            [
                [name, cls.__name__, registries.spec_types.providers[name], _first_line(cls.__doc__)]
                for name, cls in sorted(registries.spec_types.classes.items())
            ],
        ),
        (
            "allocators:",
            ["name", "priority", "provider", "description"],
            [[a.name, a.priority, allocators.providers[a.name], _described(a)] for a in allocators.ordered()],
        ),
        (
            "view layouts (allocation):",
            ["name", "priority", "default", "provider", "description"],
            [
                [
                    v.name,
                    v.priority,
                    _yes(getattr(v, "default", False)),
                    allocators.view_layout_providers[v.name],
                    _described(v),
                ]
                for v in allocators.ordered_view_layouts()
            ],
        ),
        (
            "architectures (Hugging Face configs, asked in this order):",
            ["name", "priority", "model types", "provider", "description"],
            [
                [
                    a.name,
                    a.priority,
                    ", ".join(getattr(a, "model_types", ())),
                    registries.architectures.providers[a.name],
                    _described(a),
                ]
                for a in registries.architectures.ordered()
            ],
        ),
    ]
    # the first three sections always stand; the others only when something is registered
    shown_sections = [s for k, s in enumerate(sections) if k < 3 or s[2]]
    return "\n\n".join(f"{title}\n{table(headers, rows)}" for title, headers, rows in shown_sections)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""


def _described(obj: object) -> str:
    return str(getattr(obj, "description", ""))
