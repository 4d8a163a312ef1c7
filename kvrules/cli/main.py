"""The ``kvrules`` command line: one module per command, registered here by static import.

Exit codes: 0 success, 2 a user error (a :class:`~kvrules.KVRulesError`: message, no traceback),
1 the output could not be written (``> /dev/full``: one line on stderr; a closed pipe, as in
``| head -1``: nothing).

While a command runs, ``sys.stdout`` and ``sys.stderr`` are :class:`Output` streams: text their
encoding cannot take (a layer named ``层.0`` under ``PYTHONIOENCODING=ascii``) is written with
backslash escapes (``\\u5c42.0``) instead of failing, and a failed write is reported by
:func:`main`, not as a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, TextIO, cast

from kvrules.cli import allocate, compare, fit, flags, listing, plan, specs, sweep
from kvrules.cli.common import check_outputs, configure_logging, error_text
from kvrules.errors import ConfigError, KVRulesError

COMMANDS = (plan, fit, listing, allocate, compare, specs, sweep)
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


class OutputError(Exception):
    """A write to the standard output or error failed (the ``OSError`` is ``__cause__``).

    Not an ``OSError`` itself, so no handler of file errors on the way up (argparse's, a
    command's) mistakes it for its own.
    """

    def __init__(self, output: Output, error: OSError) -> None:
        super().__init__(f"cannot write to {output.name} ({error.strerror or error})")
        self.output = output
        self.error = error


def encodable(text: str, stream: Any) -> str:
    """``text``, or where ``stream``'s encoding (with its error handler) cannot take it, ``text``
    with backslash escapes for what it cannot (``\\u5c42``)."""
    if text.isascii():
        return text
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding, getattr(stream, "errors", None) or "strict")
    except UnicodeEncodeError:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:  # an encoding or error handler Python does not know: escape to ASCII
        return text.encode("ascii", "backslashreplace").decode("ascii")
    return text


class Output:
    """``sys.stdout`` or ``sys.stderr`` while a command runs (the one place its text is written):
    :func:`encodable` text, and a failed write or flush raised as :class:`OutputError`. Every
    other attribute is the stream's own."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self.stream = stream
        self.name = name

    def write(self, text: str) -> int:
        try:
            self.stream.write(encodable(text, self.stream))
        except OSError as exc:
            raise OutputError(self, exc) from exc
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            raise OutputError(self, exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def _outputs() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as :class:`Output` streams for the ``with`` block."""
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, Output(sys.stdout, "stdout"))
    sys.stderr = cast(TextIO, Output(sys.stderr, "stderr"))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at the null device, so that the interpreter's last
    flush of what the failed write left buffered cannot fail again (a stream without one, as in
    tests, is left alone)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _output_failed(exc: OutputError) -> int:
    """Exit status 1 for an output that could not be written: a closed pipe quietly (its
    reader has all it wanted), any other failure with one line on stderr."""
    _silence(exc.output.stream)
    if exc.output.name == "stdout" and not isinstance(exc.error, BrokenPipeError):
        with contextlib.suppress(OSError, OutputError):
            print(f"kvrules: error: {exc}", file=sys.stderr, flush=True)
    return 1


def _run(argv: list[str]) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
        except UsageError as exc:
            raise exc.with_hint(argv) from None
        check_outputs(args)
        fmt = getattr(args, "log_format", None)
        level = getattr(args, "log_level", None) or ("debug" if fmt else "warning")
        configure_logging(fmt or "console", level)
        return int(args.func(args))
    except KVRulesError as exc:
        print(f"kvrules: error: {error_text(exc)}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a :class:`~kvrules.KVRulesError` (usage errors included) is printed as
    ``kvrules: error: MESSAGE`` on stderr and returns 2; output that cannot be written returns 1
    (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _outputs():
        try:
            try:
                return _run(argv)
            finally:  # what is still buffered fails here, not in the interpreter's last flush
                sys.stdout.flush()
                sys.stderr.flush()
        except OutputError as exc:
            return _output_failed(exc)


if __name__ == "__main__":
    sys.exit(main())
