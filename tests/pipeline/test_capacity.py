"""Capacity across workers: hand-computed figures, pipeline stages, auto-fit, override, memory check."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from kvrules import (
    CapacityError,
    ConfigError,
    EngineConfig,
    FullAttentionSpec,
    GroupingError,
    MambaSpec,
    Plan,
    Planner,
    SlidingWindowSpec,
)
from kvrules.examples import example_names, load_example
from kvrules.plan import plan_json_schema

VLLM = Planner("vllm")
GiB = 1 << 30


def full(heads: int = 8, block: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block, num_kv_heads=heads, head_size=128, dtype="bfloat16")


def gemma(windows: int = 10, fulls: int = 2) -> dict[str, object]:
    specs: dict[str, object] = {}
    for i in range(windows + fulls):
        if (i + 1) % 6 == 0:
            specs[f"l{i}"] = FullAttentionSpec(16, num_kv_heads=4, head_size=256, dtype="bfloat16")
        else:
            specs[f"l{i}"] = SlidingWindowSpec(
                16, num_kv_heads=4, head_size=256, dtype="bfloat16", sliding_window=1024
            )
    return specs


def test_uniform_model() -> None:
    plan = VLLM.plan({f"l{i}": full() for i in range(4)}, GiB, EngineConfig(max_model_len=4096))
    # 4 tensors, one per layer; 1 GiB // 65536 // 4 = 4096 blocks; 256 blocks per request
    assert plan.num_blocks == 4096 and len(plan.workers[0].tensors) == 4
    assert plan.max_concurrency == 16.0 and plan.capacity_tokens == 65_536
    assert plan.waste is not None and plan.waste.efficiency == 1.0


def test_gemma_five_to_one() -> None:
    plan = VLLM.plan(gemma(), GiB, EngineConfig(max_model_len=4096, max_num_batched_tokens=2048))
    # group size 2; sliding: cdiv(min(1023 + 2048, 4096), 16) + 1 = 193 blocks; full: 256 blocks
    assert plan.num_blocks == GiB // 65_536 // 2 == 8192
    assert math.isclose(plan.max_concurrency, 8192 / (5 * 193 + 256))
    assert plan.capacity_tokens == math.floor(8192 / 1221 * 4096)


@pytest.mark.parametrize(("mode", "mamba_blocks"), [("none", 1), ("align", 2), ("all", 256)])
def test_mamba_hybrid_in_each_cache_mode(mode: str, mamba_blocks: int) -> None:
    mamba = MambaSpec(16, [[4, 2048]], ["bfloat16"], mamba_cache_mode=mode)  # 16384-byte page
    attn = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")  # 16384-byte page
    plan = VLLM.plan(
        {"m0": mamba, "a0": attn, "m1": mamba, "a1": attn}, GiB, EngineConfig(max_model_len=4096)
    )
    assert plan.num_blocks == GiB // 16_384 // 2 == 32_768
    # one Mamba group and one attention group of 2 layers each
    assert math.isclose(plan.max_concurrency, 32_768 / (mamba_blocks + 256))


def test_speculative_mamba_blocks_cost_pages() -> None:
    mamba = MambaSpec(16, [[4, 1024]], ["bfloat16"], num_speculative_blocks=3)
    attn = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
    plan = VLLM.plan({"m0": mamba, "a0": attn}, GiB, EngineConfig(max_model_len=4096))
    assert math.isclose(plan.max_concurrency, plan.num_blocks / (4 + 256))


def test_two_pipeline_stages_smaller_memory_wins_and_tensors_shrink() -> None:
    workers = [{"l0": full(), "l1": full()}, {"l2": full(), "l3": full()}]
    plan = VLLM.plan(workers, [GiB, GiB // 2], EngineConfig(max_model_len=4096))
    assert [w.own_num_blocks for w in plan.workers] == [8192, 4096]
    assert plan.num_blocks == 4096 and all(w.num_blocks == 4096 for w in plan.workers)
    for worker in plan.workers:
        assert [t.size for t in worker.tensors] == [65_536 * 4096] * 2
    assert plan.max_concurrency == 4096 / 256
    assert any(d.rule == "agree-num-blocks" for d in plan.decisions)


def test_a_layer_with_two_specs_on_two_workers_is_an_error() -> None:
    with pytest.raises(GroupingError, match=r"layer 'l0' has different specs on worker 0 .* and worker 1"):
        VLLM.plan([{"l0": full(8)}, {"l0": full(4)}], [GiB, GiB], EngineConfig(max_model_len=64))


def test_auto_fit_reduces_the_length() -> None:
    config = EngineConfig(max_model_len=131_072, auto_fit_max_model_len=True)
    plan = VLLM.plan(gemma(), GiB // 4, config)
    # 2 x 65536 x (5 x 193 + cdiv(L, 16)) <= 256 MiB  ->  cdiv(L, 16) <= 1083  ->  L = 17328
    assert plan.max_model_len == 17_328 and plan.max_concurrency == 1.0
    assert any(d.rule == "auto-fit" and "17328" in d.reason for d in plan.decisions)


def test_capacity_error_states_needed_available_and_largest_length() -> None:
    config = EngineConfig(max_model_len=4096, num_gpu_blocks_override=1000)
    with pytest.raises(CapacityError) as info:
        VLLM.plan(gemma(), GiB, config)
    error = info.value
    assert error.max_fitting_len == 2640
    assert error.needed_bytes == 2 * 65_536 * 1221 and error.available_bytes == 1000 * 2 * 65_536
    assert "0.15 GiB" in str(error) and "0.12 GiB" in str(error) and "2640" in str(error)


def test_override_sets_the_number_of_blocks() -> None:
    plan = VLLM.plan(gemma(), GiB, EngineConfig(max_model_len=1024, num_gpu_blocks_override=1000))
    assert plan.num_blocks == 1000
    assert plan.workers[0].available_memory == 1000 * 2 * 65_536


def test_engine_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match="max_model_len=0"):
        EngineConfig(max_model_len=0)
    with pytest.raises(ConfigError, match="decode_context_parallel_size=0"):
        EngineConfig(max_model_len=8, decode_context_parallel_size=0)
    with pytest.raises(ConfigError, match="max_num_batched_tokens=-1"):
        EngineConfig(max_model_len=8, max_num_batched_tokens=-1)
    with pytest.raises(ConfigError, match="available_memory has 3 values for 2 workers"):
        VLLM.plan([{"a": full()}, {"b": full()}], [GiB, GiB, GiB], EngineConfig(max_model_len=8))


def test_waste_report_adds_up_and_counts_padding_slots() -> None:
    specs = gemma(windows=11, fulls=2)  # 11 sliding -> 6 groups of <= 2; 1 padding slot
    specs = {k: v for k, v in specs.items()}
    plan = VLLM.plan(specs, GiB, EngineConfig(max_model_len=4096))
    waste = plan.waste
    assert waste is not None
    assert waste.padding_slots == 1
    assert waste.real_bytes + waste.page_padding_bytes + waste.slot_padding_bytes == waste.allocated_bytes
    assert waste.slot_padding_bytes > 0 and waste.ideal_max_concurrency > plan.max_concurrency


@pytest.mark.parametrize("name", example_names())
def test_plan_schema_round_trip_and_json_schema(name: str) -> None:
    model = load_example(name)
    plan = VLLM.plan(model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine))
    document = json.loads(plan.to_json())
    jsonschema.validate(document, plan_json_schema(version=2))
    again = Plan.from_dict(document)
    assert again.to_dict() == plan.to_dict()
    assert again.specs == plan.specs and again.groups == plan.groups
