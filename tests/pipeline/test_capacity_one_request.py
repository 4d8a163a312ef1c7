"""A plan whose blocks cannot hold one request of max_model_len is refused (issue R5).

The memory check prices one request with the layout's ``request_bytes``; the block count is the
memory divided by the layout's ``block_bytes``. ``max_concurrency >= 1`` holds exactly when the
first is at least ``block_bytes`` times the blocks a request takes. vLLM 0.28's packed
(DeepSeek-V4) estimate took the first group's layer-tuple bytes for every group's page, and the
per-worker estimates left out the groups without a layer on that worker, so plans with
``max_concurrency < 1`` passed the check and auto-fit kept a length that does not fit.
"""

from __future__ import annotations

import pytest
from case_loader import load_case
from hypothesis import given, settings
from hypothesis import strategies as st

import kvrules
from kvrules import (
    CapacityError,
    EngineConfig,
    HiddenStateCacheSpec,
    KVCacheSpec,
    KVRulesPluginManager,
    MLAAttentionSpec,
    Planner,
    SlidingWindowMLASpec,
)
from kvrules.pipeline.capacity import total_blocks_per_request
from kvrules.plugin import blocks_of

LENGTH = 116_794
SWA_PAGE = 74_880  # 128 tokens x 584 bytes (fp8_ds_mla, DeepSeek-V4), aligned to 576
BLOCK = 8 * SWA_PAGE  # the largest group: 8 sliding-window layer tuples = 599,040 bytes
MEMORY = 6860 * BLOCK  # 3.83 GiB: 6860 blocks


def swa() -> SlidingWindowMLASpec:
    return SlidingWindowMLASpec(
        128,
        num_kv_heads=1,
        head_size=512,
        dtype="uint8",
        sliding_window=256,
        cache_dtype_str="fp8_ds_mla",
        model_version="deepseek_v4",
        alignment=576,
        state_content_bytes=584,
    )


def issue_specs(first: KVCacheSpec | None = None) -> dict[str, KVCacheSpec]:
    """The issue's shape: 9 hidden-state layers (8-token blocks, 16 KiB pages) and 15
    DeepSeek-V4-like sliding-window MLA layers (128-token blocks, 74,880-byte pages)."""
    head = first or HiddenStateCacheSpec(8, num_kv_heads=1, head_size=1024, dtype="bfloat16")
    specs: dict[str, KVCacheSpec] = {f"cache_only_layers.{i}": head for i in range(9)}
    specs.update({f"model.layers.{i}.attn.swa_cache": swa() for i in range(15)})
    return specs


def config(length: int = LENGTH, **kw: object) -> EngineConfig:
    return EngineConfig(max_model_len=length, **kw)  # type: ignore[arg-type]


def test_the_issue_shape_groups_as_described() -> None:
    # at a length that fits: 9 hidden-state layers in the MLA group, the 15 sliding-window
    # layers in groups of 8 and 7 layer tuples; a block costs the largest group's page
    plan = Planner("vllm").plan(issue_specs(), MEMORY, config(4096))
    assert plan.route == "deepseekv4-packing"
    assert [len(g.layer_names) for g in plan.groups] == [9, 8, 7]
    assert plan.workers[0].tensors[0].block_stride == BLOCK
    assert plan.num_blocks == 6860
    # at the issue's length one request takes 14,600 hidden-state blocks + 2 x 19 window blocks
    assert total_blocks_per_request(plan.groups, config()) == 14_638


@pytest.mark.parametrize("strategies", ["vllm", "default"])
def test_a_plan_that_cannot_hold_one_request_is_a_capacity_error(strategies: str) -> None:
    with pytest.raises(CapacityError) as info:
        Planner(strategies).plan(issue_specs(), MEMORY, config())
    error = info.value
    assert error.needed_bytes == 14_638 * BLOCK
    assert error.available_bytes == MEMORY
    assert error.max_fitting_len == 54_576
    assert str(error).startswith(
        "To serve one request of max_model_len 116794, worker 0 needs 8.17 GiB (8768747520 bytes) of "
        "KV cache but has 3.83 GiB (4109414400 bytes): one request needs 14638 blocks of 599040 "
        "bytes, the memory holds 6860. The largest max_model_len that fits is 54576."
    )


def test_auto_fit_shrinks_to_the_largest_length_that_holds_one_request() -> None:
    plan = Planner("vllm").plan(issue_specs(), MEMORY, config(auto_fit_max_model_len=True))
    assert plan.max_model_len == 54_576
    assert plan.num_blocks == 6860
    assert total_blocks_per_request(plan.groups, plan.config) == 6860  # 6822 + 2 x 19
    assert plan.max_concurrency == 1.0
    # one token more takes one block more than there are
    assert total_blocks_per_request(plan.groups, config(54_577)) == 6861
    assert Planner("vllm").plan(issue_specs(), MEMORY, config(54_576)).max_concurrency == 1.0


