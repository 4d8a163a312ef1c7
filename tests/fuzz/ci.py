"""Settings shared by the fuzz tests: deterministic hypothesis runs of a fixed size, and the
check every fuzz test ends in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from fuzz.outcome import Outcome


def ci(examples: int) -> settings:
    """``examples`` derandomized examples, no database, no deadline; no hypothesis shrinking
    (:func:`expect_sound` shrinks within a time budget, so a failing run stays short)."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def expect_sound(
    case: Any,
    run: Callable[[Any], Outcome],
    shrink: Callable[[Any, Callable[[Any], Outcome], float], tuple[Any, Outcome]],
    show: Callable[[Any], str],
    seconds: float = 10,
) -> None:
    """Fail with a small reproducer unless ``case`` ends well (a result keeping every invariant,
    or a KVRulesError / exit 2 with a message)."""
    outcome = run(case)
    if not outcome.is_defect:
        return
    small, again = shrink(case, run, seconds)
    pytest.fail(
        f"{again.kind} ({again.error_type} {again.where}): {again.detail}\nreproducer: {show(small)}",
        pytrace=False,
    )


def seeded_sample(
    gen: Callable[..., Any],
    run: Callable[[Any], Outcome],
    shrink: Callable[[Any, Callable[[Any], Outcome], float], tuple[Any, Outcome]],
    show: Callable[[Any], str],
    *,
    count: int,
    prefix: str,
    args: tuple[Any, ...] = (),
    seconds: float = 15,
) -> None:
    """Run ``count`` cases of ``gen`` from the seeds ``<prefix>-0`` ... (the campaign's way,
    deterministic) and fail listing one small reproducer per cause of failure."""
    import time

    from fuzz.draw import generate

    first: dict[tuple[str, str, str], tuple[Any, int]] = {}
    for index in range(count):
        case = generate(gen, f"{prefix}-{index}", *args)
        outcome = run(case)
        if outcome.is_defect:
            seen = first.get(outcome.cause)
            first[outcome.cause] = (seen[0] if seen else case, (seen[1] if seen else 0) + 1)
    if not first:
        return
    lines = []
    deadline = time.monotonic() + seconds
    for (kind, error_type, where), (case, times) in first.items():
        left = max(0.5, (deadline - time.monotonic()) / max(1, len(first) - len(lines)))
        small, again = shrink(case, run, left)
        lines.append(f"- {times}x {kind} ({error_type} {where}): {again.detail}\n  reproducer: {show(small)}")
    pytest.fail(
        f"{sum(t for _, t in first.values())} of {count} inputs failed:\n" + "\n".join(lines), pytrace=False
    )
