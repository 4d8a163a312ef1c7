"""is_eagle_group: vLLM 0.28 flags DeepSeek-V4's MTP group under EAGLE-style speculation."""

from __future__ import annotations

import types

import pytest

from kvrules import (
    ConfigError,
    EngineConfig,
    KVCacheSpec,
    MLAAttentionSpec,
    Plan,
    Planner,
    SlidingWindowMLASpec,
)
from kvrules.config import EAGLE_STYLE_METHODS
from kvrules.integrations.vllm_config import read_vllm_config
from kvrules.pipeline import MemoryInput, SpecsInput

GIB = 1 << 30


def mla(version: str | None = "deepseek_v4") -> MLAAttentionSpec:
    # 256 tokens / 4 = 64 stored x 512 x 2 bytes = 65,536 bytes
    return MLAAttentionSpec(
        256, num_kv_heads=1, head_size=512, dtype="bfloat16", compress_ratio=4, model_version=version
    )


def swa(version: str | None = "deepseek_v4") -> SlidingWindowMLASpec:
    # 64 x 256 x 2 = 32,768 bytes: mixed pages, so deepseekv4-packing applies
    return SlidingWindowMLASpec(
        64, num_kv_heads=1, head_size=256, dtype="bfloat16", sliding_window=128, model_version=version
    )


def dsv4(version: str | None = "deepseek_v4") -> dict[str, KVCacheSpec]:
    """Two MLA (the last one the MTP layer) + two SWA-MLA: n = 2 tuples, groups [mla x2], [swa x2]."""
    return {
        "layers.0.attn": mla(version),
        "layers.0.swa": swa(version),
        "layers.1.swa": swa(version),
        "mtp.attn": mla(version),
    }


def plan(method: str | None, specs: SpecsInput | None = None, memory: MemoryInput = GIB) -> Plan:
    config = EngineConfig(max_model_len=4096, speculative_method=method)
    return Planner("vllm").plan(specs if specs is not None else dsv4(), memory, config)


@pytest.mark.parametrize("method", sorted(EAGLE_STYLE_METHODS))
def test_eagle_style_method_flags_the_group_holding_the_last_layer(method: str) -> None:
    result = plan(method)
    assert result.route == "deepseekv4-packing"
    groups = result.groups
    assert [(g.layer_names, g.is_eagle_group) for g in groups] == [
        (("layers.0.attn", "mtp.attn"), True),
        (("layers.0.swa", "layers.1.swa"), False),
    ]
    assert any("is the EAGLE group" in d.reason for d in result.decisions)


def test_last_layer_in_a_sliding_window_group() -> None:
    specs = dsv4()
    specs["mtp.swa"] = specs.pop("layers.1.swa")
    groups = plan("mtp", specs).groups
    assert [g.is_eagle_group for g in groups] == [False, True]
    assert groups[1].layer_names == ("layers.0.swa", "mtp.swa")


@pytest.mark.parametrize("method", [None, "ngram", "draft_model", "suffix", "medusa"])
def test_no_flag_without_eagle_style_speculation(method: str | None) -> None:
    groups = plan(method).groups
    assert not any(g.is_eagle_group for g in groups)


def test_no_flag_for_a_model_that_is_not_deepseek_v4() -> None:
    result = plan("mtp", dsv4(version=None))
    assert result.route == "deepseekv4-packing"
    assert not any(g.is_eagle_group for g in result.groups)


def test_other_routes_never_flag() -> None:
    result = plan("mtp", {"a": mla(), "b": mla()})
    assert result.route == "uniform-spec"
    assert not any(g.is_eagle_group for g in result.groups)


def test_worker_without_a_layer_of_the_eagle_group_is_unflagged() -> None:
    specs = dsv4()
    stage0 = {n: specs[n] for n in ("layers.0.swa", "layers.1.swa")}
    stage1 = {n: specs[n] for n in ("layers.0.attn", "mtp.attn")}
    result = plan("mtp", [stage0, stage1], [GIB, GIB])
    workers = result.workers
    assert [g.is_eagle_group for g in workers[0].groups] == [False, False]
    assert [g.is_eagle_group for g in workers[1].groups] == [True, False]


def test_speculative_method_is_validated_and_round_trips() -> None:
    with pytest.raises(ConfigError, match="speculative_method=''"):
        EngineConfig(max_model_len=16, speculative_method="")
    with pytest.raises(ConfigError, match="speculative_method=3"):
        EngineConfig(max_model_len=16, speculative_method=3)  # type: ignore[arg-type]
    config = EngineConfig(max_model_len=16, speculative_method="mtp")
    assert config.to_dict()["speculative_method"] == "mtp"
    assert EngineConfig.from_dict(config.to_dict()) == config
    assert config.eagle_style_speculation
    assert not EngineConfig(max_model_len=16).eagle_style_speculation


def test_read_vllm_config_maps_the_speculative_method() -> None:
    ns = types.SimpleNamespace
    spec = ns(method="mtp", num_speculative_tokens=1, use_multi_module_mtp=lambda: False)
    cfg = ns(model_config=ns(max_model_len=64), speculative_config=spec)
    assert read_vllm_config(cfg).engine.speculative_method == "mtp"
    cfg.speculative_config = None
    assert read_vllm_config(cfg).engine.speculative_method is None
