"""kvrules.integrations.vllm: conversions, drop-ins and install(), against stand-in classes with
vLLM 0.28's names (no vLLM needed); one test runs against the real vLLM when it is importable."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
import structlog
import torch
import vllm_standins as vs
from case_loader import load_case
from hypothesis import given, settings
from hypothesis import strategies as st

import kvrules
from kvrules import (
    CapacityError,
    ChunkedLocalAttentionSpec,
    ConfigError,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    GroupingError,
    KVQuantMode,
    KVRulesPluginManager,
    MambaSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SpecError,
    UnificationError,
    UniformTypeKVCacheSpecs,
)
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations import vllm_platform
from kvrules.integrations.vllm_config import read_vllm_config
from kvrules.integrations.vllm_specs import VllmClasses, VllmNotInstalledError

CLASSES = VllmClasses.from_namespace(vs.namespace(), version="stand-in 0.28")
CLASSES_027 = VllmClasses.from_namespace(vs.build_027(), version="stand-in 0.27")


def adapter(strategies: Any = "vllm") -> kv_vllm.VllmAdapter:
    return kv_vllm.VllmAdapter(strategies, classes=CLASSES)


def full(**kw: Any) -> Any:
    args: dict[str, Any] = {"block_size": 16, "num_kv_heads": 2, "head_size": 64, "dtype": torch.float32}
    return vs.FullAttentionSpec(**(args | kw))


def swa(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "block_size": 16,
        "num_kv_heads": 2,
        "head_size": 64,
        "dtype": torch.float32,
        "sliding_window": 1,
    }
    return vs.SlidingWindowSpec(**(args | kw))


KV_SPECS = {
    "full": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=4),
    "fp8": FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="float8_e4m3fn", kv_quant_mode=KVQuantMode.FP8_PER_TENSOR
    ),
    "swa": SlidingWindowSpec(32, num_kv_heads=4, head_size=64, dtype="float16", sliding_window=512),
    "chunked": ChunkedLocalAttentionSpec(
        16, num_kv_heads=4, head_size=64, dtype="bfloat16", attention_chunk_size=8192
    ),
    "mla": MLAAttentionSpec(
        64, num_kv_heads=1, head_size=576, dtype="bfloat16", compress_ratio=4, model_version="deepseek_v4"
    ),
    "swa_mla": SlidingWindowMLASpec(64, num_kv_heads=1, head_size=512, dtype="bfloat16", sliding_window=128),
    "mamba": MambaSpec(
        16, shapes=((3, 768), (4, 32, 32)), dtypes=("bfloat16", "float32"), mamba_type="gdn_attn"
    ),
    "cross": CrossAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32"),
    "encoder": EncoderOnlyAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32"),
    "sink": SinkFullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32", sink_len=4),
    "uniform": UniformTypeKVCacheSpecs(
        16,
        {
            "u1": FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32"),
            "u2": FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="float32"),
        },
    ),
    "padded": FullAttentionSpec(
        16,
        num_kv_heads=2,
        head_size=64,
        dtype="float32",
        page_size_padded=20000,
        indexes_kv_by_block_stride=True,
    ),
}


# -- conversion ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(KV_SPECS))
def test_kvrules_spec_round_trips_through_vllm_classes(name: str) -> None:
    spec = KV_SPECS[name]
    vllm_spec = kv_vllm.to_vllm_spec(spec, layer=name, classes=CLASSES)
    assert type(vllm_spec).__name__ == type(spec).__name__
    assert vllm_spec.page_size_bytes == spec.page_size_bytes
    assert kv_vllm.from_vllm_spec(vllm_spec, layer=name) == spec


def test_vllm_values_are_vllm_types() -> None:
    mamba = kv_vllm.to_vllm_spec(KV_SPECS["mamba"], classes=CLASSES)
    assert mamba.mamba_type is vs.MambaAttentionBackendEnum.GDN_ATTN
    assert mamba.dtypes == (torch.bfloat16, torch.float32)
    fp8 = kv_vllm.to_vllm_spec(KV_SPECS["fp8"], classes=CLASSES)
    assert fp8.kv_quant_mode is vs.KVQuantMode.FP8_PER_TENSOR and fp8.dtype is torch.float8_e4m3fn
    assert fp8.num_head_slots is None and fp8.state_content_bytes is None and fp8.non_causal is False


def test_vllm_objects_round_trip_with_unmodelled_defaults_restored() -> None:
    specs = {
        "a": full(kv_quant_mode=vs.KVQuantMode.FP8_PER_TENSOR, dtype=torch.uint8),
        "b": swa(extra_retained_tokens=2, indexes_kv_by_block_stride=True),
        "c": vs.MambaSpec(
            16, ((2, 512),), (torch.float32,), mamba_type=vs.MambaAttentionBackendEnum.SHORT_CONV
        ),
        "d": vs.UniformTypeKVCacheSpecs(16, {"d1": full(), "d2": full(head_size=128)}),
        "e": vs.MLAAttentionSpec(
            block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, cache_dtype_str="auto"
        ),
    }
    back = kv_vllm.to_vllm_specs(kv_vllm.from_vllm_specs(specs), classes=CLASSES)
    assert back == specs


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["full", "swa", "chunked"]),
    block=st.sampled_from([1, 16, 64, 544]),
    heads=st.integers(1, 16),
    head=st.sampled_from([32, 64, 96, 128, 256]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float8_e5m2]),
    window=st.integers(1, 8192),
)
def test_attention_round_trip_property(
    kind: str, block: int, heads: int, head: int, dtype: Any, window: int
) -> None:
    common: dict[str, Any] = {"block_size": block, "num_kv_heads": heads, "head_size": head, "dtype": dtype}
    makers: dict[str, Callable[[], Any]] = {
        "full": lambda: vs.FullAttentionSpec(**common),
        "swa": lambda: vs.SlidingWindowSpec(**common, sliding_window=window),
        "chunked": lambda: vs.ChunkedLocalAttentionSpec(**common, attention_chunk_size=window),
    }
    spec = makers[kind]()
    kv = kv_vllm.from_vllm_spec(spec, layer="x")
    assert kv.page_size_bytes == spec.page_size_bytes
    assert kv_vllm.to_vllm_spec(kv, classes=CLASSES) == spec


@pytest.mark.parametrize(
    ("spec", "field"),
    [(full(non_causal=True), "non_causal")],
)
def test_unmodelled_non_default_field_is_an_error_naming_layer_and_field(spec: Any, field: str) -> None:
    with pytest.raises(SpecError, match=rf"layer 'model.layers.3'.*FullAttentionSpec\.{field}="):
        kv_vllm.from_vllm_specs({"model.layers.3": spec})


def test_unknown_vllm_spec_class_is_an_error_naming_layer_and_type() -> None:
    rswa = vs.RSWASpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16, rswa_window=32)
    with pytest.raises(SpecError, match=r"layer 'model.layers.0': vLLM spec type RSWASpec"):
        kv_vllm.from_vllm_specs({"model.layers.0": rswa})


def test_a_registered_spec_type_of_that_name_converts(kvrules_pm: KVRulesPluginManager) -> None:
    @dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
    class RSWASpec(FullAttentionSpec):  # what a plugin would register
        type_name: ClassVar[str] = "rswa"
        rswa_window: int

    types_ = {**kvrules_pm.registries.spec_types.classes, "rswa": RSWASpec}
    rswa = vs.RSWASpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16, rswa_window=32)
    converted = kv_vllm.from_vllm_spec(rswa, layer="model.layers.0", spec_types=types_)
    assert type(converted) is RSWASpec and converted.page_size_bytes == rswa.page_size_bytes
    assert kv_vllm.to_vllm_spec(converted, classes=CLASSES) == rswa


def test_quant_mode_kvrules_lacks_is_an_error() -> None:
    with pytest.raises(SpecError, match=r"layer 'l0' kv_quant_mode='TURBOQUANT_K8V4'"):
        kv_vllm.from_vllm_specs({"l0": full(kv_quant_mode=vs.KVQuantMode.TURBOQUANT_K8V4)})


def test_page_mismatch_is_detected() -> None:
    class FullAttentionSpec(vs.FullAttentionSpec):  # same name, a page formula kvrules does not share
        @property
        def page_size_bytes(self) -> int:
            return super().page_size_bytes + 8

    odd = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32)
    with pytest.raises(SpecError, match=r"layer 'odd'.*vLLM computes 16392 bytes, kvrules 16384"):
        kv_vllm.from_vllm_specs({"odd": odd})


def test_older_vllm_without_a_field() -> None:
    ok = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32")
    old_full = CLASSES_027.specs["FullAttentionSpec"]
    assert kv_vllm.to_vllm_spec(ok, classes=CLASSES_027) == old_full(
        block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32
    )
    strided = ok.evolve(indexes_kv_by_block_stride=True)
    with pytest.raises(SpecError, match=r"indexes_kv_by_block_stride=True.*stand-in 0.27"):
        kv_vllm.to_vllm_spec(strided, layer="l", classes=CLASSES_027)


def test_older_vllm_without_extra_retained_tokens_or_head_size_v() -> None:
    old = CLASSES_027.specs
    chunked: Any = kv_vllm.to_vllm_spec(KV_SPECS["chunked"], classes=CLASSES_027)
    assert chunked.attention_chunk_size == 8192
    assert type(chunked) is old["ChunkedLocalAttentionSpec"]
    window = old["SlidingWindowSpec"](
        block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32, sliding_window=8
    )
    cfg = vs.vllm_config(max_model_len=64, speculative=vs.MTPConfig(3))  # such a vLLM retains no extra tokens
    plan = kv_vllm.VllmAdapter(classes=CLASSES_027).plan(cfg, [{"w": window}], [1 << 24])
    assert plan.config.extra_retained_tokens == 0
    assert getattr(plan.specs["w"], "extra_retained_tokens", None) == 0


def test_kvrules_only_type_has_no_vllm_class() -> None:
    classes = VllmClasses(
        specs={},
        KVCacheConfig=vs.KVCacheConfig,
        KVCacheGroupSpec=vs.KVCacheGroupSpec,
        KVCacheTensor=vs.KVCacheTensor,
    )
    with pytest.raises(SpecError, match="FullAttentionSpec has no class in vLLM"):
        kv_vllm.to_vllm_spec(KV_SPECS["full"], classes=classes)


# -- plan -> KVCacheConfig -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["c5c_dsv4_like", "c2c_gemma_5to1_x2_pp2", "c3_issue43626_mamba_draft"])
def test_plan_converts_to_kv_cache_configs(name: str) -> None:
    case = load_case(name)
    plan = kvrules.plan(case.workers, case.memory, case.config, strategies="vllm")
    configs = kv_vllm.to_kv_cache_configs(plan, classes=CLASSES)
    assert len(configs) == len(plan.workers)
    for config, worker in zip(configs, plan.workers, strict=True):
        assert config.num_blocks == worker.num_blocks
        assert [(t.size, t.shared_by, t.offset, t.block_stride) for t in config.kv_cache_tensors] == [
            (t.size, list(t.shared_by), t.offset, t.block_stride) for t in worker.tensors
        ]
        assert [g.layer_names for g in config.kv_cache_groups] == [list(g.layer_names) for g in worker.groups]
        for group, ours in zip(config.kv_cache_groups, worker.groups, strict=True):
            assert kv_vllm.from_vllm_spec(group.kv_cache_spec) == ours.spec
            assert group.is_eagle_group is False


def test_packed_layout_needs_a_vllm_with_block_stride() -> None:
    case = load_case("c5c_dsv4_like")
    plan = kvrules.plan(case.workers, case.memory, case.config, strategies="vllm")
    assert any(t.block_stride for t in plan.workers[0].tensors)
    with pytest.raises(ConfigError, match=r"no 'offset' field|no 'block_stride' field"):
        kv_vllm.to_kv_cache_configs(plan, classes=CLASSES_027)


# -- reading vllm_config ---------------------------------------------------------------------
def test_read_vllm_config_maps_the_fields_vllm_reads() -> None:
    cfg = vs.vllm_config(
        max_model_len=131072,
        original_max_model_len=-1,
        max_num_batched_tokens=4096,
        num_gpu_blocks_override=1000,
        dcp=2,
        speculative=vs.MTPConfig(3),
    )
    cfg.max_in_flight_tokens = 8192  # two batches in flight: vLLM sizes windows by this
    engine = read_vllm_config(cfg).engine
    assert engine == kvrules.EngineConfig(
        max_model_len=131072,
        max_num_batched_tokens=8192,
        max_num_encoder_input_tokens=4096,
        num_gpu_blocks_override=1000,
        decode_context_parallel_size=2,
        extra_retained_tokens=2,
        auto_fit_max_model_len=True,
        speculative_method="mtp",
    )
    assert (
        read_vllm_config(
            vs.vllm_config(speculative=vs.MTPConfig(3, multi_module=False))
        ).engine.extra_retained_tokens
        == 0
    )


def test_read_vllm_config_grouping_needs_only_the_hybrid_switch() -> None:
    cfg = types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=True), speculative_config=None
    )
    assert read_vllm_config(cfg, grouping_only=True).engine.disable_hybrid_kv_cache_manager is True
    with pytest.raises(ConfigError, match=r"vllm_config\.model_config\.max_model_len is missing"):
        read_vllm_config(cfg)


# -- drop-in functions -----------------------------------------------------------------------
def test_unify_returns_the_same_dict_when_pages_agree() -> None:
    specs = {"a": full(), "b": swa()}
    assert adapter().unify_kv_cache_spec_page_size(specs) is specs


def test_unify_scales_blocks_and_keeps_untouched_objects() -> None:
    big = full(num_kv_heads=4)
    specs = {
        "mamba": vs.MambaSpec(16, ((2, 512), (3, 32, 32)), (torch.float32, torch.float32)),
        "attn": full(),
        "draft": big,
    }
    out = adapter().unify_kv_cache_spec_page_size(specs)
    assert out["draft"] is big
    assert out["attn"] == full(block_size=32)
    assert out["mamba"].page_size_padded == 32768 and out["mamba"].block_size == 16


def test_unify_failure_is_a_not_implemented_error() -> None:
    with pytest.raises(NotImplementedError) as info:
        adapter().unify_kv_cache_spec_page_size({"a": full(block_size=24), "b": full(num_kv_heads=4)})
    assert isinstance(info.value, UnificationError)


def test_groups_with_hybrid_manager_disabled_convert_in_place(caplog: pytest.LogCaptureFixture) -> None:
    specs = {"l1": full(), "l2": swa()}
    with caplog.at_level(logging.WARNING, logger="vllm.kvrules"):
        groups = adapter().get_kv_cache_groups(vs.vllm_config(disable_hybrid=True), specs)
    assert groups == [vs.KVCacheGroupSpec(["l1", "l2"], full(sliding_window=1))]
    assert specs["l2"] == full(sliding_window=1)
    assert "kvrules hybrid-disabled" in caplog.text


def test_groups_with_hybrid_manager_leave_the_input_alone() -> None:
    second = swa()
    specs = {"l1": full(), "l2": second}
    groups = adapter().get_kv_cache_groups(vs.vllm_config(), specs)
    assert groups == [vs.KVCacheGroupSpec(["l1"], full()), vs.KVCacheGroupSpec(["l2"], swa())]
    assert specs["l2"] is second


def test_configs_match_vllm_shape() -> None:
    page = full().page_size_bytes
    configs = adapter().get_kv_cache_configs(
        vs.vllm_config(max_model_len=16), [{"l1": full(), "l2": swa()}], [page * 64]
    )
    assert configs == [
        vs.KVCacheConfig(
            num_blocks=64,
            kv_cache_tensors=[vs.KVCacheTensor(page * 64, ["l1", "l2"])],
            kv_cache_groups=[vs.KVCacheGroupSpec(["l1"], full()), vs.KVCacheGroupSpec(["l2"], swa())],
        )
    ]


def test_configs_set_extra_retained_tokens_for_multi_module_mtp() -> None:
    cfg = vs.vllm_config(max_model_len=64, speculative=vs.MTPConfig(3))
    configs = adapter().get_kv_cache_configs(cfg, [{"l1": full(), "l2": swa()}], [1 << 24])
    assert configs[0].kv_cache_groups[1].kv_cache_spec == swa(extra_retained_tokens=2)


def test_layers_sharing_a_window_spec_share_the_one_with_extra_tokens() -> None:
    cfg = vs.vllm_config(max_model_len=64, speculative=vs.MTPConfig(3))
    plan = adapter().plan(cfg, [{"l1": full(), "l2": swa(), "l3": swa()}], [1 << 24])
    assert plan.specs["l2"] is plan.specs["l3"]
    assert getattr(plan.specs["l2"], "extra_retained_tokens", None) == 2


def test_workers_that_disagree_raise_an_assertion_error() -> None:
    with pytest.raises(AssertionError, match="layer 'l1' has different specs") as info:
        adapter().get_kv_cache_configs(vs.vllm_config(), [{"l1": full()}, {"l1": swa()}], [1 << 20, 1 << 20])
    assert isinstance(info.value, GroupingError)


def test_not_enough_memory_is_vllms_value_error() -> None:
    cfg = vs.vllm_config(max_model_len=16384, num_gpu_blocks_override=32)
    with pytest.raises(ValueError, match="max seq len") as info:
        adapter().get_kv_cache_configs(cfg, [{"l1": full(), "l2": full()}], [1 << 30])
    assert isinstance(info.value, CapacityError) and info.value.max_fitting_len == 512


def test_auto_fit_writes_the_length_back() -> None:
    cfg = vs.vllm_config(max_model_len=1024, original_max_model_len=-1)
    page = full().page_size_bytes
    adapter().get_kv_cache_configs(cfg, [{"l1": full(), "l2": full()}], [page * 2 * 32])
    assert cfg.model_config.max_model_len == 512


def test_adapter_plan_explains_without_side_effects() -> None:
    cfg = vs.vllm_config(max_model_len=1024, original_max_model_len=-1)
    page = full().page_size_bytes
    plan = adapter().plan(cfg, [{"l1": full(), "l2": full()}], [page * 2 * 32])
    assert plan.max_model_len == 512 and cfg.model_config.max_model_len == 1024
    assert [d.outcome for d in plan.decisions if d.rule == "auto-fit"] == ["applied"]


def test_mamba_mode_must_match_the_config() -> None:
    mamba = vs.MambaSpec(16, ((2, 512),), (torch.float32,), mamba_cache_mode="align")
    with pytest.raises(ConfigError, match=r"layer 'm'.*mamba_cache_mode='align'.*'none'"):
        adapter().get_kv_cache_configs(vs.vllm_config(), [{"m": mamba}], [1 << 20])


def test_cross_layer_blocks_are_refused() -> None:
    transfer = types.SimpleNamespace(kv_connector_extra_config={"enable_cross_layers_blocks": "true"})
    cfg = vs.vllm_config(max_model_len=16, kv_transfer_config=transfer)
    with pytest.raises(ConfigError, match="enable_cross_layers_blocks"):
        adapter().get_kv_cache_configs(cfg, [{"l1": full(), "l2": swa()}], [1 << 24])


def test_attention_free_model() -> None:
    configs = adapter().get_kv_cache_configs(vs.vllm_config(max_model_len=16), [{}], [0])
    assert configs == [vs.KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=[])]


# -- state kept across calls -----------------------------------------------------------------
@pytest.fixture
def fresh_states() -> Iterator[None]:
    kv_vllm.reset()
    yield
    kv_vllm.reset()


def counting_conversions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The layers the vLLM -> kvrules conversion is asked for, from now on."""
    asked: list[str] = []
    real = kv_vllm.from_vllm_spec

    def counted(spec: Any, **kw: Any) -> Any:
        asked.append(kw["layer"])
        return real(spec, **kw)

    monkeypatch.setattr(kv_vllm, "from_vllm_spec", counted)
    return asked


