"""kvrules on vLLM's 0.29-0.32 line, against stand-ins with that line's seam (three module
functions with vLLM's signatures, 0.33's classes): install, the three answers, and the fallback to
vLLM's own functions where kvrules cannot plan. The real engines are in tests/engine/."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import faulty_plugins as fp
import pytest
import structlog
import torch
import vllm_standins as vs

import kvrules
from kvrules import SpecError
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations import vllm032, vllm033, vllm_fallback
from kvrules.integrations.vllm_specs import VllmClasses

NS = vs.namespace_033()
CLASSES = VllmClasses.from_namespace(NS, version="0.32.0-standin")
BF16 = torch.bfloat16
UTILS = "vllm.v1.core.kv_cache_utils"
NAMES = ("get_kv_cache_groups", "_pool_bytes_per_block", "get_kv_cache_config_from_groups")


def full(**kw: Any) -> Any:
    return NS.FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=32, dtype=BF16, **kw)


def swa(**kw: Any) -> Any:
    return NS.SlidingWindowSpec(
        block_size=128, num_kv_heads=2, head_size=32, dtype=BF16, sliding_window=64, **kw
    )


def mamba2() -> Any:
    """What vLLM 0.32's Mamba2 layer sends: one prefill checkpoint block, alignment 1."""
    return NS.MambaSpec(
        128,
        shapes=((3, 320), (8, 32, 32)),
        dtypes=(BF16, BF16),
        page_size_padded=32768,
        mamba_cache_mode="align",
        num_prefill_checkpoint_blocks=1,
        prefill_checkpoint_alignment=1,
    )


def interleaved() -> dict[str, Any]:
    """3 sliding-window + 2 full-attention layers (a Gemma-3-like model)."""
    return {f"model.layers.{i}.self_attn.attn": full() if i % 2 else swa() for i in range(5)}


def config(**kw: Any) -> Any:
    cfg = vs.vllm_config_033(kv_cache_layout="LBHNC", max_model_len=512, **kw)
    cfg.cache_config.prefix_cache_retention_interval = 0
    return cfg


@pytest.fixture
def v032(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[types.ModuleType, list[Any]]]:
    """A vLLM of the 0.29-0.32 line, and a module that imported one of its functions."""
    kv_vllm.uninstall()
    vllm033.reset()
    vllm_fallback.reset()
    monkeypatch.delenv(kv_vllm.STRATEGIES_ENV, raising=False)
    monkeypatch.delenv(vllm_fallback.STRICT_ENV, raising=False)
    modules, calls = vs.fake_vllm_modules("0.32")
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_config_builder", None)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    layout = types.ModuleType("vllm.v1.hisparse.layout")
    layout.get_kv_cache_groups = modules[UTILS].get_kv_cache_groups  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, layout.__name__, layout)
    yield modules[UTILS], calls
    kv_vllm.uninstall()
    vllm033.reset()
    vllm_fallback.reset()


def installed(strategies: Any = None, **kw: Any) -> None:
    kv_vllm.install(strategies, **kw)
    vllm033.state(classes=CLASSES)


