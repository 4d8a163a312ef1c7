"""``kvrules allocate``: plan a model against a device's free memory and allocate one worker.

``--memory`` takes, per worker, a fraction of the device's free memory (``0.9``; a number with
a decimal point, at most 1) or a size (``40GiB``, ``1073741824``). Without ``--memory`` a real
device plans against 0.9 of its free memory and ``meta`` uses the model file's memory.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from kvrules.allocation import Allocation, LayoutChoice, allocate, choose_allocator
from kvrules.allocation.views import check_layout_names
from kvrules.cli import flags
from kvrules.cli.common import (
    add_common,
    add_plan_arguments,
    apply_workers,
    engine_config,
    load_model,
    plugin_manager_from,
    strategies_from,
)
from kvrules.errors import ConfigError
from kvrules.model import ModelFile
from kvrules.pipeline import Planner
from kvrules.plan import Plan
from kvrules.plugin.ask import Asker
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.report.tables import table
from kvrules.units import format_size, parse_size

DEFAULT_FRACTION = 0.9
_FRACTION = re.compile(r"\s*[0-9]*\.[0-9]*\s*", re.ASCII)


def _fraction(text: str) -> float | None:
    """The fraction in ``text`` (``0.9``, ``.5``, ``1.0``), or ``None`` when it is a size."""
    if not _FRACTION.fullmatch(text) or text.strip() == ".":
        return None
    value = float(text)
    if not 0 < value <= 1:
        raise ConfigError(f"--memory {text.strip()!r}: a fraction of free memory must be in (0, 1]")
    return value


def resolve_memory(
    text: str | None, model: ModelFile, device: str, pm: KVRulesPluginManager, allocator: str | None
) -> tuple[list[int], str]:
    """Per-worker bytes to plan with, and a line saying where they come from.

    :raises ConfigError: a fraction for a device that reports no free memory, or no memory at all.
    """
    chosen = choose_allocator(pm.registries.allocators, device, allocator, Asker(pm.registries))
    info = chosen.device_memory(device)
    if text is None:
        if info is None:
            if model.available_memory:
                return list(model.available_memory), "memory: from the model file"
            raise ConfigError(
                f"device {device!r} reports no free memory and the model file gives none; pass "
                "--memory with a size, e.g. --memory 40GiB"
            )
        text = str(DEFAULT_FRACTION)
    values, notes = [], []
    for part in (p for p in text.split(",") if p.strip()):
        fraction = _fraction(part)
        if fraction is None:
            values.append(parse_size(part.strip()))
            continue
        if info is None:
            raise ConfigError(
                f"--memory {part.strip()} is a fraction of free memory, but device {device!r} reports none; "
                "give a size instead, e.g. --memory 40GiB"
            )
        values.append(int(info[0] * fraction))
        notes.append(f"{fraction:g} x {format_size(info[0])} free (of {format_size(info[1])})")
    if not values:
        raise ConfigError("--memory is empty; give a fraction (0.9) or a size (40GiB) per worker")
    source = "; ".join(dict.fromkeys(notes)) or "as given"
    return values, f"memory: {source} = {', '.join(format_size(v) for v in values)} per worker"


def layout_choice(values: list[str]) -> LayoutChoice:
    """``--layout`` values: one bare NAME, or any number of ``LAYER_OR_TYPE=NAME``."""
    if not values:
        return None
    bare = [v for v in values if "=" not in v]
    if bare and len(values) > 1:
        raise ConfigError("--layout NAME cannot be combined with other --layout values; use KEY=NAME pairs")
    if bare:
        return bare[0]
    pairs = [v.split("=", 1) for v in values]
    return {key.strip(): name.strip() for key, name in pairs}


def _describe(view: Any) -> str:
    items = view if isinstance(view, tuple) else (view,)
    return " + ".join(f"{str(t.dtype).replace('torch.', '')} {tuple(t.shape)}" for t in items)


def render_allocation(allocation: Allocation, seconds: float, verified: bool | None) -> str:
    """What was allocated: buffers, bytes, time, and the view layouts with one example each."""
    s = allocation.summary()
    lines = [
        f"allocated worker {s['worker']} on {s['device']} with the {s['allocator']} allocator: "
        f"{s['buffers']} buffers ({s['allocations']} allocation(s)), {format_size(s['allocated_bytes'])} "
        f"({s['allocated_bytes']:,} bytes) in {seconds:.3f} s",
    ]
    first: dict[str, str] = {}
    for layer, name in allocation.layouts.items():
        first.setdefault(name, layer)
    rows = [
        [name, s["view_layouts"][name], layer, _describe(allocation.views[layer])]
        for name, layer in first.items()
    ]
    lines.append(table(["view layout", "layers", "first layer", "view"], rows))
    if verified is not None:
        lines.append(
            "verify: ok, every view covers exactly its planned pages"
            if verified
            else "verify: skipped (--no-verify)"
        )
    return "\n".join(lines)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def timed_allocate(
    plan: Plan, args: argparse.Namespace, layout: LayoutChoice, pm: KVRulesPluginManager
) -> tuple[Allocation, float]:
    """Allocate ``--worker`` of ``plan`` on ``--device``, and the seconds that took (torch's import
    excluded, the device synchronised)."""
    import torch  # noqa: F401  (imported before the clock starts)

    start = time.perf_counter()
    allocation = allocate(plan, args.device, args.worker, layout, allocator=args.allocator, plugin_manager=pm)
    _synchronize(allocation.device)
    return allocation, time.perf_counter() - start


def allocation_report(
    plan: Plan, allocation: Allocation, memory: list[int], seconds: float, verified: bool
) -> dict[str, Any]:
    """The ``--json`` report: the memory planned with, the plan in brief and the allocation."""
    return {
        "memory": memory,
        "plan": {
            "route": plan.route,
            "groups": len(plan.groups),
            "layers": len(plan.specs),
            "num_blocks": plan.num_blocks,
            "max_model_len": plan.max_model_len,
            "max_concurrency": plan.max_concurrency,
        },
        "allocation": allocation.summary(),
        "seconds": seconds,
        "verified": verified,
    }


def _plan_line(plan: Plan) -> str:
    return (
        f"plan: route {plan.route}, groups {len(plan.groups)}, layers {len(plan.specs)}, num_blocks "
        f"{plan.num_blocks}, max concurrency {plan.max_concurrency:.4g} at max_model_len {plan.max_model_len}"
    )


def cmd_allocate(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    model, title = load_model(args, pm)
    apply_workers(model, args)
    config = engine_config(model, args)
    layout = layout_choice(args.layout)
    check_layout_names(pm.registries.allocators, layout)
    memory, memory_line = resolve_memory(args.memory, model, args.device, pm, args.allocator)
    plan = Planner(strategies_from(args), plugin_manager=pm).plan(model.worker_specs(), memory, config)
    allocation, seconds = timed_allocate(plan, args, layout, pm)
    if not args.no_verify:
        allocation.verify()
    if args.json:
        print(json.dumps(allocation_report(plan, allocation, memory, seconds, not args.no_verify), indent=2))
        return 0
    print(f"kvrules allocate: {title} on {allocation.device}")
    print(memory_line)
    print(_plan_line(plan))
    print(render_allocation(allocation, seconds, not args.no_verify))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``allocate`` sub-command."""
    p = subparsers.add_parser(
        "allocate", help="plan against a device's free memory and allocate one worker's KV cache"
    )
    add_plan_arguments(p)
    for action in p._actions:
        if "--memory" in action.option_strings:
            action.help = (
                "per worker: a fraction of the device's free memory (0.9, the default) or a size (40GiB)"
            )
    p.add_argument(
        "--device", default="cuda", help="cuda, cuda:N, cpu, or meta for a dry run (default: cuda)"
    )
    p.add_argument(
        "--worker",
        type=flags.WORKER_INDEX,
        default=0,
        metavar="N",
        help="the worker (pipeline stage) to allocate",
    )
    p.add_argument(
        "--layout",
        action="append",
        default=[],
        metavar="NAME|KEY=NAME",
        help="view layout for every layer it supports, or LAYER_OR_SPEC_TYPE=NAME (repeatable)",
    )
    p.add_argument(
        "--allocator", metavar="NAME", help="force an allocator by name (default: the first that fits)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip checking the views against the plan")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_common(p)
    p.set_defaults(func=cmd_allocate)


__all__ = [
    "allocation_report",
    "layout_choice",
    "register",
    "render_allocation",
    "resolve_memory",
    "timed_allocate",
]