def test_adapters_made_one_after_another_share_planner_and_conversions(
    fresh_states: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = counting_conversions(monkeypatch)
    specs = {f"l{i}": full() if i % 3 else swa() for i in range(6)}
    cfg = vs.vllm_config(max_model_len=64)
    first = adapter().get_kv_cache_configs(cfg, [specs], [1 << 24])
    again = {n: dataclasses.replace(s) for n, s in specs.items()}  # equal specs, new objects
    second = adapter().get_kv_cache_configs(cfg, [again], [1 << 24])
    assert first == second
    assert asked == ["l0", "l1"]  # one conversion per distinct spec, over both calls
    assert adapter().planner is adapter().planner
    assert kv_vllm.adapter_state("vllm").planner is adapter().planner


def test_an_unchanged_spec_comes_back_as_the_very_vllm_object(fresh_states: None) -> None:
    specs = {f"l{i}": full() for i in range(3)}
    (config,) = adapter().get_kv_cache_configs(vs.vllm_config(max_model_len=64), [specs], [1 << 24])
    (group,) = config.kv_cache_groups
    assert group.kv_cache_spec is specs["l0"]
    (again,) = adapter().get_kv_cache_groups(vs.vllm_config(), dict(specs))
    assert again.kv_cache_spec is specs["l0"]


def test_uniform_type_group_members_come_back_as_the_layers_objects(fresh_states: None) -> None:
    specs = {"a": full(), "b": full(num_kv_heads=4)}  # one type, two pages: one uniform-type group
    (config,) = adapter().get_kv_cache_configs(vs.vllm_config(max_model_len=64), [specs], [1 << 24])
    (group,) = config.kv_cache_groups
    assert type(group.kv_cache_spec).__name__ == "UniformTypeKVCacheSpecs"
    assert all(group.kv_cache_spec.kv_cache_specs[n] is specs[n] for n in specs)


def test_a_cached_spec_never_comes_back_as_another_vllm_lines_object(fresh_states: None) -> None:
    kv = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="float32")
    group = kvrules.KVCacheGroup(("l0",), kv)
    cache = kv_vllm.adapter_state().cache
    (on_028,) = kv_vllm.to_kv_cache_groups([group], classes=CLASSES, cache=cache)
    (on_027,) = kv_vllm.to_kv_cache_groups([group], classes=CLASSES_027, cache=cache)
    assert type(on_028.kv_cache_spec) is CLASSES.specs["FullAttentionSpec"]
    assert type(on_027.kv_cache_spec) is CLASSES_027.specs["FullAttentionSpec"]


