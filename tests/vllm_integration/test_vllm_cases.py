"""Every shared case: the ``vllm`` preset must give vLLM 0.28.0's answer, field by field."""

from __future__ import annotations

import math

import pytest
from case_loader import (
    CASES_DIR,
    case_names,
    expected_layer_specs,
    kv_triple,
    load_case,
    spec_triple,
    tensor_multiset,
)

import kvrules
from kvrules import KVRulesError, Planner, UnificationError

NAMES = case_names()


def test_cases_are_present() -> None:
    assert len(NAMES) >= 14, f"expected the shared cases in {CASES_DIR}"


@pytest.mark.parametrize("name", NAMES)
def test_plan_matches_vllm(name: str) -> None:
    case = load_case(name)
    answer = case.answer
    planner = Planner("vllm")
    if "error" in answer:
        with pytest.raises(KVRulesError):
            planner.plan(case.workers, case.memory, case.config)
        return
    plan = planner.plan(case.workers, case.memory, case.config)
    expected_groups = sorted(sorted(g["layer_names"]) for g in answer["kv_cache_groups"])
    assert sorted(sorted(g.layer_names) for g in plan.groups) == expected_groups
    for layer, triple in expected_layer_specs(answer).items():
        assert kv_triple(plan.specs[layer]) == triple, layer
    assert len(plan.workers) == len(answer["kv_cache_configs"])
    for worker, expected in zip(plan.workers, answer["kv_cache_configs"], strict=True):
        assert worker.num_blocks == expected["num_blocks"]
        assert tensor_multiset(list(worker.tensors)) == tensor_multiset(expected["kv_cache_tensors"])
    assert math.isclose(plan.max_concurrency, answer["max_concurrency"], rel_tol=1e-9)
    assert plan.capacity_tokens == answer["kv_cache_capacity_tokens"]
    assert plan.max_model_len == answer["max_model_len_after"]
    assert plan.num_blocks == answer["scheduler_num_blocks"]


@pytest.mark.parametrize("name", NAMES)
def test_unify_matches_vllm(name: str) -> None:
    case = load_case(name)
    unified = case.answer.get("unified_specs")
    if unified is None:
        pytest.skip("this case records no unify answer")
    planner = Planner("vllm")
    if "error" in unified:
        with pytest.raises(UnificationError):
            planner.unify(case.all_specs)
        return
    result = planner.unify(case.all_specs)
    for layer, spec in unified.items():
        assert kv_triple(result.specs[layer]) == spec_triple(spec), layer


def test_input_pages_match_vllm() -> None:
    for name in NAMES:
        case = load_case(name)
        for layer, spec in case.answer["input_specs"].items():
            assert kv_triple(case.all_specs[layer]) == spec_triple(spec), (name, layer)


def test_plan_shorthand_equals_planner() -> None:
    case = load_case("c2_gemma_5to1_x2")
    a = kvrules.plan(case.workers[0], case.memory[0], case.config, strategies="vllm")
    b = Planner("vllm").plan(case.workers[0], case.memory[0], case.config)
    assert a.to_dict() == b.to_dict()
