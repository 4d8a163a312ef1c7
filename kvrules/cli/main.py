"""The ``kvrules`` command line: one module per command, registered here by static import.

Exit codes: 0 success, 2 a user error (a :class:`~kvrules.KVRulesError`: message, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from kvrules.cli import allocate, compare, flags, listing, plan, specs, sweep
from kvrules.cli.common import configure_logging, error_text
from kvrules.errors import ConfigError, KVRulesError

COMMANDS = (plan, listing, allocate, compare, specs, sweep)
"""Command modules, in the order their sub-commands are listed; each has ``register(subparsers)``."""


class UsageError(ConfigError):
    """A usage error of argparse: its message and the (sub-)command that found it."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(f"{message} (see `{prog} --help`)")
        self.message = message
        self.prog = prog

    def with_hint(self, argv: Sequence[str]) -> ConfigError:
        """The error with :func:`~kvrules.cli.flags.dash_value_hint` for ``argv`` added."""
        hint = flags.dash_value_hint(self.message, argv)
        return ConfigError(f"{self.message}{hint} (see `{self.prog} --help`)") if hint else self


class ArgumentParser(argparse.ArgumentParser):
    """argparse, whose usage errors (an unknown flag, a bad ``--tp`` value) are
    :class:`~kvrules.ConfigError` s, reported by :func:`main` like every other user error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="kvrules", description="Plan KV-cache memory for LLM inference engines.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a :class:`~kvrules.KVRulesError` (usage errors included) is printed as
    ``kvrules: error: MESSAGE`` on stderr and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser().parse_args(argv)
        except UsageError as exc:
            raise exc.with_hint(argv) from None
        fmt = getattr(args, "log_format", None)
        level = getattr(args, "log_level", None) or ("debug" if fmt else "warning")
        configure_logging(fmt or "console", level)
        return int(args.func(args))
    except KVRulesError as exc:
        print(f"kvrules: error: {error_text(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
