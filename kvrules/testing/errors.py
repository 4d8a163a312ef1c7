"""What every conformance check raises: :class:`ConformanceError`, built by :func:`fail`.

Its own module so that :mod:`kvrules.testing.checks` and :mod:`kvrules.testing.allocators` share
it without importing each other.
"""

from __future__ import annotations


class ConformanceError(AssertionError):
    """A plugin object broke the kvrules plugin contract (the message says what and how to fix it)."""


def fail(who: str, problem: str, fix: str) -> ConformanceError:
    """The error for ``who`` breaking the contract: ``"{who}: {problem}. Fix: {fix}"`` (to raise)."""
    return ConformanceError(f"{who}: {problem}. Fix: {fix}")


__all__ = ["ConformanceError", "fail"]