def test_a_plugin_manager_of_its_own_keeps_its_own_state(
    fresh_states: None, kvrules_pm: KVRulesPluginManager
) -> None:
    own = kv_vllm.VllmAdapter("vllm", plugin_manager=kvrules_pm, classes=CLASSES)
    assert own.planner is not adapter().planner and own.cache is not adapter().cache


def test_reset_and_a_replaced_default_manager_start_a_new_state(fresh_states: None) -> None:
    from kvrules.plugin import manager

    before = kv_vllm.adapter_state()
    kv_vllm.reset()
    after = kv_vllm.adapter_state()
    assert after is not before
    saved = manager.default_manager()
    manager.set_default_manager(kvrules.get_plugin_manager())
    try:
        assert kv_vllm.adapter_state() is not after
    finally:
        manager.set_default_manager(saved)


# -- install / uninstall ---------------------------------------------------------------------
@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    """A vLLM of the 0.28 line (its seam's functions with vLLM's signatures, 0.28's classes), and
    ``vllm.v1.engine.core``, which imported one function."""
    kv_vllm.uninstall()
    modules, _ = vs.fake_vllm_modules("0.28")
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_config_builder", None)
    utils = modules[kv_vllm.UTILS_MODULE]
    engine = types.ModuleType("vllm.v1.engine.core")
    engine.get_kv_cache_configs = utils.get_kv_cache_configs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, engine.__name__, engine)
    yield utils, engine
    kv_vllm.uninstall()


