"""The Python API under fuzz: every generated input plans with every invariant kept, or raises a
KVRulesError; never another exception, never longer than the time limit."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from fuzz.api_cases import api_case, render_case, run_api_case, shrink
from fuzz.ci import ci, expect_sound, seeded_sample
from fuzz.draw import strategy


@ci(400)
@given(strategy(api_case, "normal"))
def test_normal_values_plan_or_raise_kvrules_error(case: Any) -> None:
    expect_sound(case, run_api_case, shrink, render_case)


@ci(400)
@given(strategy(api_case, "extreme"))
def test_extreme_values_plan_or_raise_kvrules_error(case: Any) -> None:
    expect_sound(case, run_api_case, shrink, render_case)


@pytest.mark.parametrize("profile", ["normal", "extreme"])
def test_a_seeded_sample_plans_or_raises_kvrules_error(profile: str) -> None:
    seeded_sample(
        api_case, run_api_case, shrink, render_case, count=2000, prefix=f"ci-api-{profile}", args=(profile,)
    )