# -- install ---------------------------------------------------------------------------------
def test_install_replaces_the_three_functions_and_uninstall_gives_them_back(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    utils, _ = v032
    originals = {n: getattr(utils, n) for n in NAMES}
    with structlog.testing.capture_logs() as logs:
        kv_vllm.install()
    event = next(e for e in logs if e["event"] == "kvrules.vllm.installed")
    assert event["strategy_set"] == "vllm-0.33" and event["vllm_line"] == "0.29-0.32"
    assert event["replaced"] == sorted(
        [f"{UTILS}.{n}" for n in NAMES] + ["vllm.v1.hisparse.layout.get_kv_cache_groups"]
    )
    for name in NAMES:
        assert getattr(utils, name) is vllm032.DROP_INS[name]
    assert utils.get_kv_cache_configs.__name__ == "get_kv_cache_configs"  # vLLM's Core stays vLLM's
    kv_vllm.uninstall()
    assert {n: getattr(utils, n) for n in NAMES} == originals
    assert sys.modules["vllm.v1.hisparse.layout"].get_kv_cache_groups is originals["get_kv_cache_groups"]


# -- kvrules' answers ---------------------------------------------------------------------------
def test_groups_bytes_per_block_and_placement_are_kvrules(v032: tuple[types.ModuleType, list[Any]]) -> None:
    utils, calls = v032
    installed()
    cfg = config()
    groups = utils.get_kv_cache_groups(cfg, interleaved())
    assert calls == []  # vLLM's functions were not asked
    # vLLM 0.32's own groups for this model in a real engine: sliding [0, 4], [2]; full [1, 3]
    assert [g.layer_names for g in groups] == [
        [f"model.layers.{i}.self_attn.attn" for i in g] for g in ([0, 4], [2], [1, 3])
    ]
    per_block = utils._pool_bytes_per_block(cfg, groups)
    assert (
        per_block == 2 * 128 * 2 * 2 * 32 * 2
    )  # group size 2 x one 128-token page of 2 heads x (K+V) x 32 x bf16
    placed = utils.get_kv_cache_config_from_groups(cfg, groups, 1000 * per_block + 5)
    assert placed.num_blocks == 1000  # available_memory // bytes per block, as vLLM
    assert sum(t.size for t in placed.kv_cache_tensors) == 1000 * per_block * len(placed.kv_cache_tensors)
    assert placed.prefix_cache_retention_interval == 0
    assert placed.kv_cache_groups == groups


def test_the_override_and_the_retention_interval_are_read_as_vllm_reads_them(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    utils, _ = v032
    installed()
    cfg = config(num_gpu_blocks_override=37)
    cfg.cache_config.prefix_cache_retention_interval = 96
    groups = utils.get_kv_cache_groups(cfg, interleaved())
    placed = utils.get_kv_cache_config_from_groups(cfg, groups, 0)  # the profiling call: memory 0
    assert placed.num_blocks == 37 and placed.prefix_cache_retention_interval == 96


def test_an_attention_free_model_gets_one_null_block(v032: tuple[types.ModuleType, list[Any]]) -> None:
    utils, _ = v032
    installed()
    placed = utils.get_kv_cache_config_from_groups(config(), [], 1 << 30)
    assert (placed.num_blocks, placed.kv_cache_tensors) == (1, [])


def test_mamba2_layers_of_a_real_032_engine_are_planned_not_refused(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    utils, calls = v032
    installed()
    specs = {
        "model.layers.0.mixer": mamba2(),
        "model.layers.1.mixer": mamba2(),
        "model.layers.2.self_attn.attn": full(),
    }
    cfg = config(mamba_cache_mode="align")
    groups = utils.get_kv_cache_groups(cfg, specs)
    assert calls == [] and kv_vllm.fallbacks() == ()
    mamba = [g for g in groups if "mixer" in g.layer_names[0]]
    assert mamba and mamba[0].kv_cache_spec.num_prefill_checkpoint_blocks == 1


def test_vllms_eagle_annotation_runs_on_the_route_where_vllm_annotates(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    utils, _ = v032
    seen: list[tuple[str, Any]] = []

    def annotate(
        vllm_config: Any, kv_cache_spec: Any, groups: Any, use_trailing_layer_fallback: bool
    ) -> None:
        seen.append(("annotate", use_trailing_layer_fallback))
        groups[-1].is_eagle_group = True

    utils._annotate_eagle_groups = annotate  # type: ignore[attr-defined]
    utils._uses_trailing_mtp_layers = lambda cfg: True  # type: ignore[attr-defined]
    utils._warn_if_unannotated_eagle_mamba = lambda cfg, groups: seen.append(("warn", len(groups)))  # type: ignore[attr-defined]
    installed()
    groups = utils.get_kv_cache_groups(config(), interleaved())  # unified-page
    assert seen == [("annotate", True), ("warn", 3)] and groups[-1].is_eagle_group
    seen.clear()
    utils.get_kv_cache_groups(config(), {"a": full(), "b": full()})  # uniform-spec: vLLM returns first
    assert seen == []


# -- the fallback --------------------------------------------------------------------------------
def circular() -> dict[str, Any]:
    """A spec class kvrules does not model, beside one it does."""
    ring = NS.CircularBufferSpec(block_size=128, num_kv_heads=1, head_size=64, dtype=BF16)
    return {"model.layers.0.ring": ring, "model.layers.1.self_attn.attn": full()}


def test_specs_kvrules_cannot_plan_go_to_vllm_for_every_call_with_one_warning(
    v032: tuple[types.ModuleType, list[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    utils, calls = v032
    installed()
    specs, cfg = circular(), config()
    with caplog.at_level(logging.WARNING, logger="vllm.kvrules"), structlog.testing.capture_logs() as logs:
        assert utils.get_kv_cache_groups(cfg, specs) == ("vllm", "get_kv_cache_groups")
        assert utils.get_kv_cache_groups(cfg, specs) == (
            "vllm",
            "get_kv_cache_groups",
        )  # decided again, alike
        groups = [NS.KVCacheGroupSpec(list(specs), full())]
        assert utils._pool_bytes_per_block(cfg, groups) == ("vllm", "_pool_bytes_per_block")
        placed = utils.get_kv_cache_config_from_groups(cfg, groups, 1 << 20)
    assert placed == ("vllm", "get_kv_cache_config_from_groups")
    assert [c[0] for c in calls] == [
        "get_kv_cache_groups",
        "get_kv_cache_groups",
        "_pool_bytes_per_block",
        "get_kv_cache_config_from_groups",
    ]
    warnings = [r for r in caplog.records if r.name == "vllm.kvrules"]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "model.layers.0.ring" in text and "CircularBufferSpec" in text and "KVRULES_VLLM_STRICT" in text
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["kvrules.vllm.fallback"]
    (decision,) = kv_vllm.fallbacks()
    assert (decision.stage, decision.rule, decision.outcome) == ("route", "vllm-fallback", "applied")
    assert decision.details == {
        "seam": "get_kv_cache_groups",
        "vllm_line": "0.32",
        "layers": 2,
        "error": "SpecError",
    }


def test_strict_mode_makes_the_fallback_the_error(
    v032: tuple[types.ModuleType, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    utils, calls = v032
    installed()
    monkeypatch.setenv(vllm_fallback.STRICT_ENV, "on")
    with pytest.raises(SpecError, match="CircularBufferSpec"):
        utils.get_kv_cache_groups(config(), circular())
    assert calls == [] and kv_vllm.fallbacks() == ()


def test_a_faulty_rule_hands_the_layers_to_vllm_naming_the_rule(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    utils, calls = v032
    plugin = fp.FaultyPlugin("test-raiser", rules=lambda: [fp.FaultyRouter(fault="raise")])
    pm = kvrules.get_plugin_manager(plugins=[plugin])
    installed(["vllm-0.33", "faulty-router"], plugin_manager=pm)
    assert utils.get_kv_cache_groups(config(), interleaved()) == ("vllm", "get_kv_cache_groups")
    assert [c[0] for c in calls] == ["get_kv_cache_groups"]
    (decision,) = kv_vllm.fallbacks()
    assert "faulty-router" in decision.reason and "test-raiser" in decision.reason
    assert "ZeroDivisionError" in decision.reason and decision.details["error"] == "PluginError"


def test_nested_calls_inside_vllms_own_function_are_vllms(v032: tuple[types.ModuleType, list[Any]]) -> None:
    """vLLM's functions call each other through the module attributes kvrules replaced."""
    utils, calls = v032

    def vllm_groups(vllm_config: Any, kv_cache_spec: Any) -> Any:
        calls.append(("get_kv_cache_groups", ()))
        return [utils._pool_bytes_per_block(vllm_config, [])]  # through the replaced attribute

    vllm_groups.__signature__ = vs.seam_function("g", ("vllm_config", "kv_cache_spec"), []).__signature__  # type: ignore[attr-defined]
    utils.get_kv_cache_groups = vllm_groups
    installed()
    assert utils.get_kv_cache_groups(config(), circular()) == [("vllm", "_pool_bytes_per_block")]
    assert [c[0] for c in calls] == ["get_kv_cache_groups", "_pool_bytes_per_block"]


def test_kvrules_never_places_vllms_groups_nor_vllm_kvrules_groups(
    v032: tuple[types.ModuleType, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    utils, calls = v032
    installed()
    cfg = config()
    groups = utils.get_kv_cache_groups(cfg, interleaved())

    def broken(*args: Any) -> Any:
        raise RuntimeError("a placement fault")

    monkeypatch.setattr(vllm033, "get_kv_cache_config_from_groups", broken)
    with pytest.raises(vllm_fallback.MixedPlanError, match="a placement fault"):
        utils.get_kv_cache_config_from_groups(cfg, groups, 1 << 30)
    assert calls == []


def test_a_capacity_verdict_is_not_a_fallback(v032: tuple[types.ModuleType, list[Any]]) -> None:
    def ours() -> Any:
        raise kvrules.CapacityError("one request of 512 tokens needs 2 blocks, 1 fit")

    with pytest.raises(ValueError, match="needs 2 blocks"):
        vllm_fallback.answer(
            vllm_fallback.GROUPING, "get_kv_cache_configs", "0.28", ["a"], ours, lambda: "vllm"
        )
    assert kv_vllm.fallbacks() == ()


def test_when_vllm_refuses_too_its_own_error_is_raised_and_no_fallback_is_recorded(
    v032: tuple[types.ModuleType, list[Any]],
) -> None:
    def ours() -> Any:
        raise kvrules.UnificationError("no rule can bring page 24576 to 32768")

    def theirs() -> Any:
        raise NotImplementedError("vLLM: the page sizes cannot be unified")

    with pytest.raises(NotImplementedError, match="vLLM: the page sizes") as info:
        vllm_fallback.answer(vllm_fallback.GROUPING, "get_kv_cache_groups", "0.32", ["a"], ours, theirs)
    assert not isinstance(info.value, kvrules.KVRulesError)
    assert kv_vllm.fallbacks() == ()
