"""Property tests: random mixes of spec types plan with the layout invariants, or raise a KVRulesError."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvrules import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    EngineConfig,
    FullAttentionSpec,
    KVCacheSpec,
    KVRulesError,
    MambaSpec,
    MLAAttentionSpec,
    Plan,
    Planner,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)

blocks = st.sampled_from([16, 32, 64])
heads = st.sampled_from([1, 2, 4, 8])
head_sizes = st.sampled_from([64, 128, 256])
dtypes = st.sampled_from(["bfloat16", "uint8", "float32"])


@st.composite
def attention(draw: Any) -> KVCacheSpec:
    common = {
        "num_kv_heads": draw(heads),
        "head_size": draw(head_sizes),
        "dtype": draw(dtypes),
        "indexes_kv_by_block_stride": draw(st.booleans()),
    }
    block = draw(blocks)
    kind = draw(st.sampled_from(["full", "sliding", "chunked", "cross", "encoder"]))
    if kind == "full":
        return FullAttentionSpec(block, **common)
    if kind == "sliding":
        return SlidingWindowSpec(block, sliding_window=draw(st.sampled_from([64, 1024])), **common)
    if kind == "chunked":
        return ChunkedLocalAttentionSpec(
            block, attention_chunk_size=draw(st.sampled_from([512, 8192])), **common
        )
    if kind == "cross":
        return CrossAttentionSpec(block, **common)
    return EncoderOnlyAttentionSpec(block, **common)


@st.composite
def mla(draw: Any) -> KVCacheSpec:
    head = draw(st.sampled_from([512, 576]))
    if draw(st.booleans()):
        return MLAAttentionSpec(draw(blocks), num_kv_heads=1, head_size=head, dtype="bfloat16")
    return SlidingWindowMLASpec(64, num_kv_heads=1, head_size=head, dtype="bfloat16", sliding_window=128)


@st.composite
def mamba(draw: Any) -> KVCacheSpec:
    shapes = [[3, draw(st.sampled_from([256, 768, 1024]))], [draw(st.sampled_from([2, 4])), 32, 32]]
    return MambaSpec(
        draw(blocks),
        shapes,
        [draw(st.sampled_from(["bfloat16", "float32"])), "bfloat16"],
        mamba_cache_mode=draw(st.sampled_from(["none", "align", "all"])),
    )


spec_strategy = st.one_of(attention(), mla(), mamba())


@st.composite
def models(draw: Any) -> tuple[list[dict[str, KVCacheSpec]], list[int], EngineConfig]:
    kinds = draw(st.lists(spec_strategy, min_size=1, max_size=3))
    count = draw(st.integers(1, 14))
    specs = {f"layer.{i}": kinds[draw(st.integers(0, len(kinds) - 1))] for i in range(count)}
    names = list(specs)
    workers = draw(st.integers(1, min(3, count)))
    cut = (
        sorted(
            draw(st.lists(st.integers(1, count - 1), min_size=workers - 1, max_size=workers - 1, unique=True))
        )
        if workers > 1
        else []
    )
    bounds = [0, *cut, count]
    worker_specs = [{n: specs[n] for n in names[bounds[i] : bounds[i + 1]]} for i in range(len(bounds) - 1)]
    memory = [draw(st.integers(1 << 20, 1 << 34)) for _ in worker_specs]
    config = EngineConfig(
        max_model_len=draw(st.integers(16, 65_536)),
        max_num_batched_tokens=draw(st.sampled_from([512, 2048, 8192])),
        auto_fit_max_model_len=draw(st.booleans()),
    )
    return worker_specs, memory, config


def check_invariants(plan: Plan, worker_specs: list[dict[str, KVCacheSpec]], memory: list[int]) -> None:
    all_layers = [n for ws in worker_specs for n in ws]
    placed = [n for g in plan.groups for n in g.layer_names]
    assert sorted(placed) == sorted(all_layers)  # every layer in exactly one group
    for group in plan.groups:
        if isinstance(group.spec, UniformTypeKVCacheSpecs):
            assert set(group.spec.kv_cache_specs) == set(group.layer_names)
            for name in group.layer_names:
                assert plan.specs[name].page_size_bytes == group.spec.kv_cache_specs[name].page_size_bytes
        else:
            for name in group.layer_names:
                assert plan.specs[name].page_size_bytes == group.spec.page_size_bytes
    assert len({w.num_blocks for w in plan.workers}) == 1 and plan.num_blocks == plan.workers[0].num_blocks
    for worker, ws, mem in zip(plan.workers, worker_specs, memory, strict=True):
        assert worker.allocated_bytes <= mem
        in_tensors = {n for t in worker.tensors for n in t.shared_by}
        assert in_tensors == set(ws)
    assert plan.waste is not None
    for w in plan.waste.workers:
        assert w.real_bytes + w.page_padding_bytes + w.slot_padding_bytes == w.allocated_bytes
        assert min(w.real_bytes, w.page_padding_bytes, w.slot_padding_bytes) >= 0
    assert plan.max_model_len <= plan.config.max_model_len or plan.max_model_len == plan.config.max_model_len


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.sampled_from(["vllm", None]))
def test_random_models_plan_or_raise_kvrules_errors(model: Any, strategies: str | None) -> None:
    worker_specs, memory, config = model
    try:
        plan = Planner(strategies).plan(worker_specs, memory, config)
    except KVRulesError:
        return
    check_invariants(plan, worker_specs, memory)
