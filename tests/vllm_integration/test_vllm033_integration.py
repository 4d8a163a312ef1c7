"""kvrules as vLLM 0.33's KVCacheConfigBuilder, against stand-ins with vLLM 0.33's class and field
names (tests/vllm_standins.py ``namespace_033``); no vLLM needed. The real-vLLM check skips
cleanly when vLLM 0.33 is absent."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
import torch
import vllm_standins as vs
from case_loader import load_case

import kvrules
from kvrules import ConfigError, EngineConfig, Planner, SpecError
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations import vllm033, vllm_platform
from kvrules.integrations.vllm033_specs import from_vllm033_spec, to_vllm033_spec
from kvrules.integrations.vllm_specs import VllmClasses

NS = vs.namespace_033()
CLASSES = VllmClasses.from_namespace(NS, version="0.33.0-standin")
BF16 = torch.bfloat16


def full(layer_block: int = 16, **kw: Any) -> Any:
    return NS.FullAttentionSpec(block_size=layer_block, num_kv_heads=8, head_size=128, dtype=BF16, **kw)


def swa(**kw: Any) -> Any:
    return NS.SlidingWindowSpec(
        block_size=16, num_kv_heads=8, head_size=128, dtype=BF16, sliding_window=1024, **kw
    )


def mla(**kw: Any) -> Any:
    return NS.MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype=BF16, **kw)


def gemma_like(layers: int = 12) -> dict[str, Any]:
    """5 sliding-window layers to 1 full-attention layer."""
    return {f"model.layers.{i}": full() if i % 6 == 5 else swa() for i in range(layers)}


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(vllm033.STRATEGIES_ENV, raising=False)
    vllm033.reset()
    yield
    vllm033.reset()


def shared(strategies: Any = None) -> vllm033.BuilderState:
    return vllm033.state(strategies, classes=CLASSES)


# -- conversion ------------------------------------------------------------------------------
def test_tokens_per_state_is_compress_ratio_both_ways() -> None:
    spec = mla(tokens_per_state=4, alignment=576)
    kv = from_vllm033_spec(spec, layer="l0")
    assert kv.compress_ratio == 4  # type: ignore[attr-defined]
    assert kv.page_size_bytes == spec.page_size_bytes
    assert to_vllm033_spec(kv, classes=CLASSES, layer="l0") == spec


def test_is_draft_is_left_to_core_and_put_back() -> None:
    spec = full(is_draft=True)
    kv = from_vllm033_spec(spec, layer="draft.0")
    back = to_vllm033_spec(kv, classes=CLASSES, layer="draft.0", carried={"is_draft": True})
    assert back.is_draft is True and back == spec


def test_max_tp_shards_is_carried_back_onto_group_specs() -> None:
    specs = {f"l{i}": full(max_tp_shards=2) for i in range(3)}
    groups = vllm033.get_kv_cache_groups(shared(), vs.vllm_config_033(), dict(specs))
    assert [g.kv_cache_spec.max_tp_shards for g in groups] == [2]


def test_layers_of_one_group_disagreeing_about_max_tp_shards_are_refused() -> None:
    specs = {"l0": full(max_tp_shards=2), "l1": full(max_tp_shards=4)}
    with pytest.raises(SpecError, match=r"layer 'l0'.*different max_tp_shards values"):
        vllm033.get_kv_cache_groups(shared(), vs.vllm_config_033(), specs)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (full(block_stride_alignment=256), "block_stride_alignment"),
        (full(dcp_sharded=False), "dcp_sharded"),
        (full(tokens_per_state=2), "tokens_per_state"),
        (mla(topk_buffer_width=2048), "topk_buffer_width"),
        (NS.MambaSpec(16, shapes=((4, 8),), dtypes=(BF16,), tp_replicated=True), "tp_replicated"),
        (NS.MambaSpec(16, shapes=((4, 8),), dtypes=(BF16,), num_heads=4), "num_heads"),
    ],
)
def test_unmodelled_033_field_off_its_default_is_refused_naming_layer_and_field(
    spec: Any, field: str
) -> None:
    with pytest.raises(SpecError, match=rf"layer 'model.layers.7'.*\.{field}="):
        from_vllm033_spec(spec, layer="model.layers.7")


def test_mamba_prefill_checkpoints_are_modelled_both_ways() -> None:
    """vLLM 0.32-0.33's Mamba2 layers always set one prefill checkpoint block of alignment 1."""
    spec = NS.MambaSpec(
        16,
        shapes=((3, 64), (4, 8, 8)),
        dtypes=(BF16, BF16),
        mamba_cache_mode="align",
        num_prefill_checkpoint_blocks=1,
        prefill_checkpoint_alignment=1,
    )
    kv = from_vllm033_spec(spec, layer="model.layers.0.mixer")
    assert (kv.num_prefill_checkpoint_blocks, kv.prefill_checkpoint_alignment) == (1, 1)
    assert to_vllm033_spec(kv, classes=CLASSES) == spec
    config = EngineConfig(max_model_len=4096)
    # align mode: 2 pages + one per speculative block + one per checkpoint block (vLLM's formula)
    assert kv.max_memory_usage_bytes(config) == 3 * kv.page_size_bytes
    assert kv.evolve(mamba_cache_mode="none").max_memory_usage_bytes(config) == kv.page_size_bytes
    # layers whose checkpoints differ never share one uniform-type group
    assert kv.uniform_type_key() != kv.evolve(num_prefill_checkpoint_blocks=0).uniform_type_key()


