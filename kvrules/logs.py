"""Where kvrules' log events go: the application's structlog, else the stdlib logger ``kvrules``.

A library never writes to stdout or stderr by itself. structlog, when an application never
configured it, prints every level to stdout, which breaks every program that prints JSON. So every
kvrules event goes through this module, which decides *at emit time* (never at import):

- the application configured structlog (``structlog.is_configured()``): the event goes through
  structlog as ``event`` with ``fields`` as keys of the event dict, exactly as a direct structlog
  call would (``structlog.testing.capture_logs()`` sees it whole);
- otherwise: the event goes to the standard library logger ``kvrules``
  (``logging.getLogger("kvrules")``), and only when that logger is enabled for the event's level.
  It is silent until the application asks for it (``logging.basicConfig(level=logging.INFO)``, or a
  handler and level on ``kvrules``). The record's message reads ``kvrules.plan.finished layers=84
  groups=7 ...``; a handler gets the structured data back from ``record.kvrules_event`` (the event
  name) and ``record.kvrules_fields`` (the dict of fields).

For many events in a row (one ``kvrules.decision`` per layer, up to 100,000 per plan) ask
:func:`emitter` once and call what it returns; it is ``None`` when nobody listens, so the caller
skips building the fields altogether.

This module is a leaf: it imports only the standard library. structlog is looked for in
``sys.modules`` instead of imported: an application that never imported structlog cannot have
configured it, and importing it costs a process 0.2-0.35 s where ``rich`` is installed (as in
every vLLM install, whose processes all import kvrules through its general plugin).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Protocol

__all__ = ["LOGGER_NAME", "Emitter", "debug", "emitter", "error", "info", "listening", "warning"]

#: the name of the stdlib logger (and of the structlog logger) kvrules' events go to
LOGGER_NAME = "kvrules"

#: the level names structlog's bound loggers have methods for
_METHODS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}

_stdlib = logging.getLogger(LOGGER_NAME)
_proxy: Any = None


def _configured_structlog() -> Any:
    """structlog's logger ``kvrules`` (a lazy proxy, built from the configuration per call) when
    the application configured structlog, else ``None``."""
    global _proxy
    module = sys.modules.get("structlog")
    if module is None or not module.is_configured():
        return None
    if _proxy is None:
        _proxy = module.get_logger(LOGGER_NAME)
    return _proxy


def _install_null_handler(logger: logging.Logger) -> None:
    """Give ``logger`` one :class:`logging.NullHandler` (the stdlib's advice for libraries).

    A handler on ``kvrules`` keeps the stdlib's "last resort" handler, which prints records of
    WARNING and above to stderr when the application configured no logging at all, from ever
    printing a kvrules record: the library stays silent by itself whatever level a future event
    has. It discards what it gets and changes nothing else: records still propagate to the
    application's handlers (``logging.basicConfig``, pytest's ``caplog``), and the logger's level
    is left alone, so ``isEnabledFor`` answers from the application's configuration.
    """
    if not any(type(h) is logging.NullHandler for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


_install_null_handler(_stdlib)


class Emitter(Protocol):
    """What :func:`emitter` returns: call it as ``emit("kvrules.decision", stage=..., ...)``."""

    def __call__(self, event: str, /, **fields: Any) -> Any: ...


#: a string printed as it is in a ``key=value`` message: not empty, no space, ``=`` or quote
_BARE = re.compile(r"[^\s='\"]+")


def _plain(value: object) -> str:
    """``value`` for a ``key=value`` message: a simple string as it is, anything else as ``repr``."""
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    return repr(value)


class _Message:
    """A record's message, rendered only when a handler asks for it (``record.getMessage()``)."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: dict[str, Any]) -> None:
        self.event = event
        self.fields = fields

    def __str__(self) -> str:
        return " ".join([self.event, *(f"{k}={_plain(v)}" for k, v in self.fields.items())])


def _to_stdlib(level: int, event: str, fields: dict[str, Any], stacklevel: int) -> None:
    _stdlib.log(
        level,
        "%s",
        _Message(event, fields),
        extra={"kvrules_event": event, "kvrules_fields": fields},
        stacklevel=stacklevel + 1,
    )


def _structlog_enabled(bound: Any, level: int) -> bool:
    """Whether a concrete structlog logger passes ``level`` (its own ``is_enabled_for`` decides)."""
    check = getattr(bound, "is_enabled_for", None)
    return True if check is None else bool(check(level))


def _method(level: int) -> str:
    try:
        return _METHODS[level]
    except KeyError:
        raise ValueError(
            f"level {level!r} is not one of logging's DEBUG, INFO, WARNING, ERROR, CRITICAL"
        ) from None


def _emit(level: int, event: str, fields: dict[str, Any]) -> None:
    proxy = _configured_structlog()
    if proxy is not None:
        getattr(proxy, _METHODS[level])(event, **fields)
    elif _stdlib.isEnabledFor(level):
        _to_stdlib(level, event, fields, stacklevel=3)


def info(event: str, **fields: Any) -> None:
    """Emit ``event`` at INFO: through structlog when it is configured, else to the ``kvrules`` logger.

    The stdlib record is made only when ``logging.getLogger("kvrules").isEnabledFor(logging.INFO)``.
    """
    _emit(logging.INFO, event, fields)


def debug(event: str, **fields: Any) -> None:
    """Emit ``event`` at DEBUG (as :func:`info` does at INFO)."""
    _emit(logging.DEBUG, event, fields)


def warning(event: str, **fields: Any) -> None:
    """Emit ``event`` at WARNING (as :func:`info` does at INFO)."""
    _emit(logging.WARNING, event, fields)


def error(event: str, **fields: Any) -> None:
    """Emit ``event`` at ERROR (as :func:`info` does at INFO)."""
    _emit(logging.ERROR, event, fields)


def listening(level: int = logging.DEBUG) -> bool:
    """Whether an event at ``level`` would go anywhere right now.

    With structlog configured: whether its logger passes ``level`` (a ``make_filtering_bound_logger``
    at WARNING does not pass DEBUG; a logger without ``is_enabled_for`` is taken to pass everything).
    Otherwise: ``logging.getLogger("kvrules").isEnabledFor(level)``.
    """
    proxy = _configured_structlog()
    if proxy is not None:
        return _structlog_enabled(proxy.bind(), level)
    return _stdlib.isEnabledFor(level)


def emitter(level: int) -> Emitter | None:
    """A callable that emits events at ``level``, or ``None`` when nobody listens at that level.

    The route is decided once, when it is asked for, with the rules of :func:`info` and
    :func:`listening`: with structlog configured it is the level's method of a logger bound from
    the configuration of that moment (so each event costs one structlog call, and
    ``capture_logs()`` sees every event); otherwise it sends to the ``kvrules`` stdlib logger
    (which still checks its level per event). Ask again after the configuration changes; the
    decision log asks once per :class:`~kvrules.decisions.DecisionLog`, so once per plan.

    :param level: ``logging.DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL``.
    :raises ValueError: for any other level.
    """
    method = _method(level)
    proxy = _configured_structlog()
    if proxy is not None:
        bound = proxy.bind()
        if not _structlog_enabled(bound, level):
            return None
        emit: Emitter = getattr(bound, method)
        return emit
    if not _stdlib.isEnabledFor(level):
        return None

    def to_stdlib(event: str, /, **fields: Any) -> None:
        _to_stdlib(level, event, fields, stacklevel=2)

    return to_stdlib