def test_install_is_idempotent_reversible_and_logs_once(
    fake_vllm: tuple[types.ModuleType, types.ModuleType],
) -> None:
    utils, engine = fake_vllm
    originals = {name: getattr(utils, name) for name in kv_vllm.DROP_IN_NAMES}
    with structlog.testing.capture_logs() as logs:
        kv_vllm.install()
        kv_vllm.install("vllm")
    logs = [e for e in logs if e["event"].startswith("kvrules.vllm.")]
    assert [e["event"] for e in logs] == ["kvrules.vllm.installed"]
    assert logs[0]["strategy_set"] == "vllm-0.28"
    assert logs[0]["replaced"] == sorted(
        [f"vllm.v1.core.kv_cache_utils.{n}" for n in kv_vllm.DROP_IN_NAMES]
        + ["vllm.v1.engine.core.get_kv_cache_configs"]
    )
    assert kv_vllm.installed_strategies() == "vllm-0.28"
    for name in kv_vllm.DROP_IN_NAMES:
        assert getattr(utils, name) is getattr(kv_vllm, name)
    assert engine.get_kv_cache_configs is kv_vllm.get_kv_cache_configs
    kv_vllm.uninstall()
    kv_vllm.uninstall()
    assert kv_vllm.installed_strategies() is None
    assert {name: getattr(utils, name) for name in kv_vllm.DROP_IN_NAMES} == originals
    assert engine.get_kv_cache_configs is originals["get_kv_cache_configs"]


