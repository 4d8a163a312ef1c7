"""The counting both parity conftests share; ``scripts/vllm-parity`` copies it beside them as
``tests/kvrules_parity_counting.py`` in vLLM's test tree (imported relatively there).

A test is "reached" when kvrules planned during it (a call through a method wrapped with
:func:`counting`); the rest are "not applicable". :data:`EXPECTED_FAILURES` (filled by the
conftest) lists, by test function without parameters, the failures expected by design with
their reason. :func:`finish` makes the run's exit status 0 exactly when every failure is an
expected one and every expected one failed; :func:`report_failures` prints them.

A test "fell back" when kvrules handed a seam call to vLLM's own function during it
(``kvrules.integrations.vllm.fallbacks()``, cleared before each test by :func:`forget_fallbacks`
and read after it by :func:`note_fallbacks`); :func:`write_table` and :func:`report_fallbacks`
print the per-file table and the reasons.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterator
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


# -- fallbacks: kvrules handed a seam call to vLLM's own function ---------------------------------
#: test node id -> the fallbacks recorded during it, each as (error type, seam, message)
FELL_BACK: dict[str, list[tuple[str, str, str]]] = {}
#: a fallback decision's reason: "... (ERROR in SEAM on N layers: MESSAGE); vLLM's own planner ..."
_REASON = re.compile(r"\((\w+) in ([\w.]+) on \d+ layers?: (.*)\); vLLM's own planner", re.S)


def forget_fallbacks() -> None:
    """Clear the process's fallback decisions (before a test)."""
    from kvrules.integrations import vllm_fallback

    vllm_fallback.reset()


def note_fallbacks(nodeid: str) -> None:
    """Record the fallback decisions made since :func:`forget_fallbacks` against ``nodeid``."""
    from kvrules.integrations import vllm as kv

    found = []
    for decision in kv.fallbacks():
        match = _REASON.search(decision.reason)
        found.append(match.groups() if match else ("?", "?", decision.reason))
    if found:
        FELL_BACK[nodeid] = found


def file_rows() -> list[tuple[str, int, int, str, str]]:
    """Per test file: (path, passed, failed, not applicable as "N" or "N (s skipped)", fell back
    as "N" or "N (p passed, f failed)"). A test that fell back counts there only; passed and
    failed count the other tests during which kvrules answered (``REACHED``)."""
    rows = []
    for path in sorted({n.split("::")[0] for n in OUTCOMES}):
        mine = {n: o for n, o in OUTCOMES.items() if n.startswith(path + "::")}
        fell = [o for n, o in mine.items() if n in FELL_BACK]
        applicable = [o for n, o in mine.items() if REACHED.get(n) and n not in FELL_BACK]
        rest = [o for n, o in mine.items() if not REACHED.get(n) and n not in FELL_BACK]
        skipped = rest.count("skipped")
        na = f"{len(rest)} ({skipped} skipped)" if skipped else f"{len(rest)}"
        back = f"{len(fell)} ({fell.count('passed')} passed, {fell.count('failed')} failed)" if fell else "0"
        rows.append((path, applicable.count("passed"), applicable.count("failed"), na, back))
    return rows


def write_table(write: Callable[[str], None]) -> None:
    """The per-file table of :func:`file_rows` (markdown)."""
    write("| file | passed | failed | not applicable | fell back |")
    write("|---|---|---|---|---|")
    for path, passed, failed, na, back in file_rows():
        write(f"| {path} | {passed} | {failed} | {na} | {back} |")


def report_fallbacks(write: Callable[[str], None]) -> None:
    """One line per (test file, error type, seam, message with its numbers as N): the tests, their
    outcomes and the first message."""
    rows: dict[tuple[str, str, str, str], tuple[str, list[str]]] = {}
    for nodeid, found in FELL_BACK.items():
        for error, seam, message in dict.fromkeys(found):
            key = (nodeid.split("::", 1)[0], error, seam, re.sub(r"\d+", "N", message))
            rows.setdefault(key, (message, []))[1].append(nodeid)
    for (path, error, seam, _), (message, nodeids) in rows.items():
        outcomes = [OUTCOMES.get(n, "?") for n in nodeids]
        tests = list(dict.fromkeys(n.split("::", 1)[1].split("[", 1)[0] for n in nodeids))
        more = f", +{len(tests) - 3} more" if len(tests) > 3 else ""
        write(
            f"  fell back, {len(nodeids)} tests of {path} ({outcomes.count('passed')} passed, "
            f"{outcomes.count('failed')} failed; {', '.join(tests[:3])}{more}): {error} in {seam}: "
            f"{message[:220]}"
        )


def report_expected(
    write: Callable[[str], None], expected: list[str], known_bugs: Collection[str] = ()
) -> None:
    """Each listed failure that failed, by test function: "expected by design", or "KNOWN KVRULES
    BUG" for those in ``known_bugs``."""
    for base, reason in EXPECTED_FAILURES.items():
        hits = [
            n.split("[", 1)[1].rstrip("]") if "[" in n else "" for n in expected if n.split("[", 1)[0] == base
        ]
        if hits:
            kind = "KNOWN KVRULES BUG" if base in known_bugs else "expected by design"
            params = f" [{', '.join(hits)}]" if any(hits) else ""
            write(f"  {kind}, {len(hits)} x {base}{params}: {reason}")
