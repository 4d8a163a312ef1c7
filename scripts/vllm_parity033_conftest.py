"""conftest.py placed at the top of vLLM 0.33's own test tree (``tests/conftest.py``) to run its
KV-cache planning tests with kvrules selected through the public seam a user would use.

It replaces vLLM's repository-wide conftest, which needs a GPU build and the Hugging Face hub.
It defines the `caplog_vllm` fixture and registers the markers. When `KVRULES_PARITY_033` names a
strategy set, it sets the platform hook `get_kv_cache_config_builder_cls` on the active platform
class before any test module is imported (`set_platform_hook`), and again before every test.
Each test is classified by whether kvrules' builder planned during it; the rest are counted
"not applicable". The summary prints a passed / failed / not applicable table per file, then each
failure: expected by design (``EXPECTED_FAILURES``, with its reason) or not. With kvrules
selected the run's exit status is 0 exactly when every failure is an expected one and every
expected one failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from .kvrules_parity_counting import (  # the hooks named here are this conftest's too
    EXPECTED_FAILURES,
    OUTCOMES,
    REACHED,
    counting,
    finish,
    pytest_runtest_logreport,  # noqa: F401  (a hook: pytest finds it here)
    pytest_runtest_protocol,  # noqa: F401  (a hook: pytest finds it here)
    report_failures,
    verdict,
)

ENV = "KVRULES_PARITY_033"

#: Tests that fail by design with kvrules selected (test function, without parameters) -> why.
EXPECTED_FAILURES.update(
    {
        "tests/v1/core/test_kv_cache_planning.py::test_hisparse_pool_must_fit_max_model_len": (
            "HiSparse is out of scope: kvrules refuses MLAAttentionSpec.is_index_group_leader=True "
            "with a SpecError naming the layer and the field, where vLLM expects its own admission "
            "ValueError (docs/vllm.md, the 0.33 field table)"
        ),
    }
)


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


def file_rows() -> list[tuple[str, int, int, int]]:
    """Per test file: (path, passed, failed, not applicable); a test is applicable only if
    kvrules' builder planned during it."""
    rows = []
    for path in sorted({n.split("::")[0] for n in OUTCOMES}):
        mine = {n: o for n, o in OUTCOMES.items() if n.startswith(path + "::")}
        applicable = [o for n, o in mine.items() if REACHED.get(n)]
        rows.append(
            (path, applicable.count("passed"), applicable.count("failed"), len(mine) - len(applicable))
        )
    return rows


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With kvrules selected, only an unexpected failure (or a listed one that passed) fails the run."""
    finish(session, bool(os.environ.get(ENV)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not os.environ.get(ENV):
        return
    write = terminalreporter.write_line
    write(f"kvrules parity (vLLM 0.33, platform hook, {os.environ[ENV]}): applicable = kvrules planned")
    write("| file | passed | failed | not applicable |")
    write("|---|---|---|---|")
    for path, passed, failed, na in file_rows():
        write(f"| {path} | {passed} | {failed} | {na} |")
    expected, _, _ = verdict()
    for base, reason in EXPECTED_FAILURES.items():
        hits = [
            n.split("[", 1)[1].rstrip("]") if "[" in n else "" for n in expected if n.split("[", 1)[0] == base
        ]
        if hits:
            write(f"  expected by design, {len(hits)} x {base} [{', '.join(hits)}]: {reason}")
    report_failures(write, expected)
