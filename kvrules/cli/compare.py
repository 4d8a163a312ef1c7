"""``kvrules compare``: plan one model with several strategy sets and show them side by side.

Each ``--strategies`` value is one set (a preset name, or comma-separated rule names as for
``kvrules plan``); the first set is the baseline every ratio is taken against. Without
``--strategies`` the sets are ``vllm`` and ``default``. A set whose plan fails shows its error
in the table (exit code 2 once the table is printed); an unknown rule or preset fails at once.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvrules.cli.common import (
    add_common,
    add_plan_arguments,
    apply_workers,
    engine_config,
    error_text,
    load_model,
    memory_from,
    parse_set,
    plugin_manager_from,
)
from kvrules.config import EngineConfig
from kvrules.errors import KVRulesError
from kvrules.hf.build import MTP, HFModel, build_hf_model
from kvrules.model import ModelFile
from kvrules.pipeline import Planner
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.report.summary import efficiency
from kvrules.report.tables import table
from kvrules.units import format_size

SCHEMA = "kvrules.compare/v1"
DEFAULT_SETS: tuple[str, ...] = ("vllm", "default")

#: (key, row label) in display order; every value is a number or ``None``
METRICS: tuple[tuple[str, str], ...] = (
    ("groups", "groups"),
    ("padding_slots", "padding slots"),
    ("page_size_bytes", "page size B"),
    ("num_blocks", "num_blocks"),
    ("max_concurrency", "max concurrency"),
    ("capacity_tokens", "capacity tokens"),
    ("efficiency", "efficiency"),
    ("max_model_len", "max_model_len"),
)


@dataclass(frozen=True)
class SetResult:
    """One strategy set's figures, or the error its plan raised.

    :ivar label: the ``--strategies`` value as given.
    :ivar figures: metric key -> value (see :data:`METRICS`); empty when the plan failed.
    :ivar page_sizes: the distinct page sizes of the plan's layers.
    """

    label: str
    strategy_set: str = ""
    figures: dict[str, float | int | None] | None = None
    page_sizes: tuple[int, ...] = ()
    error: KVRulesError | None = None


def padding_slots(plan: Plan) -> int:
    """Padding slots from the plan's waste report, else counted over shared-pool groups."""
    if plan.waste is not None:
        return plan.waste.padding_slots
    plain = [g for g in plan.groups if not g.spec.has_members and g.layer_names]
    if not plain:
        return 0
    width = max(len(g.layer_names) for g in plain)
    return sum(width - len(g.layer_names) for g in plain)


def figures_of(plan: Plan, label: str) -> SetResult:
    """The compared figures of one plan."""
    pages = tuple(sorted({s.page_size_bytes for s in plan.specs.values()}))
    values: dict[str, float | int | None] = {
        "groups": len(plan.groups),
        "padding_slots": padding_slots(plan),
        "page_size_bytes": pages[-1] if pages else None,
        "num_blocks": plan.num_blocks,
        "max_concurrency": None if math.isinf(plan.max_concurrency) else plan.max_concurrency,
        "capacity_tokens": plan.capacity_tokens,
        "efficiency": efficiency(plan),
        "max_model_len": plan.max_model_len,
    }
    return SetResult(label, plan.strategy_set, values, pages)


def specs_for(model: ModelFile, strategies: str | list[str], pm: KVRulesPluginManager) -> ModelFile:
    """``model`` itself, or, when it was built from a Hugging Face config, rebuilt with the set's aligners."""
    hf = getattr(model, "hf", None)
    if not isinstance(hf, HFModel):
        return model
    draft: Any = MTP if hf.draft_kind == MTP else (hf.draft.config if hf.draft is not None else None)
    rebuilt = build_hf_model(hf.target.config, draft, hf.options, strategies=strategies, plugin_manager=pm)
    out = rebuilt.to_model_file(model.available_memory)
    out.workers = [list(w) for w in model.workers] if model.workers else None
    return out


def compare(
    model: ModelFile,
    config: EngineConfig,
    memory: Sequence[int],
    sets: Sequence[str],
    pm: KVRulesPluginManager,
) -> list[SetResult]:
    """Plan ``model`` once per strategy set (a model built from a Hugging Face config is rebuilt
    per set, so each set's aligners choose its block sizes).

    :raises PluginError: a set names an unknown rule or preset (before anything is planned).
    """
    planners = [(label, Planner(parse_set(label), plugin_manager=pm)) for label in sets]
    results = []
    for label, planner in planners:
        try:
            built = specs_for(model, parse_set(label), pm)
            plan = planner.plan(built.worker_specs(), list(memory), config)
        except KVRulesError as exc:
            results.append(SetResult(label, planner.strategies.name, error=exc))
            continue
        results.append(figures_of(plan, label))
    return results


