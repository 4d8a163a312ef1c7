"""Shared fixtures; makes the case loader importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest
import structlog

# kvrules' conformance kit is an opt-in pytest plugin (its fixtures are used by the kit's own tests)
pytest_plugins = ["kvrules.testing"]


@pytest.fixture(autouse=True)
def _reset_structlog() -> object:
    """The CLI configures structlog for itself; undo that after every test."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _forget_vllm_classes() -> object:
    """``vllm_classes()`` caches the classes of whatever ``vllm.v1.kv_cache_interface`` a test
    put in ``sys.modules``; a stand-in's must not outlive the test."""
    yield
    from kvrules.integrations.vllm_specs import vllm_classes

    vllm_classes.cache_clear()
