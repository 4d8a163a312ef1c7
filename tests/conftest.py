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