def test_plain_mla_beside_sliding_window_mla_is_refused_too() -> None:
    """Not a hidden-state matter: any MLA group whose layer tuples are smaller than the largest
    group's page was priced too low."""
    mla = MLAAttentionSpec(8, num_kv_heads=1, head_size=1024, dtype="bfloat16")
    with pytest.raises(
        CapacityError, match=r"one request needs 14638 blocks of 599040 bytes, the memory holds 6860"
    ):
        Planner("vllm").plan(issue_specs(mla), MEMORY, config())


def test_pipeline_stages_count_the_groups_they_do_not_hold() -> None:
    """Each stage's block pool serves every group (max_concurrency counts all of them): a stage
    holding only the sliding-window layers must still find room for the hidden-state blocks."""
    specs = issue_specs()
    names = list(specs)
    workers = [{n: specs[n] for n in names[:9]}, {n: specs[n] for n in names[9:]}]
    memories = [1 << 40, 100 * BLOCK]  # the second stage holds 100 blocks
    with pytest.raises(
        CapacityError,
        match=r"worker 1 needs .*one request needs 14638 blocks of 599040 bytes, the memory holds 100\.",
    ):
        Planner("vllm").plan(workers, memories, config())
    plan = Planner("vllm").plan(workers, memories, config(auto_fit_max_model_len=True))
    assert plan.max_concurrency >= 1
    assert total_blocks_per_request(plan.groups, config(plan.max_model_len + 1)) > plan.num_blocks
    assert [w.layout for w in plan.workers] == ["per-layer", "packed"]


def test_vllm_028s_estimate_is_kept_where_it_is_the_larger(kvrules_pm: KVRulesPluginManager) -> None:
    """c10e (DeepSeek-V4-like): vLLM 0.28's layer-tuple estimate exceeds blocks x block bytes,
    so the memory check (and auto-fit) still answer as vLLM 0.28 does."""
    case = load_case("quantized/c10e_dsv4_like_fp8_ds_mla")
    plan = Planner("vllm").plan(case.workers[0], case.memory[0], case.config)
    specs = [g.spec for g in plan.groups]
    tuples = max(s.num_layer_tuples() for s in specs)  # type: ignore[attr-defined]
    pages = sum(blocks_of(s, plan.config) for s in specs)
    vllm_028 = tuples * sum(specs[0].page_sizes()) * pages  # type: ignore[attr-defined]
    layout = kvrules_pm.registries.rules.rules["packed"]
    assert layout.request_bytes(plan.groups, plan.config) == vllm_028
    assert vllm_028 > plan.workers[0].tensors[0].block_stride * pages


SWA_SHAPES = st.builds(
    lambda block, window: SlidingWindowMLASpec(
        block,
        num_kv_heads=1,
        head_size=512,
        dtype="uint8",
        sliding_window=window,
        cache_dtype_str="fp8_ds_mla",
        model_version="deepseek_v4",
        alignment=576,
        state_content_bytes=584,
    ),
    st.sampled_from([64, 128, 256]),
    st.sampled_from([128, 256, 512]),
)
FIRST_SHAPES = st.one_of(
    st.builds(
        lambda block, heads, size: HiddenStateCacheSpec(
            block, num_kv_heads=heads, head_size=size, dtype="bfloat16"
        ),
        st.sampled_from([1, 4, 8, 16, 64]),
        st.sampled_from([1, 3]),
        st.sampled_from([1024, 4096]),
    ),
    st.builds(
        lambda block, size: MLAAttentionSpec(block, num_kv_heads=1, head_size=size, dtype="bfloat16"),
        st.sampled_from([8, 16, 64]),
        st.sampled_from([128, 576, 1024]),
    ),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    first=FIRST_SHAPES,
    count=st.integers(1, 12),
    window=SWA_SHAPES,
    windows=st.integers(1, 20),
    length=st.sampled_from([1024, 8192, 65_536, LENGTH]),
    memory=st.sampled_from([1 << 26, 1 << 28, 1 << 30, MEMORY]),
    auto=st.booleans(),
    stages=st.booleans(),
    strategies=st.sampled_from(["vllm", "default", "vllm-0.33"]),
)
def test_every_plan_holds_one_request(
    first: KVCacheSpec,
    count: int,
    window: KVCacheSpec,
    windows: int,
    length: int,
    memory: int,
    auto: bool,
    stages: bool,
    strategies: str,
) -> None:
    specs: dict[str, KVCacheSpec] = {f"first.{i}": first for i in range(count)}
    specs.update({f"window.{i}": window for i in range(windows)})
    names = list(specs)
    workers = [
        {n: specs[n] for n in names[: len(names) // 2]},
        {n: specs[n] for n in names[len(names) // 2 :]},
    ]
    try:
        plan = Planner(strategies).plan(
            workers if stages else specs,
            [memory, memory // 3] if stages else memory,
            config(length, auto_fit_max_model_len=auto),
        )
    except kvrules.KVRulesError:
        return
    assert plan.max_concurrency >= 1, (plan.route, plan.num_blocks, plan.max_concurrency)
