"""conftest.py that ``scripts/vllm-parity`` places beside vLLM's own test file.

It replaces vLLM's repository-wide conftest (which needs a GPU build and the Hugging Face hub):
it defines the one fixture the file uses (``caplog_vllm``) and the ``cpu_test`` marker, and,
when ``KVRULES_PARITY_INSTALL`` names a strategy set, calls ``install()`` before the test file
is imported, so the names it imports from ``vllm.v1.core.kv_cache_utils`` are kvrules', and
again before every test (a test that reloads that module would otherwise undo it).

Every test is classified by whether it reached kvrules (any call into the three replaced
functions, direct or through vLLM's own code): tests that did not run vLLM's code only and are
counted "not applicable". A test during which kvrules handed a call to vLLM's own function
(``kvrules.integrations.vllm.fallbacks()``) is listed as "fell back", with the reason. The summary prints the counts and every failure: expected by design
(``EXPECTED_FAILURES``, with its reason) or not. With kvrules installed the run's exit status is
0 exactly when every failure is an expected one and every expected one failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from . import kvrules_parity_counting as counting_module
from .kvrules_parity_counting import (  # the hooks named here are this conftest's too
    DETAILS,
    EXPECTED_FAILURES,
    FELL_BACK,
    OUTCOMES,
    REACHED,
    counting,
    expected_reason,
    finish,
    forget_fallbacks,
    note_fallbacks,
    pytest_runtest_protocol,  # noqa: F401  (a hook: pytest finds it here)
    report_failures,
    report_fallbacks,
    verdict,
)

#: test function (``path::name``, any parameters) -> why it fails by design with kvrules
#: (test_unify_kv_cache_spec_page_size_mamba was listed until kvrules fell back to vLLM's own
#: function where it refuses a spec: its MambaSpec with one shape and two dtypes is vLLM's again.)
EXPECTED_FAILURES.update({})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_test: CPU-only test")
    strategies = os.environ.get("KVRULES_PARITY_INSTALL")
    if not strategies:
        return
    from kvrules.integrations import vllm as kv_vllm

    for name in kv_vllm.DROP_IN_NAMES:
        setattr(kv_vllm.VllmAdapter, name, counting(getattr(kv_vllm.VllmAdapter, name)))
    kv_vllm.install(kv_vllm.parse_strategies(strategies))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Forget earlier fallbacks, and re-assert the seam: vLLM's ``test_none_hash`` reloads
    ``kv_cache_utils``, which puts vLLM's own functions back; ``install()`` repairs that (and does
    nothing when nothing was undone)."""
    strategies = os.environ.get("KVRULES_PARITY_INSTALL")
    if strategies:
        from kvrules.integrations import vllm as kv_vllm

        forget_fallbacks()
        kv_vllm.install(kv_vllm.parse_strategies(strategies))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    counting_module.pytest_runtest_logreport(report)
    if report.when == "teardown" and os.environ.get("KVRULES_PARITY_INSTALL"):
        note_fallbacks(report.nodeid)


@pytest.fixture()
def temporary_enable_log_propagate() -> Iterator[None]:
    logger = logging.getLogger("vllm")
    logger.propagate = True
    yield
    logger.propagate = False


@pytest.fixture()
def caplog_vllm(temporary_enable_log_propagate: None, caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    yield caplog


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With kvrules installed, only an unexpected failure (or a listed one that passed) fails the run."""
    finish(session, bool(os.environ.get("KVRULES_PARITY_INSTALL")))


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
    write(f"  fell back to vLLM's own function: {len(FELL_BACK)} (counted above by outcome)")
    report_fallbacks(write)
    expected, _, _ = verdict()
    for nodeid in expected:
        write(f"  expected by design: {nodeid}: {expected_reason(nodeid)} ({DETAILS.get(nodeid, '')})")
    report_failures(write, expected)