def test_fractional_tokens_per_state_is_refused() -> None:
    spec = mla(tokens_per_state=Fraction(1, 2))
    with pytest.raises(SpecError, match=r"layer 'x'.*tokens_per_state=Fraction\(1, 2\)"):
        from_vllm033_spec(spec, layer="x")


def test_unknown_033_class_is_refused_by_name() -> None:
    ring = NS.CircularBufferSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
    with pytest.raises(SpecError, match=r"layer 'ring': vLLM 0.29\+ spec type CircularBufferSpec"):
        from_vllm033_spec(ring, layer="ring")


# -- the builder -----------------------------------------------------------------------------
def native_plan(specs: dict[str, Any], num_blocks: int, layout: str) -> Any:
    kv = {name: from_vllm033_spec(s, layer=name) for name, s in specs.items()}
    config = EngineConfig(max_model_len=128, num_gpu_blocks_override=num_blocks, kv_cache_layout=layout)
    return Planner("vllm-0.33").plan(kv, 1 << 40, config)


@pytest.mark.parametrize("layout", ["LBNHC", "BLHNC"])
def test_builder_groups_and_places_as_the_native_preset(layout: str) -> None:
    specs = gemma_like()
    cfg = vs.vllm_config_033(kv_cache_layout=layout)
    st = shared()
    assert st.strategy_set == "vllm-0.33"
    groups = vllm033.get_kv_cache_groups(st, cfg, dict(specs))
    plan = native_plan(specs, 100, layout)
    assert [tuple(g.layer_names) for g in groups] == [g.layer_names for g in plan.groups]
    config = vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 100)
    assert config.num_blocks == 100 and config.kv_cache_groups == groups
    got = [
        (t.size, tuple(t.layers), t.layer_stride, t.block_stride, t.offset) for t in config.kv_cache_tensors
    ]
    want = [(t.size, t.layers, t.layer_stride, t.block_stride, t.offset) for t in plan.workers[0].backing]
    assert got == want
    assert len({t.size for t in config.kv_cache_tensors}) == 1  # one backing per worker
    bytes_per_block = vllm033.pool_bytes_per_block(st, cfg, groups)
    assert bytes_per_block is not None
    assert config.kv_cache_tensors[0].size == bytes_per_block * 100


def test_layer_and_block_outermost_strides_differ() -> None:
    specs = {f"l{i}": full() for i in range(3)}
    page = full().page_size_bytes
    st = shared()
    outer = {}
    for layout in ("LBNHC", "BLHNC"):
        cfg = vs.vllm_config_033(kv_cache_layout=layout)
        groups = vllm033.get_kv_cache_groups(st, cfg, dict(specs))
        outer[layout] = vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 10).kv_cache_tensors
    assert [(t.layer_stride, t.block_stride) for t in outer["LBNHC"]] == [(page * 10, page)]
    assert [(t.layer_stride, t.block_stride) for t in outer["BLHNC"]] == [(page, page * 3)]