def ratio(value: float | int | None, base: float | int | None) -> float | None:
    """``value / base``, or ``None`` when either is missing or the base is 0."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def ratios(results: Sequence[SetResult]) -> list[dict[str, float | None]]:
    """Per set, every metric over the first set's."""
    base = results[0].figures if results else None
    out: list[dict[str, float | None]] = []
    for result in results:
        if result.figures is None or base is None:
            out.append({key: None for key, _ in METRICS})
        else:
            out.append({key: ratio(result.figures[key], base[key]) for key, _ in METRICS})
    return out


def _cell(key: str, value: float | int | None, result: SetResult) -> str:
    if value is None:
        return "-"
    if key == "max_concurrency":
        return f"{value:.2f}"
    if key == "efficiency":
        return f"{value:.1%}"
    if key == "page_size_bytes" and len(result.page_sizes) > 1:
        return f"{int(value):,} (max of {len(result.page_sizes)})"
    return f"{int(value):,}"


def render_compare(results: Sequence[SetResult], title: str) -> str:
    """The side-by-side table: one row per metric, one column per set, ratios to the first set."""
    all_ratios = ratios(results)
    rows = []
    for key, label in METRICS:
        row = [label]
        for index, result in enumerate(results):
            if result.figures is None:
                row.append("error")
                continue
            text = _cell(key, result.figures[key], result)
            r = all_ratios[index][key]
            if index > 0:
                text += f" (x{r:.2f})" if r is not None else " (x-)"
            row.append(text)
        rows.append(row)
    headers = ["metric"] + [r.label for r in results]
    out = [title, table(headers, rows)]
    errors = [(r.label, r.error) for r in results if r.error is not None]
    if errors:
        out.append("")
        out.extend(f"{label}: {type(error).__name__}: {error_text(error)}" for label, error in errors)
    if len(results) > 1:
        out.append("")
        out.append(f"(xN) = the value over {results[0].label}'s, for the same model and memory.")
    return "\n".join(out)


def compare_document(
    results: Sequence[SetResult], title: str, config: EngineConfig, memory: Sequence[int]
) -> dict[str, Any]:
    """The ``--json`` form (schema ``kvrules.compare/v1``)."""
    sets: list[dict[str, Any]] = []
    for result, rat in zip(results, ratios(results), strict=True):
        entry: dict[str, Any] = {"strategies": result.label, "strategy_set": result.strategy_set}
        if result.error is not None:
            entry["error"] = {"type": type(result.error).__name__, "message": error_text(result.error)}
        else:
            entry.update(result.figures or {})
            entry["page_sizes"] = list(result.page_sizes)
            entry["ratios"] = rat
        sets.append(entry)
    return {
        "schema": SCHEMA,
        "model": title,
        "max_model_len": config.max_model_len,
        "available_memory": list(memory),
        "baseline": results[0].label if results else None,
        "sets": sets,
    }


def cmd_compare(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    # several --strategies values are several sets, not one list: build with the default set
    # first; a Hugging Face model is rebuilt per set by compare()
    model, title = load_model(argparse.Namespace(**{**vars(args), "strategies": None}), pm)
    apply_workers(model, args)
    config = engine_config(model, args)
    memory = memory_from(model, args)
    sets = list(args.strategies or DEFAULT_SETS)
    results = compare(model, config, memory, sets, pm)
    if args.json:
        print(json.dumps(compare_document(results, title, config, memory), indent=2))
    else:
        head = (
            f"kvrules compare: {title} (max_model_len {config.max_model_len}, memory "
            f"{', '.join(format_size(m) for m in memory)})"
        )
        print(render_compare(results, head))
    failed = [r.label for r in results if r.error is not None]
    if failed:
        print(
            f"kvrules: error: strategy set(s) {', '.join(failed)} could not plan this model", file=sys.stderr
        )
        return 2
    return 0


def register(subparsers: Any) -> None:
    """Add ``compare`` to the ``kvrules`` command line."""
    parser = subparsers.add_parser(
        "compare",
        help="plan one model with several strategy sets and compare capacity side by side",
        description="Each --strategies value is one strategy set (a preset, or comma-separated rule "
        "names); ratios are taken against the first. Default: --strategies vllm --strategies default.",
    )
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help=f"print the comparison as JSON (schema {SCHEMA})")
    add_common(parser)
    parser.set_defaults(func=cmd_compare)
