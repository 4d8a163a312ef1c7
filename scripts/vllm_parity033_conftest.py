"""conftest.py placed at the top of vLLM 0.33's own test tree (``tests/conftest.py``) to run its
KV-cache planning tests with kvrules selected through the public seam a user would use.

It replaces vLLM's repository-wide conftest, which needs a GPU build and the Hugging Face hub.
It defines the `caplog_vllm` fixture and registers the markers. When `KVRULES_PARITY_033` names a
strategy set, it sets the platform hook `get_kv_cache_config_builder_cls` on the active platform
class before any test module is imported (`set_platform_hook`), and again before every test.
Each test is classified by whether kvrules' builder planned during it; the rest are counted
"not applicable". The summary prints the counts and lists every failure.
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
ENV = "KVRULES_PARITY_033"


def _counting(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS["count"] += 1
        return method(*args, **kwargs)

    return wrapper


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
        setattr(methods, name, _counting(getattr(methods, name)))
    _select()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Re-assert the hook (a test may have replaced it and put a stale one back)."""
    if os.environ.get(ENV):
        _select()


@pytest.fixture()
def caplog_vllm(caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    logger = logging.getLogger("vllm")
    logger.propagate = True
    yield caplog
    logger.propagate = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = CALLS["count"]
    yield
    REACHED[item.nodeid] = CALLS["count"] > before


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        OUTCOMES[report.nodeid] = "failed"
        lines = str(report.longrepr).strip().splitlines()
        DETAILS[report.nodeid] = next((ln for ln in reversed(lines) if ln.startswith("E ")), "")[:300]
    elif report.skipped and OUTCOMES.get(report.nodeid) != "failed":
        OUTCOMES[report.nodeid] = "skipped"
    else:
        OUTCOMES.setdefault(report.nodeid, "passed")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not os.environ.get(ENV):
        return
    write = terminalreporter.write_line
    files = sorted({n.split("::")[0] for n in OUTCOMES})
    write("kvrules parity (vLLM 0.33, platform hook): per file, tests during which kvrules planned")
    for path in files:
        mine = {n: o for n, o in OUTCOMES.items() if n.startswith(path + "::")}
        applicable = [o for n, o in mine.items() if REACHED.get(n)]
        na = len(mine) - len(applicable)
        write(
            f"  {path}: passed {applicable.count('passed')}, failed {applicable.count('failed')}, "
            f"skipped {applicable.count('skipped')}, not applicable {na} "
            f"({sum(1 for n, o in mine.items() if not REACHED.get(n) and o == 'failed')} of them failed)"
        )
    for nodeid, outcome in sorted(OUTCOMES.items()):
        if outcome == "failed":
            where = "kvrules" if REACHED.get(nodeid) else "vLLM only"
            write(f"  FAILED {nodeid} [{where}]: {DETAILS.get(nodeid, '')}")