@pytest.mark.parametrize(
    ("layout", "per_layer", "per_block"),
    [
        # L, H, B, N, C: a block holds one head's 16 tokens; a layer spans all heads of all blocks
        ("LHBNC", "page x blocks", "a head's share"),
        # B, H, L, N, C (block-outermost): a layer's slice of a block is one head's tokens
        ("BHLNC", "a head's share", "a block"),
    ],
)
def test_heads_outside_blocks_stride_as_vllm_does(layout: str, per_layer: str, per_block: str) -> None:
    """vLLM 0.33 strides a tensor by its layout's axis order (found by vLLM 0.32's
    test_multi_run_layer_compact_strides_place_hoisted_heads: kvrules strode blocks by the page)."""
    spec = full()  # 8 heads x 16 tokens x (128 + 128) x 2 bytes
    head_share = 16 * (128 + 128) * 2
    page = 8 * head_share
    assert spec.page_size_bytes == page
    st, cfg = shared(), vs.vllm_config_033(kv_cache_layout=layout)
    groups = vllm033.get_kv_cache_groups(st, cfg, {f"l{i}": full() for i in range(3)})
    (tensor,) = vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 10).kv_cache_tensors
    figures = {"page x blocks": page * 10, "a head's share": head_share, "a block": 3 * page}
    assert (tensor.layer_stride, tensor.block_stride) == (figures[per_layer], figures[per_block])


def test_a_padded_page_with_heads_outside_blocks_is_refused() -> None:
    from kvrules.plan import layout_strides

    padded = kvrules.FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="bfloat16", page_size_padded=1 << 17
    )
    with pytest.raises(ConfigError, match="LHBNC puts 8 heads"):
        layout_strides(padded, 10, 1, "LHBNC")
    assert layout_strides(padded, 10, 1, "LBNHC") == (10 << 17, 1 << 17)


def test_a_fallback_routes_promotion_leaves_the_callers_specs_and_tells_vllms_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM 0.32's test_mla_with_incompatible_swa_uses_one_full_allocation_group: the promoted
    sliding-window draft lives in the group only; vLLM says so on its log."""
    draft = NS.SlidingWindowSpec(
        block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32, sliding_window=1
    )
    specs = {
        "target.0.attn": NS.MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=576, dtype=torch.float32
        ),
        "target.0.indexer": NS.MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=132, dtype=torch.uint8
        ),
        "draft.0": draft,
    }
    with caplog.at_level("WARNING", logger="vllm.kvrules"):
        groups = vllm033.get_kv_cache_groups(shared(), vs.vllm_config_033(), specs)
    assert len(groups) == 1 and specs["draft.0"] is draft
    promoted = groups[0].kv_cache_spec.kv_cache_specs["draft.0"]
    assert type(promoted).__name__ == "FullAttentionSpec" and promoted.sliding_window == 1
    assert "attention compute is unchanged" in caplog.text


def hidden(block: int) -> Any:
    return NS.HiddenStateCacheSpec(block_size=block, num_kv_heads=6, head_size=2048, dtype=BF16)


def test_hidden_state_layers_are_kept_out_of_block_outermost_packing() -> None:
    """vLLM 0.32's test_hidden_state_group_isolated_from_packed_mla_groups: vLLM takes them out
    before packing; with the other pages equal nothing is packed and they are re-sized as usual."""
    specs = {
        "layers.0.mla": mla(),
        "layers.1.swa": NS.SlidingWindowMLASpec(
            block_size=64, num_kv_heads=1, head_size=576, dtype=BF16, sliding_window=512
        ),
        "cache_only_layers.61": hidden(64),
    }
    groups = vllm033.get_kv_cache_groups(shared(), vs.vllm_config_033(kv_cache_layout="BLHNC"), specs)
    assert [(g.layer_names, g.kv_cache_spec.page_size_bytes) for g in groups] == [
        (["layers.0.mla"], 73728),
        (["layers.1.swa"], 73728),
        (["cache_only_layers.61"], 73728),
    ]
    assert groups[2].kv_cache_spec.block_size == 2  # 73728 // (6 x 2048 x 2) tokens, a divisor of 64


def test_packing_kvrules_cannot_reproduce_is_refused_not_planned_otherwise() -> None:
    """vLLM 0.33 packs any mixed pages under a block-outermost layout; the vllm-0.33 preset
    reproduces that for MLA only, and says so instead of unifying the pages."""
    specs = {
        "layers.0.attn": full(),
        "layers.1.mamba": NS.MambaSpec(16, shapes=((1024,),), dtypes=(torch.float32,)),
    }
    with pytest.raises(kvrules.GroupingError, match="full_attention, mamba"):
        vllm033.get_kv_cache_groups(shared(), vs.vllm_config_033(kv_cache_layout="BLHNC"), specs)


def test_unchanged_specs_come_back_as_the_very_objects_and_drafts_keep_their_tag() -> None:
    specs = {**{f"l{i}": full() for i in range(2)}, "draft.0": full(is_draft=True)}
    st = shared()
    groups = vllm033.get_kv_cache_groups(st, vs.vllm_config_033(), dict(specs))
    assert len(groups) == 1
    assert groups[0].kv_cache_spec.is_draft is True  # a group holding a draft layer


def test_builder_rejects_a_non_positive_block_count() -> None:
    st = shared()
    cfg = vs.vllm_config_033()
    groups = vllm033.get_kv_cache_groups(st, cfg, {"l0": full()})
    with pytest.raises(ConfigError, match="num_blocks=0"):
        vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 0)


def test_disabled_hybrid_manager_replaces_specs_in_place() -> None:
    specs = gemma_like(6)
    st = shared()
    groups = vllm033.get_kv_cache_groups(st, vs.vllm_config_033(disable_hybrid=True), specs)
    assert len(groups) == 1
    assert all(type(s).__name__ == "FullAttentionSpec" for s in specs.values())


def test_state_and_conversions_outlive_builder_instances() -> None:
    spec = full()
    st = shared()
    first = st.to_kvrules(spec, "l0")
    assert vllm033.state() is st and st.to_kvrules(spec, "l0") is first
    assert st.planner.plugin_manager is Planner().plugin_manager


def test_a_replaced_default_manager_starts_a_new_state() -> None:
    from kvrules.plugin import manager

    before = shared()
    saved = manager.default_manager()
    manager.set_default_manager(kvrules.get_plugin_manager())
    try:
        after = shared()
        assert after is not before and after.planner.plugin_manager is manager.default_manager()
    finally:
        manager.set_default_manager(saved)


def counting_conversions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The layers the 0.33 conversion is asked for, from now on."""
    asked: list[str] = []

    def counted(spec: Any, **kw: Any) -> Any:
        asked.append(kw["layer"])
        return from_vllm033_spec(spec, **kw)

    monkeypatch.setattr("kvrules.integrations.vllm033.from_vllm033_spec", counted)
    return asked


