"""conftest.py placed at the top of vLLM 0.33's own test tree (``tests/conftest.py``) to run its
KV-cache planning tests with kvrules selected through the public seam a user would use.

It replaces vLLM's repository-wide conftest, which needs a GPU build and the Hugging Face hub.
It defines the `caplog_vllm` fixture and registers the markers. When `KVRULES_PARITY_033` names a
strategy set, it sets the platform hook `get_kv_cache_config_builder_cls` on the active platform
class before any test module is imported (`set_platform_hook`), and again before every test.
Each test is classified by whether kvrules' builder planned during it; the rest are counted
"not applicable"; a test during which kvrules handed a call to vLLM's own builder
(``kvrules.integrations.vllm.fallbacks()``) is counted "fell back", with the reason. The summary
prints a passed / failed / not applicable / fell back table per file, then each failure: expected
by design (``EXPECTED_FAILURES``, with its reason) or not. With kvrules
selected the run's exit status is 0 exactly when every failure is an expected one and every
expected one failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from . import kvrules_parity_counting as counting_module
from .kvrules_parity_counting import (  # the hooks named here are this conftest's too
    EXPECTED_FAILURES,
    counting,
    finish,
    forget_fallbacks,
    note_fallbacks,
    pytest_runtest_protocol,  # noqa: F401  (a hook: pytest finds it here)
    report_expected,
    report_failures,
    report_fallbacks,
    verdict,
    write_table,
)

ENV = "KVRULES_PARITY_033"

#: Tests that fail by design with kvrules selected (test function, without parameters) -> why.
#: (test_hisparse_pool_must_fit_max_model_len was listed until kvrules fell back to vLLM's own
#: builder where it refuses a spec: vLLM's admission error is raised again, and the test passes.)
EXPECTED_FAILURES.update({})


def _select() -> None:
    from kvrules.integrations import vllm033, vllm_platform

    platform = vllm_platform.current_platform_class()
    vllm_platform.restore_platform_hook(platform)
    vllm_platform.set_platform_hook(
        platform, strategies=vllm033.parse_strategies(os.environ[ENV], "vllm-0.33")
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("cpu_test", "core_model", "slow_test", "optional", "skip_global_cleanup"):
        config.addinivalue_line("markers", f"{marker}: vLLM marker")
    if not os.environ.get(ENV):
        return
    from kvrules.integrations import vllm033

    methods = vllm033.KVRulesBuilderMethods
    for name in ("get_kv_cache_groups", "get_kv_cache_config_from_groups"):
        setattr(methods, name, counting(getattr(methods, name)))
    _select()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Forget earlier fallbacks, and re-assert the hook (a test may have replaced it and put a
    stale one back)."""
    if os.environ.get(ENV):
        forget_fallbacks()
        _select()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    counting_module.pytest_runtest_logreport(report)
    if report.when == "teardown" and os.environ.get(ENV):
        note_fallbacks(report.nodeid)


@pytest.fixture()
def caplog_vllm(caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    logger = logging.getLogger("vllm")
    logger.propagate = True
    yield caplog
    logger.propagate = False


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With kvrules selected, only an unexpected failure (or a listed one that passed) fails the run."""
    finish(session, bool(os.environ.get(ENV)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not os.environ.get(ENV):
        return
    write = terminalreporter.write_line
    write(
        f"kvrules parity (vLLM 0.33, platform hook, {os.environ[ENV]}): applicable = kvrules planned, "
        "fell back = kvrules handed a call to vLLM's own builder"
    )
    write_table(write)
    report_fallbacks(write)
    expected, _, _ = verdict()
    report_expected(write, expected)
    report_failures(write, expected)