def test_install_another_set_swaps_the_planner(fake_vllm: tuple[types.ModuleType, types.ModuleType]) -> None:
    utils, _ = fake_vllm
    original = utils.get_kv_cache_groups
    kv_vllm.install("vllm")
    with structlog.testing.capture_logs() as logs:
        kv_vllm.install("default")
    assert [e["strategy_set"] for e in logs if e["event"] == "kvrules.vllm.installed"] == ["default"]
    assert kv_vllm.installed_strategies() == "default"
    kv_vllm.uninstall()
    assert utils.get_kv_cache_groups is original


def test_modules_imported_after_install_are_restored_too(
    fake_vllm: tuple[types.ModuleType, types.ModuleType],
) -> None:
    utils, _ = fake_vllm
    original = utils.get_kv_cache_groups
    kv_vllm.install()
    late = types.ModuleType("vllm.v1.worker.late")
    late.get_kv_cache_groups = utils.get_kv_cache_groups  # type: ignore[attr-defined]
    sys.modules[late.__name__] = late
    try:
        kv_vllm.uninstall()
        assert late.get_kv_cache_groups is original
    finally:
        del sys.modules[late.__name__]


def test_install_again_repairs_a_reloaded_module(
    fake_vllm: tuple[types.ModuleType, types.ModuleType],
) -> None:
    utils, engine = fake_vllm
    kv_vllm.install()
    fresh = {  # what importlib.reload makes: vLLM's functions again, new objects
        name: vs.seam_function(name, vs.SEAMS["0.28"][name], []) for name in kv_vllm.DROP_IN_NAMES
    }
    for name, fn in fresh.items():
        setattr(utils, name, fn)
    with structlog.testing.capture_logs() as logs:
        kv_vllm.install()
    assert [e["event"] for e in logs] == ["kvrules.vllm.installed"]
    assert utils.get_kv_cache_groups is kv_vllm.get_kv_cache_groups
    kv_vllm.uninstall()
    assert {name: getattr(utils, name) for name in kv_vllm.DROP_IN_NAMES} == fresh
    assert engine.get_kv_cache_configs is not kv_vllm.get_kv_cache_configs