def test_equal_specs_remade_by_vllm_convert_once_and_share_one_kvrules_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # vLLM 0.33 re-makes every sliding-window spec on each call (extra_retained_tokens)
    asked = counting_conversions(monkeypatch)
    st = shared()
    first = {f"l{i}": swa() for i in range(4)}
    again = {f"l{i}": swa() for i in range(4)}
    kv_first = [st.to_kvrules(s, n) for n, s in first.items()]
    kv_again = [st.to_kvrules(s, n) for n, s in again.items()]
    assert asked == ["l0"]
    assert all(kv is kv_first[0] for kv in kv_first + kv_again)


def test_a_group_spec_the_builder_returned_converts_back_without_conversion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = {  # two pages: one uniform-type group
        f"l{i}": NS.FullAttentionSpec(block_size=16, num_kv_heads=1 + i % 2, head_size=128, dtype=BF16)
        for i in range(4)
    }
    st = shared()
    cfg = vs.vllm_config_033()
    groups = vllm033.get_kv_cache_groups(st, cfg, dict(specs))
    assert [type(g.kv_cache_spec).__name__ for g in groups] == ["UniformTypeKVCacheSpecs"]
    asked = counting_conversions(monkeypatch)
    for _ in range(3):  # the bytes-per-block answer, admission, the placement
        assert vllm033.pool_bytes_per_block(st, cfg, groups) == sum(s.page_size_bytes for s in specs.values())
        vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 8)
    assert asked == []
    members = groups[0].kv_cache_spec.kv_cache_specs
    given = {id(s) for s in specs.values()}
    assert all(members[n] == specs[n] and id(members[n]) in given for n in specs)  # objects that went in


