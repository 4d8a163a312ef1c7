"""The command line under fuzz: ``kvrules.cli.main.main(argv)`` in a forked child.

The parent has imported kvrules already, so a fork costs milliseconds and every input runs in a
fresh copy of the process: a crash, a hang or memory exhaustion ends the child, not the run. The
child arms ``signal.alarm`` (a hang is killed by SIGALRM), caps its address space, sends its
standard streams where a terminal's would go (stdout encodes UTF-8 strictly, stderr with
``backslashreplace``, as Python's own do), and reports over a pipe: the exit code, the tail of
stderr, and the class, message and origin of any exception that escaped ``main`` (the traceback
a user would see). On exit 0 of a ``plan`` that wrote its JSON (``-o``), the child also reads the
plan back and checks every invariant.
"""

from __future__ import annotations

import gc
import io
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fuzz.invariants import InvariantBroken, check_plan_invariants
from fuzz.outcome import BROKEN, ERROR, HANG, HANG_SECONDS, OK, OTHER, Outcome, cause_place, head, origin

#: extra address space a child may map beyond what the parent had (MemoryError past it)
MEMORY_CAP = 3 << 30
#: the last characters of a child's stderr its report carries (a trace, a warning and an error
#: line quoting a long value all fit)
STDERR_TAIL = 1 << 16


class _Tail(io.RawIOBase):
    """A raw stream keeping the last ``limit`` bytes written (``limit`` 0: none)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if self.limit:
            self.data += bytes(b)
            del self.data[: max(0, len(self.data) - self.limit)]
        return len(b)


def _virtual_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _plan_check(argv: Sequence[str]) -> dict[str, Any] | None:
    """The invariants of the plan a successful ``plan -o PATH`` wrote (``None``: nothing to check)."""
    if not argv or argv[0] != "plan" or "-o" not in argv:
        return None
    path = Path(argv[list(argv).index("-o") + 1])
    if not path.is_file():
        return None
    import kvrules
    from kvrules import default_manager

    types = default_manager().registries.spec_types.classes
    try:
        plan = kvrules.Plan.from_dict(json.loads(path.read_text(encoding="utf-8")), spec_types=types)
        workers = [{n: plan.specs[n] for g in w.groups for n in g.layer_names} for w in plan.workers]
        check_plan_invariants(plan, workers, [w.available_memory for w in plan.workers], spec_types=types)
    except InvariantBroken as broken:
        return {"broken": str(broken)[:400], "invariant": broken.invariant}
    except Exception as exc:
        return {
            "broken": f"the plan written by -o does not read back: {head(exc)}",
            "invariant": "round-trip",
        }
    return None


def _kvrules_main(argv: list[str]) -> int:
    from kvrules.cli.main import main

    return main(argv)


def _child(argv: Sequence[str], seconds: int, target: Callable[[list[str]], int]) -> dict[str, Any]:
    """Run ``target(argv)`` here (the child) and describe how it ended."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(seconds)
    limit = _virtual_size() + MEMORY_CAP
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    err = _Tail(STDERR_TAIL)
    sys.stdout = io.TextIOWrapper(_Tail(0), encoding="utf-8", errors="strict", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    report: dict[str, Any] = {}
    try:
        report["rc"] = target(list(argv))
    except SystemExit as exc:
        code = exc.code
        report["rc"] = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:
        report.update(rc=1, exc=head(exc), type=type(exc).__name__, where=origin(exc))
    if report["rc"] == 0 and "exc" not in report:
        report["check"] = _plan_check(argv)
    report["stderr"] = err.data.decode("utf-8", "replace")[-STDERR_TAIL:]
    return report


def _read(fd: int, pid: int, seconds: float) -> tuple[bytes, bool]:
    """Everything the child writes to ``fd`` until it closes it, or ``(data, True)`` when it
    is still running after ``seconds`` (it is killed)."""
    chunks = []
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)


def fork_main(
    argv: Sequence[str], seconds: int = HANG_SECONDS, target: Callable[[list[str]], int] = _kvrules_main
) -> dict[str, Any]:
    """How ``target(argv)`` (kvrules' ``main``) ends in a forked child: its report, plus
    ``signal`` when it was killed and ``hang`` when it outran ``seconds``."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    gc.freeze()  # the child never copies the parent's pages to collect the parent's objects
    pid = os.fork()
    if pid != 0:
        gc.unfreeze()
    if pid == 0:  # the child: never returns
        os.close(read)
        try:
            data = json.dumps(_child(argv, seconds, target)).encode()
        except BaseException as exc:
            data = json.dumps(
                {"rc": 1, "exc": f"the fuzz child failed: {head(exc)}", "type": "Child"}
            ).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write, view) :]
        os._exit(0)
    os.close(write)
    try:
        data, overran = _read(read, pid, seconds + 5)
    finally:
        os.close(read)
    _, status = os.waitpid(pid, 0)
    report: dict[str, Any] = json.loads(data) if data and not overran else {}
    if os.WIFSIGNALED(status):
        report["signal"] = os.WTERMSIG(status)
    report["hang"] = overran or report.get("signal") == signal.SIGALRM
    return report


def _error_line(stderr: str) -> bool:
    """True when stderr says ``kvrules: error: ...`` (or argparse's ``kvrules CMD: error:``) and
    shows no traceback."""
    if "Traceback (most recent call last)" in stderr:
        return False
    return any(line.startswith("kvrules") and ": error: " in line for line in stderr.splitlines())


def classify(report: dict[str, Any]) -> Outcome:
    """The outcome of a :func:`fork_main` report (see :mod:`fuzz.outcome`)."""
    if report.get("hang"):
        return Outcome(HANG, "still running at the time limit (killed)", "Hang", "")
    if "signal" in report:
        return Outcome(OTHER, f"killed by signal {report['signal']}", "Signal", str(report["signal"]))
    if "exc" in report:
        where = str(report.get("where", ""))
        return Outcome(OTHER, f"{report['exc']} [{where}]", str(report.get("type", "")), cause_place(where))
    rc = report.get("rc")
    stderr = str(report.get("stderr", ""))
    check = report.get("check")
    if rc == 0 and check:
        return Outcome(BROKEN, str(check["broken"]), "InvariantBroken", str(check["invariant"]))
    if rc == 0:
        return Outcome(OK)
    if rc == 2 and _error_line(stderr):
        line = next(x for x in stderr.splitlines() if ": error: " in x)
        return Outcome(ERROR, line[:300])
    return Outcome(OTHER, f"exit {rc}: {stderr.strip()[-300:]}", f"exit {rc}", "")


_WARM: list[bool] = []


def warm_up(commands: Sequence[Sequence[str]]) -> None:
    """Run ``commands`` once in this process (output discarded), so that every forked child
    starts with kvrules' lazy imports, plugin discovery and caches done."""
    if _WARM:
        return
    from contextlib import redirect_stderr, redirect_stdout

    from kvrules.cli.main import main

    for argv in commands:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            try:
                main(list(argv))
            except BaseException:  # a warm-up that fails still warmed what it reached
                pass
    _WARM.append(True)
    import structlog

    from fuzz.invariants import warm_up as warm_invariants

    structlog.reset_defaults()
    warm_invariants()


def run_cli(argv: Sequence[str], seconds: int = HANG_SECONDS) -> Outcome:
    """``main(argv)`` in a forked child, classified."""
    return classify(fork_main(argv, seconds))


__all__ = ["MEMORY_CAP", "STDERR_TAIL", "classify", "fork_main", "run_cli", "warm_up"]
