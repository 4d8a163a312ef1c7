"""Faulty plugins under fuzz: random faults (raise, ``None``, a wrong type, a broken invariant, an
input changed in place) at random extension points, up to three at once, registered through the
public plugin API. Each run ends in a PluginError naming the faulty plugin, or (a fault that did
not fire, or a lie kvrules cannot tell from the truth) a sound plan or the built-ins' own error.

The fixed cases of every fault class at every point are ``tests/plugins/test_plugin_faults.py``; here the
combinations are random. The first tests check that the wrappers are sound without a fault.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from fuzz.ci import ci, expect_sound, seeded_sample
from fuzz.draw import strategy
from fuzz.plugin_cases import HF_MODELS, METHODS, MODELS, plugin_case, run_plugin_case, shrink_plugin_case


def _shrink(case: Any, run: Any, seconds: float) -> tuple[Any, Any]:
    return shrink_plugin_case(case, seconds)


@pytest.mark.parametrize("point", sorted(METHODS))
@pytest.mark.parametrize("base", ["vllm", "default"])
def test_a_wrapper_whose_fault_never_fires_gives_the_baseline(point: str, base: str) -> None:
    model = HF_MODELS[0] if point in ("aligner", "architecture") else "hybrid"
    method = next(iter(METHODS[point]))
    case = {
        "base": base,
        "model": model,
        "faults": [{"point": point, "method": method, "fault": "none", "call": 10**6}],
    }
    outcome = run_plugin_case(case)
    assert outcome.kind == "ok", outcome


@pytest.mark.parametrize("model", MODELS + HF_MODELS)
def test_every_model_plans_through_the_wrappers(model: str) -> None:
    points = ["router", "grouper", "layout"] if model in MODELS else ["aligner", "architecture"]
    faults = [{"point": p, "method": "check", "fault": "none", "call": 10**6} for p in points]
    outcome = run_plugin_case({"base": "vllm", "model": model, "faults": faults})
    assert outcome.kind in ("ok", "error"), outcome


def test_a_fault_that_fires_is_refused_naming_the_plugin() -> None:
    case = {
        "base": "vllm",
        "model": "hybrid",
        "faults": [{"point": "layout", "method": "tensors", "fault": "omit", "call": 1}],
    }
    outcome = run_plugin_case(case)
    assert (outcome.kind, outcome.error_type) == ("error", "PluginError"), outcome
    assert "fuzz-plugin" in outcome.detail


@ci(150)
@given(case=strategy(plugin_case))
def test_random_faulty_plugins_are_refused_naming_them(case: Any) -> None:
    expect_sound(case, run_plugin_case, _shrink, json.dumps)


def test_a_seeded_sample_of_faulty_plugins_is_refused_naming_them() -> None:
    seeded_sample(plugin_case, run_plugin_case, _shrink, json.dumps, count=400, prefix="ci-plugin")
