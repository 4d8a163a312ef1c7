"""The two public stages (``Planner.groups_of``, ``Planner.place``) and ``Planner.block_bytes``
agree with ``Planner.plan`` on the same specs: the groups, what a block costs, and the tensors
for the plan's own block count."""

from __future__ import annotations

import pytest

from kvrules import ConfigError, EngineConfig, Planner, SpecError
from kvrules.examples import load_example


@pytest.mark.parametrize("name", ["issue-43626", "gemma3-27b", "llama3-8b"])
@pytest.mark.parametrize("strategies", ["vllm-0.33", "default"])
def test_stages_give_the_plans_groups_and_tensors(name: str, strategies: str) -> None:
    model = load_example(name)
    specs = model.worker_specs()[0]
    config = EngineConfig.from_dict(dict(model.engine))
    planner = Planner(strategies)
    plan = planner.plan(specs, 2 * model.available_memory[0], config)
    grouping = planner.groups_of(specs, config)
    assert grouping.groups == plan.groups and grouping.route == plan.route
    assert [d.stage for d in grouping.decisions] == [
        d.stage for d in plan.decisions if d.stage in {"convert", "route", "unify", "partition", "group"}
    ]
    block = planner.block_bytes(grouping.groups, config)
    placed = planner.place(grouping.groups, plan.num_blocks, config)
    assert placed.block_bytes == block
    assert placed.worker.tensors == plan.workers[0].tensors
    assert placed.worker.num_blocks == plan.num_blocks and placed.worker.layout == plan.workers[0].layout


@pytest.mark.parametrize("blocks", [0, -1, True, 1.5])
def test_place_wants_a_whole_number_of_blocks(blocks: object) -> None:
    model = load_example("llama3-8b")
    config = EngineConfig.from_dict(dict(model.engine))
    planner = Planner("vllm-0.33")
    groups = planner.groups_of(model.worker_specs()[0], config).groups
    with pytest.raises(ConfigError, match="whole number of blocks"):
        planner.place(groups, blocks, config)  # type: ignore[arg-type]


def test_groups_of_wants_a_mapping() -> None:
    with pytest.raises(SpecError, match="mapping"):
        Planner().groups_of([], EngineConfig(max_model_len=16))  # type: ignore[arg-type]
