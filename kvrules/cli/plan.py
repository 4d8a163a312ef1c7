"""``kvrules plan``: plan a model and print the layout, the summary, the JSON or a picture."""

from __future__ import annotations

import argparse
from typing import Any

from kvrules.cli.common import (
    add_common,
    add_plan_arguments,
    apply_workers,
    draw_picture,
    engine_config,
    load_model,
    memory_from,
    output_path,
    plugin_manager_from,
    strategies_from,
    write_output,
)
from kvrules.cli.hf import with_model_decisions
from kvrules.pipeline import Planner
from kvrules.report.picture import check_format, formats_text
from kvrules.report.summary import render_summary
from kvrules.report.tables import render_plan


def cmd_plan(args: argparse.Namespace) -> int:
    output_path(args.output, "-o")
    if output_path(getattr(args, "picture", None), "--picture") is not None:
        check_format(args.picture)
    pm = plugin_manager_from(args)
    model, title = load_model(args, pm)
    apply_workers(model, args)
    config = engine_config(model, args)
    memory = memory_from(model, args)
    planner = Planner(strategies_from(args), plugin_manager=pm)
    plan = with_model_decisions(planner.plan(model.worker_specs(), memory, config), model)
    if args.output:
        write_output(args.output, plan.to_json() + "\n", "-o")
    if getattr(args, "picture", None):
        draw_picture(plan, args.picture, f"kvrules plan: {title}")
    if args.json:
        print(plan.to_json())
    else:
        print(render_plan(plan, f"kvrules plan: {title}"))
        print()
        print(render_summary(plan))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``plan`` sub-command."""
    p = subparsers.add_parser("plan", help="plan a model's KV cache and print the layout")
    add_plan_arguments(p)
    p.add_argument(
        "--json", action="store_true", help="print the whole plan as compact JSON (schema kvrules.plan/v2)"
    )
    p.add_argument("-o", "--output", metavar="PATH", help="also write the plan JSON to PATH")
    p.add_argument(
        "--picture",
        metavar="PATH",
        help=f"draw the memory layout to PATH ({formats_text()}; needs kvrules[plot])",
    )
    add_common(p)
    p.set_defaults(func=cmd_plan)