def test_install_unknown_strategy_changes_nothing(
    fake_vllm: tuple[types.ModuleType, types.ModuleType],
) -> None:
    utils, _ = fake_vllm
    original = utils.get_kv_cache_configs
    with pytest.raises(kvrules.PluginError, match="unknown"):
        kv_vllm.install("no-such-set")
    assert utils.get_kv_cache_configs is original and kv_vllm.installed_strategies() is None


def test_on_028_specs_kvrules_cannot_plan_are_planned_by_vllm(
    fake_vllm: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvrules.integrations import vllm_fallback

    utils, engine = fake_vllm
    vllm_fallback.reset()
    monkeypatch.delenv(vllm_fallback.STRICT_ENV, raising=False)
    kv_vllm.install()
    ns = vs.namespace()
    ring = ns.RSWASpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, rswa_window=8)
    specs = [{"model.layers.0.attn": ring}]
    cfg = vs.vllm_config()
    assert engine.get_kv_cache_configs(cfg, specs, [1 << 30]) == ("vllm", "get_kv_cache_configs")
    assert utils.get_kv_cache_groups(cfg, dict(specs[0])) == ("vllm", "get_kv_cache_groups")
    decisions = kv_vllm.fallbacks()
    assert [d.details["seam"] for d in decisions] == ["get_kv_cache_configs", "get_kv_cache_groups"]
    assert all("RSWASpec" in d.reason and d.details["vllm_line"] == "0.28" for d in decisions)
    full = ns.FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    planned = engine.get_kv_cache_configs(cfg, [{"model.layers.0.attn": full}], [1 << 30])
    assert planned[0].num_blocks > 0  # the same layer with a spec kvrules models: kvrules plans again
    vllm_fallback.reset()


