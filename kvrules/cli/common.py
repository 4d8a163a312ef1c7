"""What the ``kvrules`` commands share: the common flags, logging set-up for the command line,
the plugin manager and strategy set from flags, and loading a model with its engine settings."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import structlog

from kvrules.cli import flags
from kvrules.cli.hf import add_hf_arguments, hf_model_from_args
from kvrules.config import EngineConfig
from kvrules.errors import CapacityError, ConfigError, Fix, KVRulesError, ModelFileError
from kvrules.examples import load_example
from kvrules.hf.build import MTP
from kvrules.hf.config import config_path
from kvrules.model import ModelFile, load_model_file
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager, enable_trace, get_plugin_manager
from kvrules.report.picture import draw_layout
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


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--strategies",
        action="append",
        metavar="SET",
        help=(
            "preset name or comma-separated rule names, a preset first; -NAME removes rule NAME "
            "(write --strategies=-NAME or --strategies default,-NAME; repeatable; default: the "
            "default set)"
        ),
    )
    parser.add_argument(
        "--block",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "never load a plugin: NAME is a plugin name or a distribution name (all of its "
            "plugins); repeatable"
        ),
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
    pm = get_plugin_manager(autoload=not args.no_autoload, blocked=args.block)
    if args.trace:
        enable_trace(pm)
    return pm


#: the flag of each setting a :class:`~kvrules.errors.Fix` may name
FIX_FLAGS = {
    "max_model_len": "--max-model-len",
    "available_memory": "--memory",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
}


def cli_fix(fix: Fix) -> str:
    """``fix`` in the command line's words (``pass --max-model-len auto``); a setting without a
    flag keeps the Python API's words."""
    if fix.setting == "auto_fit_max_model_len" and fix.value is True:
        return f"pass {FIX_FLAGS['max_model_len']} {flags.AUTO}"
    flag = FIX_FLAGS.get(fix.setting)
    if flag is None:
        return str(fix)
    return f"give a larger {flag}" if fix.value is None else f"pass {flag} {fix.value}"


def error_text(exc: KVRulesError) -> str:
    """The message of ``exc`` as the command line prints it: fixes worded as flags."""
    text = exc.explained(cli_fix) if isinstance(exc, CapacityError) else str(exc)
    notes = getattr(exc, "__notes__", ())  # who raised it (a third-party rule, say)
    return "\n".join([text, *(str(note) for note in notes)])


def parse_set(value: str) -> str | list[str]:
    """One ``--strategies`` value as a preset/rule name or a rule list."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    return names[0] if len(names) == 1 else names


def strategies_from(args: argparse.Namespace) -> str | list[str] | None:
    """``--strategies`` values, the names of all of them in one, as a preset name or a rule list."""
    return parse_set(",".join(args.strategies)) if args.strategies else None


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
    length = getattr(args, "max_model_len", None)
    if length == flags.AUTO:
        values["auto_fit_max_model_len"] = True
    elif length is not None:
        values["max_model_len"] = length
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
    if n is None:  # else at least 1: flags.WORKERS parsed it
        return
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


def output_path(path: str | None, flag: str) -> Path | None:
    """``path`` of an output flag (``-o``, ``--picture``) checked before any work: a file name in
    an existing directory (``None`` when the flag is not given).

    :raises ConfigError: ``path`` is a directory or its directory does not exist.
    """
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory; give a file path, e.g. {p / 'plan.json'}")
    parent = p.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: the directory {parent} does not exist; create it first")
    return p


#: the argparse destinations of the files a command reads: what each is, how the flag is shown
INPUT_FLAGS = {
    "file": ("model file", "FILE"),
    "hf_config": ("Hugging Face config", "--hf-config"),
    "draft": ("draft config", "--draft"),
}
#: the argparse destinations of the files a command writes, and their flags
OUTPUT_FLAGS = {"output": "-o", "picture": "--picture"}


def _input_paths(args: argparse.Namespace) -> list[tuple[str, str, Path]]:
    """The files ``args`` reads: (what, flag, path); a config directory stands for its
    ``config.json``."""
    out = []
    for dest, (what, flag) in INPUT_FLAGS.items():
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value or (dest == "draft" and value == MTP):
            continue
        out.append((what, flag, config_path(value) if dest != "file" else Path(value)))
    return out


def _resolved(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a symbolic link loop
        return os.path.abspath(path)


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: :func:`os.path.samefile` when both exist (hard
    links included), else the same path once symbolic links are resolved."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except (OSError, ValueError):
        pass
    return _resolved(a) == _resolved(b)


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output file (``-o``, ``--picture``) that is one of the
    command's input files (``FILE``, ``--hf-config``, ``--draft``): writing it would destroy the
    input. Every command goes through here (:func:`kvrules.cli.main.main`).

    :raises ConfigError: naming both flags and the path.
    """
    inputs = _input_paths(args)
    for dest, flag in OUTPUT_FLAGS.items():
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        for what, in_flag, path in inputs:
            if same_file(Path(value), path):
                given = "" if in_flag == "FILE" else f"{in_flag} "
                raise ConfigError(
                    f"{flag} {value}: is the {what} {given}{path}; writing there would overwrite "
                    f"the input: give {flag} another path"
                )


def write_output(path: str, text: str, flag: str) -> None:
    """Write ``text`` to the output file of ``flag``.

    :raises ConfigError: the file cannot be written (naming the flag, the path and why).
    """
    output_path(path, flag)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise written_error(flag, path, exc) from None


def draw_picture(plan: Plan, path: str, title: str) -> None:
    """``--picture PATH``: ``plan``'s memory layout drawn to ``path``.

    :raises ConfigError: the file cannot be written (naming the flag and the path).
    """
    try:
        draw_layout(plan, path, title=title)
    except OSError as exc:
        raise written_error("--picture", path, exc) from None


def written_error(flag: str, path: str, exc: OSError) -> ConfigError:
    """The error for an output file of ``flag`` that could not be written."""
    return ConfigError(f"{flag} {path}: cannot write the file ({exc.strerror or exc})")


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Model input and engine flags shared by commands that plan."""
    parser.add_argument("file", nargs="?", help="model file (JSON or TOML)")
    parser.add_argument("--example", metavar="NAME", help="a built-in example (see `kvrules examples`)")
    parser.add_argument("--memory", metavar="SIZE[,SIZE...]", help="KV-cache memory per worker, e.g. 40GiB")
    parser.add_argument(
        "--max-model-len",
        type=flags.length_or_auto,
        metavar="N|auto",
        help="longest request; 'auto' fits it to memory",
    )
    parser.add_argument("--max-num-batched-tokens", type=flags.TOKENS_OR_ZERO, metavar="N")
    parser.add_argument("--num-gpu-blocks-override", type=flags.BLOCKS, metavar="N")
    parser.add_argument("--disable-hybrid-kv-cache-manager", action="store_true")
    parser.add_argument(
        "--workers",
        type=flags.WORKERS,
        metavar="N",
        help="split the layers into N pipeline stages in layer order (when the model file lists none)",
    )
    add_hf_arguments(parser)