def test_non_mla_attention_reads_pages_strided_on_033_and_mla_does_not() -> None:
    assert from_vllm033_spec(full(), layer="f").indexes_kv_by_block_stride is True  # type: ignore[attr-defined]
    assert from_vllm033_spec(swa(), layer="s").indexes_kv_by_block_stride is True  # type: ignore[attr-defined]
    assert from_vllm033_spec(mla(), layer="m").indexes_kv_by_block_stride is False  # type: ignore[attr-defined]
    for spec in (full(), swa(), mla()):
        assert to_vllm033_spec(from_vllm033_spec(spec, layer="x"), classes=CLASSES, layer="x") == spec


def test_a_strided_mla_page_cannot_be_expressed_in_033() -> None:
    kv = from_vllm033_spec(mla(), layer="m").evolve(indexes_kv_by_block_stride=True)
    with pytest.raises(SpecError, match=r"layer 'm'.*indexes_kv_by_block_stride=True cannot be expressed"):
        to_vllm033_spec(kv, classes=CLASSES, layer="m")


def case_specs_033(name: str) -> tuple[dict[str, Any], Any]:
    """A shared case's layers as vLLM 0.33 stand-in specs, and its recorded vLLM 0.33 answer."""
    case = load_case(name, "vllm-0.33")
    specs = {
        n: to_vllm033_spec(s.evolve(indexes_kv_by_block_stride=False), classes=CLASSES, layer=n)
        if getattr(s, "indexes_kv_by_block_stride", False)
        else to_vllm033_spec(s, classes=CLASSES, layer=n)
        for n, s in case.all_specs.items()
    }
    return specs, case.answer


@pytest.mark.parametrize(
    "name", ["c4_nondivisible_without_block_stride", "c4_nondivisible_with_block_stride"]
)
def test_default_pads_what_vllm_033_pads(name: str) -> None:
    specs, answer = case_specs_033(name)
    cfg = vs.vllm_config_033()
    placed = {}
    for strategies in ("vllm-0.33", "default"):
        st = shared(strategies)
        groups = vllm033.get_kv_cache_groups(st, cfg, dict(specs))
        assert any(d.rule in ("attention-pad", "stride-pad") and d.outcome == "applied" for d in st.decisions)
        config = vllm033.get_kv_cache_config_from_groups(st, cfg, groups, 64)
        placed[strategies] = (
            [(tuple(g.layer_names), g.kv_cache_spec.page_size_bytes) for g in groups],
            [(t.size, tuple(t.layers), t.layer_stride, t.block_stride) for t in config.kv_cache_tensors],
        )
    assert placed["default"] == placed["vllm-0.33"]
    recorded = sorted(sorted(g["layer_names"]) for g in answer["kv_cache_groups"])
    assert sorted(sorted(names) for names, _ in placed["default"][0]) == recorded


# -- selection -------------------------------------------------------------------------------
def test_auto_and_unset_select_the_line_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    assert vllm033.active_strategies() == "vllm-0.33"
    monkeypatch.setenv(vllm033.STRATEGIES_ENV, "auto")
    assert vllm033.active_strategies() == "vllm-0.33"
    monkeypatch.setenv(vllm033.STRATEGIES_ENV, "default")
    assert vllm033.state().strategy_set == "default"
    monkeypatch.setenv(vllm033.STRATEGIES_ENV, "auto,min-padding")
    assert vllm033.active_strategies() == ["vllm-0.33", "min-padding"]