def test_on_028_a_capacity_verdict_reaches_vllm_as_its_value_error(
    fake_vllm: tuple[types.ModuleType, types.ModuleType],
) -> None:
    from kvrules.integrations import vllm_fallback

    _, engine = fake_vllm
    vllm_fallback.reset()
    kv_vllm.install()
    full = vs.namespace().FullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
    )
    with pytest.raises(ValueError, match="max seq len"):
        engine.get_kv_cache_configs(vs.vllm_config(max_model_len=1 << 20), [{"a": full}], [1 << 20])
    assert kv_vllm.fallbacks() == ()


def test_install_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    kv_vllm.uninstall()
    monkeypatch.setitem(sys.modules, kv_vllm.UTILS_MODULE, None)
    with pytest.raises(ImportError, match=r"kvrules\[vllm\]") as info:
        kv_vllm.install()
    assert isinstance(info.value, VllmNotInstalledError) and isinstance(info.value, kvrules.KVRulesError)


def test_general_plugin_installs_only_when_asked(
    fake_vllm: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(kv_vllm.STRATEGIES_ENV, raising=False)
    kv_vllm.vllm_general_plugin()
    assert kv_vllm.installed_strategies() is None
    monkeypatch.setenv(kv_vllm.STRATEGIES_ENV, "default")
    kv_vllm.vllm_general_plugin()
    assert kv_vllm.installed_strategies() == "default"
    monkeypatch.setenv(kv_vllm.STRATEGIES_ENV, "auto")
    kv_vllm.vllm_general_plugin()
    assert kv_vllm.installed_strategies() == "vllm-0.28"
    assert kv_vllm.installed_line() is not None and kv_vllm.installed_line().releases == "0.27-0.28"


def test_general_plugin_with_an_unknown_set_logs_one_error_and_leaves_vllm(
    fake_vllm: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    utils, _ = fake_vllm
    original = utils.get_kv_cache_configs
    monkeypatch.setenv(kv_vllm.STRATEGIES_ENV, "no-such-set")
    with structlog.testing.capture_logs() as logs:
        kv_vllm.vllm_general_plugin()
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in errors] == ["kvrules.vllm.not_installed"]
    assert "no-such-set" in errors[0]["reason"]
    assert utils.get_kv_cache_configs is original and kv_vllm.installed_strategies() is None
    monkeypatch.setenv("KVRULES_VLLM_STRICT", "1")
    with pytest.raises(kvrules.PluginError, match="no-such-set"):
        kv_vllm.vllm_general_plugin()


def test_general_plugin_refuses_a_strict_switch_that_is_not_a_boolean(
    fake_vllm: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kv_vllm.STRATEGIES_ENV, "auto")
    monkeypatch.setenv("KVRULES_VLLM_STRICT", "sometimes")
    with pytest.raises(kvrules.ConfigError, match="KVRULES_VLLM_STRICT='sometimes'"):
        kv_vllm.vllm_general_plugin()
    assert kv_vllm.installed_strategies() is None


def test_parse_strategies() -> None:
    assert kv_vllm.parse_strategies("vllm") == "vllm"
    assert kv_vllm.parse_strategies(" vllm , min-padding ") == ["vllm", "min-padding"]
    assert kv_vllm.parse_strategies("") == "vllm-0.28"
    assert kv_vllm.parse_strategies("auto") == "vllm-0.28"
    assert kv_vllm.parse_strategies("auto", "vllm-0.33") == "vllm-0.33"
    assert kv_vllm.parse_strategies("auto,min-padding") == ["vllm-0.28", "min-padding"]


def test_importing_kvrules_never_imports_vllm() -> None:
    code = (
        "import sys, kvrules, kvrules.integrations.vllm;"
        "sys.exit(any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- the real vLLM, when it is importable ----------------------------------------------------
def test_real_vllm_round_trip_and_drop_in_parity() -> None:
    interface = pytest.importorskip("vllm.v1.kv_cache_interface")
    utils = pytest.importorskip("vllm.v1.core.kv_cache_utils")
    if vllm_platform.vllm_line() != "0.28":
        pytest.skip(
            "the installed vLLM is the 0.33 line: tests/vllm_integration/test_vllm033_integration.py covers it"
        )
    real = kv_vllm.vllm_classes()
    specs = {
        f"layer.{i}": spec for i, spec in enumerate(KV_SPECS.values()) if type(spec).__name__ in real.specs
    }
    as_vllm = kv_vllm.to_vllm_specs(specs, classes=real)
    assert all(type(s).__module__ == interface.__name__ for s in as_vllm.values())
    back = kv_vllm.from_vllm_specs(as_vllm)
    assert {n: s.page_size_bytes for n, s in back.items()} == {n: s.page_size_bytes for n, s in specs.items()}
    assert kv_vllm.to_vllm_specs(back, classes=real) == as_vllm  # vLLM's side is restored exactly

    model = {
        f"model.layers.{i}.attn": interface.FullAttentionSpec(
            block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
        )
        if i % 3 == 2
        else interface.SlidingWindowSpec(
            block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, sliding_window=512
        )
        for i in range(9)
    }
    theirs = utils.__dict__.get("get_kv_cache_configs")
    if theirs is kv_vllm.get_kv_cache_configs:  # already installed in this process
        pytest.skip("vLLM's planner is replaced in this process")
    expected = theirs(vs.vllm_config(max_model_len=8192), [dict(model)], [1 << 28])
    got = kv_vllm.VllmAdapter("vllm").get_kv_cache_configs(
        vs.vllm_config(max_model_len=8192), [dict(model)], [1 << 28]
    )
    assert got == expected
