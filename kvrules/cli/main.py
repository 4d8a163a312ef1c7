"""The ``kvrules`` command line: one module per command, registered here by static import.

Exit codes: 0 success, 2 a user error (a :class:`~kvrules.KVRulesError`: message, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from kvrules.cli import allocate, compare, listing, plan, specs, sweep
from kvrules.cli.common import configure_logging
from kvrules.errors import ConfigError, KVRulesError

COMMANDS = (plan, listing, allocate, compare, specs, sweep)
"""Command modules, in the order their sub-commands are listed; each has ``register(subparsers)``."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, whose usage errors (an unknown flag, a bad ``--tp`` value) are
    :class:`~kvrules.ConfigError` s, reported by :func:`main` like every other user error."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="kvrules", description="Plan KV-cache memory for LLM inference engines.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a :class:`~kvrules.KVRulesError` (usage errors included) is printed as
    ``kvrules: error: MESSAGE`` on stderr and returns 2."""
    try:
        args = build_parser().parse_args(argv)
        fmt = getattr(args, "log_format", None)
        level = getattr(args, "log_level", None) or ("debug" if fmt else "warning")
        configure_logging(fmt or "console", level)
        return int(args.func(args))
    except KVRulesError as exc:
        print(f"kvrules: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
