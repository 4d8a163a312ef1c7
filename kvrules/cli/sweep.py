"""``kvrules sweep``: plan one Hugging Face model over many settings and compare them in one table.

Every combination of ``--tp``, ``--kv-cache-dtype`` and ``--num-speculative-tokens`` (each a
comma-separated list) is built and planned; a combination that fails shows its error instead of
stopping the sweep. A progress line is drawn on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from kvrules.cli import flags
from kvrules.cli.common import add_common, error_text, plugin_manager_from, strategies_from
from kvrules.cli.hf import reader_from
from kvrules.cli.progress import Progress
from kvrules.config import EngineConfig
from kvrules.errors import ConfigError, KVRulesError, ModelFileError
from kvrules.hf.build import build_hf_model
from kvrules.hf.config import READERS
from kvrules.hf.examples import load_hf_example_info
from kvrules.hf.options import KV_CACHE_DTYPES, HFOptions
from kvrules.pipeline import Planner
from kvrules.report.summary import efficiency
from kvrules.report.tables import table
from kvrules.units import format_size, parse_sizes
from kvrules.values import MAX_DIMENSION, MAX_TOKENS

AXES = ("tensor_parallel_size", "kv_cache_dtype", "num_speculative_tokens")

#: option flags a sweep passes on unchanged to every combination
FIXED_FLAGS = (
    "block_size",
    "mamba_cache_mode",
    "mamba_ssm_cache_dtype",
    "attention_backend",
    "draft_kv_cache_dtype",
    "max_model_len",
)

#: the sweep table's columns
HEADERS = (
    "tp",
    "kv dtype",
    "spec tokens",
    "block",
    "groups",
    "num_blocks",
    "max conc.",
    "capacity tokens",
    "efficiency",
    "status",
)


def _dtypes(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    for value in values:
        if value not in KV_CACHE_DTYPES:
            raise ConfigError(
                f"--kv-cache-dtype {value!r} is not supported; use {', '.join(KV_CACHE_DTYPES)}"
            )
    return values or ["auto"]


def sweep_row(
    config: Any,
    draft: Any,
    options: HFOptions,
    memory: list[int],
    engine: dict[str, Any],
    args: argparse.Namespace,
    pm: Any,
) -> dict[str, Any]:
    """Build and plan one combination; a :class:`KVRulesError` becomes the row's ``error``."""
    row: dict[str, Any] = {axis: getattr(options, axis) for axis in AXES}
    try:
        model = build_hf_model(
            config,
            draft,
            options,
            strategies=strategies_from(args),
            plugin_manager=pm,
            reader=reader_from(args),
        )
        values = {**model.engine, **engine}
        if "max_model_len" not in values:
            raise ConfigError("max_model_len is not set: give --max-model-len")
        plan = Planner(strategies_from(args), plugin_manager=pm).plan(
            model.specs, memory, EngineConfig.from_dict(values)
        )
    except KVRulesError as exc:
        row["error"] = re.sub(r"^\S+\.json: ", "", error_text(exc).split("\n")[0])
        return row
    eff = efficiency(plan)
    row.update(
        block_size=model.block_size,
        groups=len(plan.groups),
        num_blocks=plan.num_blocks,
        max_concurrency=None if math.isinf(plan.max_concurrency) else round(plan.max_concurrency, 4),
        capacity_tokens=plan.capacity_tokens,
        efficiency=None if eff is None else round(eff, 4),
    )
    return row


@dataclass
class SweepInput:
    """What every combination of a sweep shares: the model's configs, the option values the axes
    do not vary, the memory per worker and the engine settings."""

    config: Any
    draft: Any
    base: dict[str, Any]
    memory: list[int]
    engine: dict[str, Any]


def _fixed_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`HFOptions` fields set on the command line that no axis varies."""
    return {flag: getattr(args, flag) for flag in FIXED_FLAGS if getattr(args, flag, None) is not None}


def _engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Engine settings given on the command line."""
    names = ("max_model_len", "max_num_batched_tokens")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def sweep_input(args: argparse.Namespace) -> SweepInput:
    """The model and settings to sweep, from ``--example`` or ``--hf-config`` and the flags.

    :raises ModelFileError: neither ``--example`` nor ``--hf-config``.
    :raises ConfigError: no memory from ``--memory`` or the example.
    """
    fixed, engine = _fixed_options(args), _engine_overrides(args)
    reader = reader_from(args)
    if args.example:
        example = load_hf_example_info(args.example, reader=reader)
        found = SweepInput(
            example.config,
            example.draft,
            {**example.options.to_dict(), **fixed},
            parse_sizes(args.memory) if args.memory else (example.available_memory or []),
            {**example.engine, **engine},
        )
    elif args.hf_config:
        found = SweepInput(
            args.hf_config, args.draft, fixed, parse_sizes(args.memory) if args.memory else [], engine
        )
    else:
        raise ModelFileError("give --hf-config PATH or --example hf-NAME")
    if not found.memory:
        raise ConfigError("no memory given: pass --memory (e.g. 70GiB)")
    return found


