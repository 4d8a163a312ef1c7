"""The counting both parity conftests share; ``scripts/vllm-parity`` copies it beside them as
``tests/kvrules_parity_counting.py`` in vLLM's test tree (imported relatively there).

A test is "reached" when kvrules planned during it (a call through a method wrapped with
:func:`counting`); the rest are "not applicable". :data:`EXPECTED_FAILURES` (filled by the
conftest) lists, by test function without parameters, the failures expected by design with
their reason. :func:`finish` makes the run's exit status 0 exactly when every failure is an
expected one and every expected one failed; :func:`report_failures` prints them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CALLS = {"count": 0}
OUTCOMES: dict[str, str] = {}
DETAILS: dict[str, str] = {}
REACHED: dict[str, bool] = {}
#: test function (``path::name``, any parameters) -> why it fails by design with kvrules
EXPECTED_FAILURES: dict[str, str] = {}


def counting(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, counting its calls (so a test that planned through kvrules is told apart)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS["count"] += 1
        return method(*args, **kwargs)

    return wrapper


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = CALLS["count"]
    yield
    REACHED[item.nodeid] = CALLS["count"] > before


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        OUTCOMES[report.nodeid] = "failed"
        lines = str(report.longrepr).strip().splitlines()
        DETAILS[report.nodeid] = next((ln for ln in reversed(lines) if ln.startswith("E ")), "")[:400]
    elif report.skipped and OUTCOMES.get(report.nodeid) != "failed":
        OUTCOMES[report.nodeid] = "skipped"
    else:
        OUTCOMES.setdefault(report.nodeid, "passed")


def expected_reason(nodeid: str) -> str | None:
    """Why ``nodeid`` fails by design with kvrules selected, or None when it should pass."""
    return EXPECTED_FAILURES.get(nodeid.split("[", 1)[0])


def verdict() -> tuple[list[str], list[str], list[str]]:
    """(expected failures, unexpected failures, listed tests that did not fail), by node id; a
    failure that did not reach kvrules is unexpected (vLLM alone fails there)."""
    failed = {n for n, o in OUTCOMES.items() if o == "failed"}
    expected = sorted(n for n in failed if REACHED.get(n) and expected_reason(n))
    listed = {n for n in OUTCOMES if expected_reason(n)}
    return expected, sorted(failed - set(expected)), sorted(listed - failed)


def finish(session: pytest.Session, active: bool) -> None:
    """With kvrules selected (``active``), only an unexpected failure (or a listed one that
    passed) fails the run."""
    if active and OUTCOMES:
        _, unexpected, stale = verdict()
        session.exitstatus = 1 if unexpected or stale else 0


def report_failures(write: Callable[[str], None], expected: list[str]) -> None:
    """The unexpected and stale lines and the totals (each conftest words the expected ones)."""
    _, unexpected, stale = verdict()
    for nodeid in unexpected:
        where = "kvrules" if REACHED.get(nodeid) else "vLLM only"
        write(f"  UNEXPECTED FAILURE {nodeid} [{where}]: {DETAILS.get(nodeid, '')}")
    for nodeid in stale:
        write(f"  LISTED BUT NOT FAILED {nodeid} (update EXPECTED_FAILURES)")
    write(
        f"  {len(expected)} expected failures, {len(unexpected)} unexpected, {len(stale)} listed but not failed"
    )
