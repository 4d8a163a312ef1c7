"""A rule says what it did through its guard's answer: the asker records the Check's reason and
``details``, and hands its ``work`` to the action as ``ctx.check``; rules never write the log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from faulty_plugins import FaultyPlugin

import kvrules
from kvrules import KVCacheGroup, KVCacheSpec, PluginError
from kvrules.plugin import Check, Grouper, PlanContext, applies

SPEC = kvrules.FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
WINDOW = kvrules.SlidingWindowSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16", sliding_window=128)
SPECS = {"full.0": SPEC, "full.1": SPEC, "swa.0": WINDOW, "swa.1": WINDOW}
CFG = kvrules.EngineConfig(max_model_len=1024)


@dataclass(frozen=True)
class HandingGrouper(Grouper):
    """Works the groups out in its guard and hands them over (test)."""

    name: str = "test-handing-grouper"
    priority: int = 10_000
    details: Any = None

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        groups = [KVCacheGroup((name,), spec) for name, spec in specs.items()]
        return applies(f"{len(groups)} groups of one layer.", details=self.details, work=groups)

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        assert ctx.check is not None, "the asker hands the guard's answer to the action"
        return list(ctx.check.work)


def plan(rule: HandingGrouper) -> kvrules.Plan:
    pm = kvrules.get_plugin_manager(autoload=False, plugins=[FaultyPlugin("test-handing", rules=[rule])])
    return kvrules.Planner(["vllm", rule.name], plugin_manager=pm).plan(SPECS, 1 << 30, CFG)


def test_the_guards_answer_is_the_decision_and_its_work_the_action() -> None:
    made = plan(HandingGrouper(details={"groups": 1}))
    [decision] = [d for d in made.decisions if d.rule == "test-handing-grouper"]
    assert (decision.stage, decision.outcome, decision.reason) == (
        "group",
        "applied",
        "4 groups of one layer.",
    )
    assert decision.details == {"groups": 1}
    assert [g.layer_names for g in made.workers[0].groups] == [(name,) for name in SPECS]


def test_details_that_are_no_mapping_name_the_rule() -> None:
    with pytest.raises(PluginError, match=r"rule 'test-handing-grouper' .*Check\.details is .*not a mapping"):
        plan(HandingGrouper(details=[1, 2]))