def combinations(args: argparse.Namespace, base: dict[str, Any]) -> list[tuple[int, str, int]]:
    """Every (TP size, KV-cache dtype, speculative tokens) to plan; an axis not given on the
    command line takes its one value from ``base``."""
    tps = (
        flags.integer_list(args.tp, "--tp", minimum=1, maximum=MAX_DIMENSION)
        if args.tp
        else [base.get("tensor_parallel_size", 1)]
    )
    kvs = _dtypes(args.kv_cache_dtype) if args.kv_cache_dtype else [base.get("kv_cache_dtype", "auto")]
    ks = (
        flags.integer_list(
            args.num_speculative_tokens, "--num-speculative-tokens", minimum=0, maximum=MAX_TOKENS
        )
        if args.num_speculative_tokens
        else [base.get("num_speculative_tokens", 0)]
    )
    return list(itertools.product(tps, kvs, ks))


def run_sweep(
    found: SweepInput, combos: list[tuple[int, str, int]], args: argparse.Namespace, pm: Any
) -> list[dict[str, Any]]:
    """One :func:`sweep_row` per combination, with a progress line on a terminal."""
    rows = []
    with Progress(len(combos), "kvrules sweep") as bar:
        for tp, kv, k in combos:
            options = HFOptions.from_dict(
                {**found.base, "tensor_parallel_size": tp, "kv_cache_dtype": kv, "num_speculative_tokens": k}
            )
            rows.append(sweep_row(found.config, found.draft, options, found.memory, found.engine, args, pm))
            bar.update(f"tp {tp} {kv} k={k}")
    return rows


def _table_row(row: dict[str, Any]) -> list[Any]:
    """One row of the sweep table: the combination, then its figures or its error."""
    axes = [row[axis] for axis in AXES]
    if "error" in row:
        return [*axes, *["-"] * 6, "error: " + row["error"][:100]]
    eff = "-" if row["efficiency"] is None else f"{100 * row['efficiency']:.1f}%"
    mc = "unlimited" if row["max_concurrency"] is None else f"{row['max_concurrency']:.2f}"
    return [
        *axes,
        row["block_size"],
        row["groups"],
        f"{row['num_blocks']:,}",
        mc,
        f"{row['capacity_tokens']:,}",
        eff,
        "ok",
    ]


def render_sweep(rows: list[dict[str, Any]], title: str, memory: list[int]) -> str:
    """The sweep report: a heading line and one table row per combination."""
    heading = (
        f"kvrules sweep: {title} ({len(rows)} combinations, memory per worker "
        f"{', '.join(format_size(m) for m in memory)})"
    )
    return heading + "\n" + table(list(HEADERS), [_table_row(r) for r in rows])


def cmd_sweep(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    found = sweep_input(args)
    rows = run_sweep(found, combinations(args, found.base), args, pm)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(render_sweep(rows, args.example or args.hf_config, found.memory))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``sweep`` sub-command."""
    p = subparsers.add_parser(
        "sweep", help="plan a Hugging Face model over TP sizes, KV dtypes and draft tokens"
    )
    p.add_argument("--hf-config", metavar="PATH", help="a config.json, or a directory holding one")
    p.add_argument("--example", metavar="NAME", help="a built-in hf-* example")
    p.add_argument("--draft", metavar="CONFIG|mtp", help="the draft model's config.json, or 'mtp'")
    p.add_argument("--memory", metavar="SIZE[,SIZE...]", help="KV-cache memory per worker, e.g. 70GiB")
    p.add_argument(
        "--max-model-len", type=flags.TOKENS, metavar="N", help="longest request (default: the config's)"
    )
    p.add_argument("--max-num-batched-tokens", type=flags.TOKENS_OR_ZERO, metavar="N")
    p.add_argument("--tp", metavar="N[,N...]", help="tensor-parallel sizes, e.g. 1,2,4,8")
    p.add_argument("--kv-cache-dtype", metavar="DTYPE[,DTYPE...]", help="KV-cache dtypes, e.g. auto,fp8")
    p.add_argument("--num-speculative-tokens", metavar="K[,K...]", help="speculative tokens, e.g. 0,4")
    p.add_argument("--draft-kv-cache-dtype", choices=tuple(KV_CACHE_DTYPES), metavar="DTYPE")
    p.add_argument("--block-size", type=flags.TOKENS, metavar="N")
    p.add_argument("--mamba-cache-mode", choices=("none", "align", "all"))
    p.add_argument("--mamba-ssm-cache-dtype", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--attention-backend", metavar="NAME")
    p.add_argument("--hf-reader", choices=READERS, help="how config.json is read (default auto; see plan)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_common(p)
    p.set_defaults(func=cmd_sweep)
