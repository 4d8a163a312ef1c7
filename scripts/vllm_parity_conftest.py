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

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from .kvrules_parity_counting import (  # the hooks named here are this conftest's too
    DETAILS,
    EXPECTED_FAILURES,
    OUTCOMES,
    REACHED,
    counting,
    expected_reason,
    finish,
    pytest_runtest_logreport,  # noqa: F401  (a hook: pytest finds it here)
    pytest_runtest_protocol,  # noqa: F401  (a hook: pytest finds it here)
    report_failures,
    verdict,
)

#: test function (``path::name``, any parameters) -> why it fails by design with kvrules
EXPECTED_FAILURES.update(
    {
        "tests/v1/core/test_kv_cache_utils.py::test_unify_kv_cache_spec_page_size_mamba": (
            "its third part builds MambaSpec(shapes=((6144,),)) with the helper's two default dtypes; "
            "vLLM zips shapes with dtypes and drops the second dtype silently, kvrules refuses the "
            "spec with a SpecError naming the layer ('MambaSpec has 1 shapes but 2 dtypes'). The "
            "first two parts, the #43626 Mamba padding, reach kvrules and pass before that line"
        ),
    }
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_test: CPU-only test")
    strategies = os.environ.get("KVRULES_PARITY_INSTALL")
    if not strategies:
        return
    from kvrules.integrations import vllm as kv_vllm

    for name in kv_vllm.DROP_IN_NAMES:
        setattr(kv_vllm.VllmAdapter, name, counting(getattr(kv_vllm.VllmAdapter, name)))
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
    expected, _, _ = verdict()
    for nodeid in expected:
        write(f"  expected by design: {nodeid}: {expected_reason(nodeid)} ({DETAILS.get(nodeid, '')})")
    report_failures(write, expected)
