"""The plugin's own tests, written with kvrules' conformance kit.

The kit is an opt-in pytest plugin (``pytest_plugins`` below) giving the fixtures ``kvrules_pm``,
``make_specs`` and ``captured_decisions``. Run with the plugin installed: ``pip install -e . && pytest``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kvrules
import pytest
from kvrules import KVRulesPluginManager
from kvrules.model import load_model_file
from kvrules.testing import (
    CapturedDecisions,
    Scenario,
    check_plugin,
    check_rule,
    check_spec_type,
    check_view_layout,
    sample_scenarios,
)

import kvrules_kpool_tail.plugin as plugin
from kvrules_kpool_tail import KpoolDedicated, KpoolRingView, KpoolTailPad, KpoolTailSpec

pytest_plugins = ["kvrules.testing"]

MODEL = Path(__file__).resolve().parents[1] / "models" / "glm-kpool-tiny.json"
TAIL = KpoolTailSpec(128, num_kv_heads=1, head_size=128, dtype="bfloat16")
EXAMPLES = [
    TAIL,
    TAIL.evolve(head_size_v=128),
    TAIL.evolve(page_size_padded=65536),
    KpoolTailSpec(64, num_kv_heads=2, head_size=64, dtype="float8_e4m3fn"),
]


@pytest.fixture
def scenarios(make_specs: Callable[..., Any]) -> list[Scenario]:
    """Models with kpool tails beside attention, plus kvrules' samples (the rules must not break them)."""
    glm = make_specs("full-b64", TAIL, repeat=4)
    kpool = Scenario.single("glm-kpool", glm, memory=1 << 30, max_model_len=4096)
    return [kpool, kpool.split((1 << 30, 512 << 20)), *sample_scenarios()]


def test_spec_type_conforms() -> None:
    check_spec_type(KpoolTailSpec, EXAMPLES)


def test_one_block_per_request() -> None:
    for length in (1, 4096, 1 << 20):
        assert TAIL.max_memory_usage_bytes(kvrules.EngineConfig(max_model_len=length)) == 32768
    assert TAIL.uniform_type_key() == ("kpool_tail",)
    assert TAIL.head_size_v == 0


def test_rules_conform(scenarios: list[Scenario]) -> None:
    pad = check_rule(KpoolTailPad(), scenarios=scenarios)
    assert pad.outcomes["glm-kpool"]["applied"] == 4
    layout = check_rule(KpoolDedicated(), scenarios=scenarios)
    assert layout.outcomes["glm-kpool-pp2"]["applied"] == 2


def test_view_layout_conforms() -> None:
    assert check_view_layout(KpoolRingView(), EXAMPLES) == ["kpool_tail"]


def test_whole_plugin_conforms(scenarios: list[Scenario]) -> None:
    report = check_plugin(plugin, scenarios=scenarios, spec_examples={"kpool_tail": EXAMPLES})
    assert set(report.rules) == {"kpool-tail-pad", "kpool-dedicated"}


def test_model_file_plans_with_the_installed_plugin(
    kvrules_pm: KVRulesPluginManager, captured_decisions: CapturedDecisions
) -> None:
    model = load_model_file(MODEL, kvrules_pm.registries.spec_types.classes)
    plan = kvrules.Planner(plugin_manager=kvrules_pm).plan(
        model.worker_specs(), model.available_memory or [], kvrules.EngineConfig.from_dict(model.engine)
    )
    padded = captured_decisions.by_rule("kpool-tail-pad")
    assert [d.outcome for d in padded] == ["applied"] * 8
    assert padded[0].padding_bytes == 131072 - 32768
    tails = [n for n in plan.specs if n.endswith("kpool_tail")]
    assert {plan.specs[n].block_size for n in tails} == {128}  # the ring length never changes
    allocation = kvrules.allocate(plan, "meta", worker=1, plugin_manager=kvrules_pm)
    allocation.verify()
    assert allocation.layouts["model.layers.4.indexer.kpool_tail"] == "kpool-ring"
    view = allocation.views["model.layers.4.indexer.kpool_tail"]
    assert tuple(view.shape) == (plan.num_blocks, 128, 1, 128)


def test_dedicated_layout_costs_one_more_tensor_per_slot(kvrules_pm: KVRulesPluginManager) -> None:
    model = load_model_file(MODEL, kvrules_pm.registries.spec_types.classes)
    config = kvrules.EngineConfig.from_dict(model.engine)
    memory = model.available_memory or []
    shared = kvrules.Planner(plugin_manager=kvrules_pm).plan(model.worker_specs(), memory, config)
    dedicated = kvrules.Planner(["kpool-dedicated"], plugin_manager=kvrules_pm).plan(
        model.worker_specs(), memory, config
    )
    assert [w.layout for w in dedicated.workers] == ["kpool-dedicated"] * 2
    assert len(dedicated.workers[0].tensors) == 2 * len(shared.workers[0].tensors)
    assert dedicated.num_blocks == shared.num_blocks // 2
