"""The ``kvrules`` command line: ``plan``, ``strategies``, ``examples``.

Exit codes: 0 success, 2 a user error (a :class:`~kvrules.KVRulesError`: message, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from kvrules.config import EngineConfig
from kvrules.errors import ConfigError, KVRulesError, ModelFileError
from kvrules.hf.cli import add_hf_arguments, hf_model_from_args, with_model_decisions
from kvrules.modelfile import ModelFile, example_names, load_example, load_model_file
from kvrules.planner import Planner
from kvrules.plugin_manager import KVRulesPluginManager, get_plugin_manager
from kvrules.render import render_plan, render_rules
from kvrules.strategies import resolve_strategies
from kvrules.summary import render_summary
from kvrules.units import parse_sizes

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(fmt: str, level: str) -> None:
    """Render structlog events to stderr as console lines or JSON lines (the CLI's choice only)."""
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--strategies",
        action="append",
        metavar="SET",
        help="preset name or comma-separated rule names (repeatable; default: the default set)",
    )
    parser.add_argument(
        "--block", action="append", default=[], metavar="PLUGIN", help="block a plugin by name"
    )
    parser.add_argument(
        "--no-autoload", action="store_true", help="do not load third-party plugins from entry points"
    )
    parser.add_argument("--trace", action="store_true", help="print every plugin hook call to stderr")
    parser.add_argument(
        "--log-format", choices=("console", "json"), default=None, help="log rendering (stderr)"
    )
    parser.add_argument(
        "--log-level",
        choices=tuple(LEVELS),
        default=None,
        help="log level (default: warning; debug when --log-format is given, to show every decision)",
    )


def plugin_manager_from(args: argparse.Namespace) -> KVRulesPluginManager:
    """A plugin manager honouring ``--block``, ``--no-autoload`` and ``--trace``."""
    from kvrules.plugin_manager import enable_trace

    pm = get_plugin_manager(autoload=not args.no_autoload, blocked=args.block)
    if args.trace:
        enable_trace(pm)
    return pm


def strategies_from(args: argparse.Namespace) -> str | list[str] | None:
    """``--strategies`` values as a preset name or a rule list."""
    if not args.strategies:
        return None
    names = [n.strip() for value in args.strategies for n in value.split(",") if n.strip()]
    return names[0] if len(names) == 1 else names


def load_model(args: argparse.Namespace, pm: KVRulesPluginManager) -> tuple[ModelFile, str]:
    """The model file or built-in example named on the command line, and a title for it."""
    hf = hf_model_from_args(args, pm, strategies_from(args) if hasattr(args, "strategies") else None)
    if hf is not None:
        return hf
    spec_types = pm.registries.spec_types.classes
    if args.example:
        return load_example(args.example, spec_types), f"example {args.example!r}"
    if not args.file:
        raise ModelFileError(
            "give a model file (kvrules plan FILE) or --example NAME (see `kvrules examples`)"
        )
    return load_model_file(args.file, spec_types), str(args.file)


def engine_config(model: ModelFile, args: argparse.Namespace) -> EngineConfig:
    """Engine settings from the model file, overridden by command-line flags."""
    values = dict(model.engine)
    if getattr(args, "max_model_len", None) is not None:
        if args.max_model_len == "auto":
            values["auto_fit_max_model_len"] = True
        else:
            try:
                values["max_model_len"] = int(args.max_model_len)
            except ValueError:
                raise ConfigError(
                    f"--max-model-len {args.max_model_len!r} must be an integer or 'auto'"
                ) from None
    for flag in ("max_num_batched_tokens", "num_gpu_blocks_override"):
        if getattr(args, flag, None) is not None:
            values[flag] = getattr(args, flag)
    if getattr(args, "disable_hybrid_kv_cache_manager", False):
        values["disable_hybrid_kv_cache_manager"] = True
    if "max_model_len" not in values:
        raise ConfigError(
            "max_model_len is not set: give --max-model-len or 'engine.max_model_len' in the model file"
        )
    return EngineConfig.from_dict(values)


