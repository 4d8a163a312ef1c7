"""conftest.py that ``scripts/vllm-parity`` places beside vLLM's own test file.

It replaces vLLM's repository-wide conftest (which needs a GPU build and the Hugging Face hub):
it defines the one fixture the file uses (``caplog_vllm``) and the ``cpu_test`` marker, and,
when ``KVRULES_PARITY_INSTALL`` names a strategy set, calls ``install()`` before the test file
is imported, so the names it imports from ``vllm.v1.core.kv_cache_utils`` are kvrules', and
again before every test (a test that reloads that module would otherwise undo it).

Every test is classified by whether it reached kvrules (any call into the three replaced
functions, direct or through vLLM's own code): tests that did not run vLLM's code only and are
counted "not applicable". The summary prints the counts and every failure: expected by design
(``EXPECTED_FAILURES``, with its reason) or not. With kvrules installed the run's exit status is
0 exactly when every failure is an expected one and every expected one failed.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CALLS = {"count": 0}
OUTCOMES: dict[str, str] = {}
DETAILS: dict[str, str] = {}
REACHED: dict[str, bool] = {}

#: test function (``path::name``, any parameters) -> why it fails by design with kvrules
EXPECTED_FAILURES: dict[str, str] = {
    "tests/v1/core/test_kv_cache_utils.py::test_unify_kv_cache_spec_page_size_mamba": (
        "its third part builds MambaSpec(shapes=((6144,),)) with the helper's two default dtypes; "
        "vLLM zips shapes with dtypes and drops the second dtype silently, kvrules refuses the "
        "spec with a SpecError naming the layer ('MambaSpec has 1 shapes but 2 dtypes'). The "
        "first two parts, the #43626 Mamba padding, reach kvrules and pass before that line"
    ),
}


def _counting(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS["count"] += 1
        return method(*args, **kwargs)

    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_test: CPU-only test")
    strategies = os.environ.get("KVRULES_PARITY_INSTALL")
    if not strategies:
        return
    from kvrules.integrations import vllm as kv_vllm

    for name in kv_vllm.DROP_IN_NAMES:
        setattr(kv_vllm.VllmAdapter, name, _counting(getattr(kv_vllm.VllmAdapter, name)))
    kv_vllm.install(kv_vllm.parse_strategies(strategies))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Re-assert the seam: vLLM's ``test_none_hash`` reloads ``kv_cache_utils``, which puts vLLM's
    own functions back; ``install()`` repairs that (and does nothing when nothing was undone)."""
    strategies = os.environ.get("KVRULES_PARITY_INSTALL")
    if strategies:
        from kvrules.integrations import vllm as kv_vllm

        kv_vllm.install(kv_vllm.parse_strategies(strategies))


@pytest.fixture()
def temporary_enable_log_propagate() -> Iterator[None]:
    logger = logging.getLogger("vllm")
    logger.propagate = True
    yield
    logger.propagate = False


@pytest.fixture()
def caplog_vllm(temporary_enable_log_propagate: None, caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    yield caplog


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
    """Why ``nodeid`` fails by design with kvrules installed, or None when it should pass."""
    return EXPECTED_FAILURES.get(nodeid.split("[", 1)[0])


def verdict() -> tuple[list[str], list[str], list[str]]:
    """(expected failures, unexpected failures, listed tests that did not fail), by node id; a
    failure that did not reach kvrules is unexpected (vLLM alone fails there)."""
    failed = {n for n, o in OUTCOMES.items() if o == "failed"}
    expected = sorted(n for n in failed if REACHED.get(n) and expected_reason(n))
    listed = {n for n in OUTCOMES if expected_reason(n)}
    return expected, sorted(failed - set(expected)), sorted(listed - failed)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With kvrules installed, only an unexpected failure (or a listed one that passed) fails the run."""
    if os.environ.get("KVRULES_PARITY_INSTALL") and OUTCOMES:
        _, unexpected, stale = verdict()
        session.exitstatus = 1 if unexpected or stale else 0


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not os.environ.get("KVRULES_PARITY_INSTALL"):
        return
    counts: dict[tuple[bool, str], int] = {}
    for nodeid, outcome in OUTCOMES.items():
        key = (REACHED.get(nodeid, False), outcome)
        counts[key] = counts.get(key, 0) + 1
    write = terminalreporter.write_line
    write("kvrules parity: tests that reached kvrules' drop-in functions")
    for outcome in ("passed", "failed", "skipped"):
        write(f"  {outcome:8s} {counts.get((True, outcome), 0)}")
    na = sum(n for (reached, _), n in counts.items() if not reached)
    write(f"  not applicable (ran vLLM's own code only): {na} ({counts.get((False, 'failed'), 0)} failed)")
    reached = sorted(n.split("::")[-1] for n in OUTCOMES if REACHED.get(n))
    write(f"  reached kvrules: {', '.join(reached)}")
    expected, unexpected, stale = verdict()
    for nodeid in expected:
        write(f"  expected by design: {nodeid}: {expected_reason(nodeid)} ({DETAILS.get(nodeid, '')})")
    for nodeid in unexpected:
        where = "kvrules" if REACHED.get(nodeid) else "vLLM only"
        write(f"  UNEXPECTED FAILURE {nodeid} [{where}]: {DETAILS.get(nodeid, '')}")
    for nodeid in stale:
        write(f"  LISTED BUT NOT FAILED {nodeid} (update EXPECTED_FAILURES)")
    write(
        f"  {len(expected)} expected failures, {len(unexpected)} unexpected, {len(stale)} listed but not failed"
    )
