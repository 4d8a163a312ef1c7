"""What one fuzz input ended in, and the key that groups inputs failing for the same cause.

Kinds: ``ok`` (a result that keeps every invariant), ``error`` (a :class:`kvrules.KVRulesError`,
or exit 2 with a ``kvrules: error:`` message), ``other`` (any other exception, a traceback, exit
1, a crash), ``hang`` (more than the time limit), ``broken`` (a result that breaks an invariant),
and for faulty plugins ``blame`` (a KVRulesError that does not name the faulty plugin, or names
a built-in one).
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

OK = "ok"
ERROR = "error"
OTHER = "other"
HANG = "hang"
BROKEN = "broken"
BLAME = "blame"
KINDS = (OK, ERROR, OTHER, HANG, BROKEN, BLAME)
DEFECTS = frozenset({OTHER, HANG, BROKEN, BLAME})

#: seconds after which an input counts as a hang
HANG_SECONDS = 10

_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    """One input's end: its kind, a one-line detail, and the place that caused it.

    :ivar where: ``file:function`` of the innermost kvrules frame of an exception, or the
        invariant that broke; with :attr:`kind` and :attr:`error_type` it is the cause key.
    """

    kind: str
    detail: str = ""
    error_type: str = ""
    where: str = ""

    @property
    def is_defect(self) -> bool:
        """True for the kinds that are defects (other, hang, broken, blame)."""
        return self.kind in DEFECTS

    @property
    def cause(self) -> tuple[str, str, str]:
        """The key grouping inputs that fail for one cause."""
        return (self.kind, self.error_type, self.where)


class Hang(BaseException):
    """Raised by :func:`time_limit` when the limit passes (a BaseException: no ``except Exception``
    in kvrules can swallow it)."""


@contextmanager
def time_limit(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Raise :class:`Hang` in this (main) thread once ``seconds`` pass."""

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(_ROOT))
    except ValueError:
        parts = Path(path).parts
        for anchor in ("kvrules", "kvrules_plugins", "plugins"):
            if anchor in parts:
                return os.path.join(*parts[parts.index(anchor) :])
        return Path(path).name


def _is_project(path: str) -> bool:
    short = _short(path)
    return short.startswith(("kvrules/", "plugins/", "kvrules_plugins/"))


def origin(exc: BaseException) -> str:
    """``file:line function`` of the innermost kvrules (or built-in plugin) frame of ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if _is_project(f.filename)]
    frame = inside[-1] if inside else (frames[-1] if frames else None)
    if frame is None:
        return "?"
    return f"{_short(frame.filename)}:{frame.lineno} {frame.name}"


def head(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, shortened."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " | ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cause_place(where: str) -> str:
    """``file function`` of an :func:`origin` (the line number dropped, so edits keep the key)."""
    file, _, rest = where.partition(":")
    _, _, function = rest.partition(" ")
    return f"{file} {function}".strip()


def from_exception(exc: BaseException) -> Outcome:
    """The outcome of an exception that escaped: a KVRulesError is ``error``, a :class:`Hang`
    is ``hang``, anything else ``other``."""
    import kvrules

    if isinstance(exc, Hang):
        return Outcome(HANG, head(exc), "Hang", cause_place(origin(exc)))
    if isinstance(exc, kvrules.KVRulesError):
        return Outcome(ERROR, head(exc), type(exc).__name__)
    where = origin(exc)
    return Outcome(OTHER, f"{head(exc)} [{where}]", type(exc).__name__, cause_place(where))