def apply_workers(model: ModelFile, args: argparse.Namespace) -> None:
    """``--workers N``: split the layers into N contiguous pipeline stages."""
    n = getattr(args, "workers", None)
    if n is None:
        return
    if n < 1:
        raise ConfigError(f"--workers {n} must be >= 1")
    names = list(model.specs)
    if n > len(names):
        raise ConfigError(f"--workers {n} is more than the {len(names)} layers of the model")
    if model.workers and len(model.workers) != n:
        raise ConfigError(f"the model file lists {len(model.workers)} workers but --workers is {n}")
    if not model.workers:
        size, extra = divmod(len(names), n)
        bounds = [i * size + min(i, extra) for i in range(n + 1)]
        model.workers = [names[bounds[i] : bounds[i + 1]] for i in range(n)]


def memory_from(model: ModelFile, args: argparse.Namespace) -> list[int]:
    """Per-worker memory from ``--memory`` or the model file."""
    if getattr(args, "memory", None):
        return parse_sizes(args.memory)
    if model.available_memory:
        return model.available_memory
    raise ConfigError("no memory given: pass --memory (e.g. 40GiB, or 40GiB,40GiB per worker)")


def cmd_plan(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    model, title = load_model(args, pm)
    apply_workers(model, args)
    config = engine_config(model, args)
    memory = memory_from(model, args)
    planner = Planner(strategies_from(args), plugin_manager=pm)
    plan = with_model_decisions(planner.plan(model.worker_specs(), memory, config), model)
    if args.output:
        Path(args.output).write_text(plan.to_json() + "\n", encoding="utf-8")
    if getattr(args, "picture", None):
        from kvrules.picture import draw_layout

        draw_layout(plan, args.picture, title=f"kvrules plan: {title}")
    if args.json:
        print(plan.to_json())
    else:
        print(render_plan(plan, f"kvrules plan: {title}"))
        print()
        print(render_summary(plan))
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    pm = plugin_manager_from(args)
    active = resolve_strategies(strategies_from(args), pm.registries.rules)
    print(render_rules(pm.registries, active))
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    for name in example_names():
        model = load_example(name)
        print(f"{name:20s} {len(model.specs):4d} layers  {model.description}")
    return 0


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Model input and engine flags shared by commands that plan."""
    parser.add_argument("file", nargs="?", help="model file (JSON or TOML)")
    parser.add_argument("--example", metavar="NAME", help="a built-in example (see `kvrules examples`)")
    parser.add_argument("--memory", metavar="SIZE[,SIZE...]", help="KV-cache memory per worker, e.g. 40GiB")
    parser.add_argument("--max-model-len", metavar="N|auto", help="longest request; 'auto' fits it to memory")
    parser.add_argument("--max-num-batched-tokens", type=int, metavar="N")
    parser.add_argument("--num-gpu-blocks-override", type=int, metavar="N")
    parser.add_argument("--disable-hybrid-kv-cache-manager", action="store_true")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="split the layers into N pipeline stages in layer order (when the model file lists none)",
    )
    add_hf_arguments(parser)


#: modules that add sub-commands; each defines ``register(subparsers, add_common)`` where
#: ``add_common(parser)`` adds the shared flags (--strategies, --block, --log-format, ...)
COMMAND_MODULES: tuple[str, ...] = (
    "kvrules.cli_allocate",
    "kvrules.cli_compare",
    "kvrules.cli_specs",
    "kvrules.cli_sweep",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvrules", description="Plan KV-cache memory for LLM inference engines."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="plan a model's KV cache and print the layout")
    add_plan_arguments(p)
    p.add_argument(
        "--json", action="store_true", help="print the whole plan as JSON (schema kvrules.plan/v1)"
    )
    p.add_argument("-o", "--output", metavar="PATH", help="also write the plan JSON to PATH")
    p.add_argument(
        "--picture", metavar="PATH", help="draw the memory layout to PATH (.svg or .png; needs kvrules[plot])"
    )
    _common(p)
    p.set_defaults(func=cmd_plan)
    s = sub.add_parser("strategies", help="list every registered rule and preset")
    _common(s)
    s.set_defaults(func=cmd_strategies)
    e = sub.add_parser("examples", help="list the built-in examples")
    e.set_defaults(func=cmd_examples, log_format=None, log_level=None)
    for module in COMMAND_MODULES:
        register: Callable[[Any, Callable[[argparse.ArgumentParser], None]], None] = importlib.import_module(
            module
        ).register
        register(sub, _common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    fmt = getattr(args, "log_format", None)
    level = getattr(args, "log_level", None) or ("debug" if fmt else "warning")
    configure_logging(fmt or "console", level)
    try:
        return int(args.func(args))
    except KVRulesError as exc:
        print(f"kvrules: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