@pytest.fixture
def fake_vllm033(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A vLLM of the 0.33 line (its builder module and classes) and ``vllm.platforms`` with an
    active platform class."""

    class Platform:
        @classmethod
        def get_kv_cache_config_builder_cls(cls, vllm_config: Any) -> str:
            return "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"

    modules, _ = vs.fake_vllm_modules("0.33")
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = Platform()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, platforms.__name__, platforms)
    yield Platform
    kv_vllm.uninstall()
    vllm_platform.restore_platform_hook(Platform)


def test_general_plugin_sets_the_public_hook_on_033(
    fake_vllm033: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = fake_vllm033
    default = platform.get_kv_cache_config_builder_cls(None)
    kv_vllm.vllm_general_plugin()  # unset: nothing changes
    assert platform.get_kv_cache_config_builder_cls(None) == default
    monkeypatch.setenv(vllm033.STRATEGIES_ENV, "default")
    kv_vllm.vllm_general_plugin()
    assert platform.get_kv_cache_config_builder_cls(None) == vllm033.BUILDER_QUALNAME
    assert vllm033.state(classes=CLASSES).strategy_set == "default"
    assert kv_vllm.installed_strategies() == "default"
    assert kv_vllm.installed_line() is not None and kv_vllm.installed_line().name == "0.33"
    kv_vllm.uninstall()  # 0.33: no private function was replaced, the hook is given back
    assert platform.get_kv_cache_config_builder_cls(None) == default


def test_the_builder_hands_specs_it_cannot_plan_to_vllms_own_builder(
    fake_vllm033: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvrules.integrations import vllm_fallback

    calls: list[str] = []

    class DefaultKVCacheConfigBuilder:
        def get_kv_cache_groups(self, vllm_config: Any, kv_cache_spec: Any) -> Any:
            calls.append("groups")
            return ["vllm's groups"]

        def get_kv_cache_config_from_groups(
            self, vllm_config: Any, kv_cache_groups: Any, num_blocks: int
        ) -> Any:
            calls.append("placement")
            return "vllm's placement"

        def _get_pool_bytes_per_block(self, vllm_config: Any, kv_cache_groups: Any) -> Any:
            calls.append("bytes")
            return None

    planning = types.ModuleType("vllm.v1.core.kv_cache_planning")
    planning.DefaultKVCacheConfigBuilder = DefaultKVCacheConfigBuilder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, planning.__name__, planning)
    monkeypatch.delenv(vllm_fallback.STRICT_ENV, raising=False)
    vllm_fallback.reset()
    vllm_platform.set_platform_hook(fake_vllm033, strategies="auto")
    builder = vllm033.builder_class()()
    ring = NS.CircularBufferSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=BF16)
    specs = {"model.layers.0.ring": ring, "model.layers.1": full()}
    cfg = vs.vllm_config_033()
    assert builder.get_kv_cache_groups(cfg, specs) == ["vllm's groups"]
    group = NS.KVCacheGroupSpec(list(specs), full())
    assert builder._get_pool_bytes_per_block(cfg, [group]) is None
    assert builder.get_kv_cache_config_from_groups(cfg, [group], 8) == "vllm's placement"
    assert calls == ["groups", "bytes", "placement"]
    (decision,) = kv_vllm.fallbacks()
    assert decision.details["seam"] == "KVCacheConfigBuilder.get_kv_cache_groups"
    shared()
    assert builder.get_kv_cache_groups(cfg, gemma_like(6)) != ["vllm's groups"]  # other specs: kvrules
    vllm_fallback.reset()


def test_the_qualname_resolves_to_a_builder_subclass(fake_vllm033: Any) -> None:
    module_name, _, name = vllm033.BUILDER_QUALNAME.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    base = sys.modules[vllm033.BUILDER_BASE_MODULE].KVCacheConfigBuilder
    assert issubclass(cls, base) and cls is vllm033.builder_class()
    shared()
    groups = cls().get_kv_cache_groups(vs.vllm_config_033(), gemma_like(6))
    assert sorted(tuple(g.layer_names) for g in groups) == sorted((n,) for n in gemma_like(6))


def test_platform_mixin_overrides_the_hook() -> None:
    class Vendor(vllm_platform.KVRulesPlatformMixin):
        kvrules_strategies = "default"

    assert Vendor.get_kv_cache_config_builder_cls(None) == vllm033.BUILDER_QUALNAME
    assert vllm033.active_strategies() == "default"


def test_line_detection(fake_vllm033: Any) -> None:
    assert vllm_platform.vllm_line() == "0.33"
    assert vllm_platform.line_preset() == "vllm-0.33"
    assert vllm_platform.line_preset("0.28") == "vllm-0.28"


def test_importing_the_033_modules_never_imports_vllm() -> None:
    code = (
        "import sys, kvrules.integrations.vllm033, kvrules.integrations.vllm_platform;"
        "sys.exit(any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_real_vllm033_builder_seam() -> None:
    base = pytest.importorskip("vllm.v1.core.kv_cache_config_builder")
    interface = pytest.importorskip("vllm.v1.kv_cache_interface")
    cls = vllm033.builder_class()
    assert issubclass(cls, base.KVCacheConfigBuilder)
    real = VllmClasses.from_namespace(interface)
    spec = interface.FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=BF16)
    assert to_vllm033_spec(from_vllm033_spec(spec, layer="l0"), classes=real) == spec
