"""One source of choices for every generator: hypothesis in the pytest suite, a seeded
``random.Random`` in the long campaign (``benchmarks/fuzz.py``), so both run the same generators.

A generator is a function ``gen(draw, *args)`` that makes its choices only through ``draw``
(:class:`Draw`). :func:`strategy` turns it into a hypothesis strategy (hypothesis then shrinks
the choices); :class:`RandomDraw` runs it from a seed, thousands of times a second.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


class Draw:
    """The choices a generator can make. Subclasses implement :meth:`integer`."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]`` (hypothesis shrinks towards ``low``)."""
        raise NotImplementedError

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options`` (hypothesis shrinks towards the first)."""
        return options[self.integer(0, len(options) - 1)]

    def boolean(self) -> bool:
        """True or False."""
        return self.integer(0, 1) == 1

    def chance(self, percent: int) -> bool:
        """True ``percent`` % of the time (hypothesis shrinks towards False)."""
        return self.integer(0, 99) >= 100 - percent

    def sample(self, options: Sequence[T], most: int) -> list[T]:
        """Up to ``most`` distinct elements of ``options``, in a drawn order."""
        pool = list(options)
        out = []
        for _ in range(self.integer(0, min(most, len(pool)))):
            out.append(pool.pop(self.integer(0, len(pool) - 1)))
        return out


class RandomDraw(Draw):
    """Choices from a seeded :class:`random.Random`."""

    def __init__(self, seed: int | str) -> None:
        self.random = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.random.randint(low, high)


class HypothesisDraw(Draw):
    """Choices from hypothesis's ``draw`` (inside :func:`hypothesis.strategies.composite`)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return int(self.draw(st.integers(low, high)))


def strategy(gen: Callable[..., T], *args: Any) -> st.SearchStrategy[T]:
    """``gen(draw, *args)`` as a hypothesis strategy."""

    @st.composite
    def wrapped(draw: Any) -> T:
        return gen(HypothesisDraw(draw), *args)

    return wrapped()


def generate(gen: Callable[..., T], seed: int | str, *args: Any) -> T:
    """``gen(draw, *args)`` from ``seed`` (the campaign's way)."""
    return gen(RandomDraw(seed), *args)


__all__ = ["Draw", "HypothesisDraw", "RandomDraw", "generate", "strategy"]
