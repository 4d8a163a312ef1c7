"""Shared fixtures; makes the case loader importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest
import structlog


@pytest.fixture(autouse=True)
def _reset_structlog() -> object:
    """The CLI configures structlog for itself; undo that after every test."""
    yield
    structlog.reset_defaults()
