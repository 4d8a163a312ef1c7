"""Progress for long command-line runs (sweeps): one updating line on stderr, only on a terminal.

Library code never prints; commands wrap their loop in :class:`Progress`. When stderr is not a
TTY (a pipe, a file, CI, tests) nothing is written at all.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO


class Progress:
    """``label [3/16] detail`` rewritten in place on ``stream`` (stderr) when it is a terminal.

    :param total: number of steps.
    :param label: what is being done.
    :param stream: where to write (stderr by default).
    :param enabled: force on or off (default: ``stream.isatty()``).
    """

    def __init__(
        self, total: int, label: str, stream: TextIO | None = None, enabled: bool | None = None
    ) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self._width = 0

    def update(self, detail: str = "") -> None:
        """Count one step done and redraw the line."""
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        line = f"{self.label} [{self.done}/{self.total}] {elapsed:5.1f}s {detail}".rstrip()
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        """Clear the line."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
