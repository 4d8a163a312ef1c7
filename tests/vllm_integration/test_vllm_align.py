"""kvrules.integrations.vllm_align: block sizes chosen at vLLM engine start, against stand-ins
(vLLM's own values for the #43626 pair recorded from vLLM 0.28.0 and 0.33.0); the real-vLLM test
runs benchmarks/vllm_engine_start.py's sides and skips where vLLM is absent."""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vllm_standins as vs

from kvrules.hf import HFOptions, build_hf_model
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations import vllm033, vllm_align, vllm_platform
from kvrules.pipeline import Planner

VIEW = vllm_align.EngineView(lambda cfg: [vs.Backend()], lambda cfg: None)
DEFAULT = Planner("default")


def values(cfg: Any) -> tuple[Any, ...]:
    cache = cfg.cache_config
    return cache.block_size, cache.mamba_block_size, cache.mamba_page_size_padded


def after_vllm(**kwargs: Any) -> Any:
    """The pair's config as vLLM's own method leaves it."""
    return vs.pair_config(values=vs.VLLM_PAIR_VALUES, **kwargs)


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    vllm033.reset()
    yield
    vllm033.reset()


# -- the choice ------------------------------------------------------------------------------
@pytest.mark.parametrize("line", ["0.28", "0.33"])
def test_the_pair_gets_kvrules_offline_block_sizes(line: str) -> None:
    cfg = after_vllm()
    decision = vllm_align.align_engine_start(cfg, DEFAULT, line, VIEW)
    offline = build_hf_model(
        vs.PAIR / "config.json",
        vs.PAIR / "draft.json",
        HFOptions(kv_cache_dtype="fp8", num_speculative_tokens=4, max_model_len=4096),
        strategies="default",
    ).specs
    draft = {s.block_size for n, s in offline.items() if n.startswith("draft.")}
    mamba = {(s.block_size, s.page_size_bytes) for s in offline.values() if s.type_name == "mamba"}
    assert (decision.outcome, decision.rule) == ("applied", "draft-aware-align")
    assert draft == {576} and mamba == {(1152, 1179648)}
    assert values(cfg) == (576, 1152, 1179648)
    assert decision.details == {
        "vllm": {"block_size": 1136, "mamba_block_size": 1136, "mamba_page_size_padded": None},
        "chosen": {"block_size": 576, "mamba_block_size": 1152, "mamba_page_size_padded": 1179648},
    }
    assert vllm_align.last_decision() is decision


def test_what_vllm_builds_from_the_values_unifies_to_kvrules_specs() -> None:
    chosen = vllm_align.BlockValues(576, 1152, 1179648)
    options = HFOptions(kv_cache_dtype="fp8", num_speculative_tokens=4, max_model_len=4096, block_size=16)
    vllm_side = build_hf_model(vs.PAIR / "config.json", vs.PAIR / "draft.json", options, strategies="vllm")
    mine = build_hf_model(vs.PAIR / "config.json", vs.PAIR / "draft.json", options, strategies="default")
    names = vllm_align.followers(vllm_side.specs, 1136)
    expressed = vllm_align.express(vllm_side.specs, names, chosen, "align")
    assert {s.block_size for n, s in expressed.items() if s.type_name != "mamba"} == {576}
    vllm_align.check_expressible(DEFAULT, expressed, mine.specs)  # block-scale takes the target to 1152
    with pytest.raises(vllm_align.Declined, match="beyond what block-scale reaches"):
        vllm_align.check_expressible(DEFAULT, vllm_side.specs, mine.specs)


# -- declining -------------------------------------------------------------------------------
def declined(cfg: Any, view: vllm_align.EngineView = VIEW, line: str = "0.28") -> str:
    before = values(cfg)
    decision = vllm_align.align_engine_start(cfg, DEFAULT, line, view)
    assert decision.outcome == "declined" and values(cfg) == before
    return decision.reason


def test_a_user_given_block_size_stands() -> None:
    assert "--block-size 1136" in declined(after_vllm(user_block_size=True))


def test_a_model_kvrules_cannot_read_stands() -> None:
    cfg = after_vllm()
    cfg.model_config.hf_config = {"architectures": ["NoSuchForCausalLM"], "model_type": "no-such"}
    assert "cannot build this model" in declined(cfg)
    cfg.model_config.hf_config = object()
    assert "not a config kvrules can read" in declined(cfg)


def test_a_block_size_a_sibling_kernel_rejects_stands() -> None:
    view = vllm_align.EngineView(
        lambda cfg: [vs.Backend(), vs.Backend("SIBLING", sizes=(1136,))], lambda c: None
    )
    assert "block size 576 is not supported by attention backend SIBLING" in declined(after_vllm(), view)


def test_per_layer_block_sizes_block_scale_cannot_reach_stand() -> None:
    draft = json.loads((vs.PAIR / "draft.json").read_text())
    draft.update(num_key_value_heads=6, num_attention_heads=24)  # 1536 B/token: 3:2 against the target
    assert "beyond what block-scale reaches" in declined(after_vllm(draft=draft))


def test_a_misread_model_stands() -> None:
    cfg = vs.pair_config(values=(1152, 1152, 1179648))  # e.g. a checkpoint alignment kvrules did not see
    assert "kvrules reads this model differently from vLLM" in declined(cfg)


def test_the_checkpoint_alignment_is_read_on_033() -> None:
    view = vllm_align.EngineView(lambda cfg: [vs.Backend()], lambda cfg: 64)
    cfg = vs.pair_config(values=(1152, 1152, 1179648))  # vLLM 0.33 with 64: 64 x cdiv(M, 64 x 1024)
    decision = vllm_align.align_engine_start(cfg, DEFAULT, "0.33", view)
    assert decision.outcome == "applied" and values(cfg) == (576, 1152, 1179648)


def test_a_fault_on_kvrules_side_never_stops_the_engine() -> None:
    def broken(cfg: Any) -> list[Any]:
        raise RuntimeError("backend lookup broke")

    cfg = after_vllm()
    decision = vllm_align.align_engine_start(
        cfg, DEFAULT, "0.28", vllm_align.EngineView(broken, lambda c: None)
    )
    assert decision.outcome == "failed" and "backend lookup broke" in decision.reason
    assert values(cfg) == vs.VLLM_PAIR_VALUES


@pytest.mark.parametrize(
    "strategies", ["vllm-0.28", "vllm-0.33", vllm033.parse_strategies("auto", "vllm-0.33")]
)
def test_nothing_changes_without_an_aligner_beyond_vllms(strategies: str) -> None:
    cfg = after_vllm()
    planner = Planner(strategies)
    decision = vllm_align.align_engine_start(cfg, planner, "0.33", VIEW)
    assert decision.outcome == "declined" and "no aligner beyond vLLM's own" in decision.reason
    assert values(cfg) == vs.VLLM_PAIR_VALUES
    platform = vs.vllm_platform_class()
    assert vllm_platform.wrap_engine_start(lambda: planner, "0.33", platform) is None
    assert not vllm_align.is_wrapped(platform)


# -- wrapping --------------------------------------------------------------------------------
def test_the_wrapper_calls_the_platforms_method_first() -> None:
    platform = vs.vllm_platform_class()
    assert vllm_align.wrap_platform(platform, lambda: DEFAULT, "0.28", VIEW)
    cfg = vs.pair_config()
    platform.update_block_size_for_backend(cfg)
    assert platform.calls == [16]  # vLLM's method ran once, on the untouched config
    assert values(cfg) == (576, 1152, 1179648)
    decision = vllm_align.last_decision()
    assert decision is not None and decision.details is not None
    assert decision.details["vllm"]["block_size"] == 1136  # kvrules read what vLLM had chosen
    vllm_align.unwrap_platform(platform)


def test_wrapping_twice_wraps_once_and_unwrap_restores() -> None:
    platform = vs.vllm_platform_class()
    own = platform.__dict__[vllm_align.HOOK_NAME]
    vllm_align.wrap_platform(platform, lambda: DEFAULT, "0.28", VIEW)
    hook = platform.__dict__[vllm_align.HOOK_NAME]
    assert vllm_align.wrap_platform(platform, lambda: DEFAULT, "0.28", VIEW)
    assert platform.__dict__[vllm_align.HOOK_NAME] is hook
    platform.update_block_size_for_backend(vs.pair_config())
    assert platform.calls == [16]
    vllm_align.unwrap_platform(platform)
    vllm_align.unwrap_platform(platform)
    assert platform.__dict__[vllm_align.HOOK_NAME] is own and not vllm_align.is_wrapped(platform)


def test_an_inherited_hook_is_wrapped_on_the_subclass_and_removed_again() -> None:
    base = vs.vllm_platform_class()
    child = type("Child", (base,), {})
    vllm_align.wrap_platform(child, lambda: DEFAULT, "0.28", VIEW)
    cfg = vs.pair_config()
    child.update_block_size_for_backend(cfg)
    assert values(cfg) == (576, 1152, 1179648) and base.calls == [16]
    vllm_align.unwrap_platform(child)
    assert vllm_align.HOOK_NAME not in child.__dict__
    assert not vllm_align.wrap_platform(type("Bare", (), {}), lambda: DEFAULT, "0.28", VIEW)


@pytest.fixture
def fake_platforms(monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """``vllm.platforms`` with a platform stand-in as the active platform, and a vLLM of the 0.28 line."""
    platform = vs.vllm_platform_class()
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform()  # type: ignore[attr-defined]
    modules, _ = vs.fake_vllm_modules("0.28")
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "vllm.v1.core.kv_cache_config_builder", None)
    monkeypatch.setitem(sys.modules, platforms.__name__, platforms)
    monkeypatch.setattr(vllm_align, "real_view", lambda device_type=None: VIEW)
    kv_vllm.uninstall()
    yield platform
    kv_vllm.uninstall()
    vllm_align.unwrap_platform(platform)


def test_install_wraps_for_an_aligner_and_uninstall_unwraps(fake_platforms: type) -> None:
    platform = fake_platforms
    kv_vllm.install("vllm")
    assert not vllm_align.is_wrapped(platform)
    kv_vllm.install("default")
    assert vllm_align.is_wrapped(platform)
    cfg = vs.pair_config()
    platform.update_block_size_for_backend(cfg)
    assert values(cfg) == (576, 1152, 1179648)
    kv_vllm.install("vllm")  # a set without such an aligner undoes the wrap
    assert not vllm_align.is_wrapped(platform)
    kv_vllm.install("default")
    kv_vllm.uninstall()
    assert not vllm_align.is_wrapped(platform)


def test_the_033_platform_hook_wraps_and_restore_unwraps(fake_platforms: type) -> None:
    platform = fake_platforms
    vllm_platform.set_platform_hook(platform, strategies="default")
    assert vllm_align.is_wrapped(platform)
    cfg = vs.pair_config()
    platform.update_block_size_for_backend(cfg)
    assert values(cfg) == (576, 1152, 1179648)
    vllm_platform.restore_platform_hook(platform)
    assert not vllm_align.is_wrapped(platform)
    cfg = vs.pair_config()
    platform.update_block_size_for_backend(cfg)
    assert values(cfg) == vs.VLLM_PAIR_VALUES


def test_the_mixin_runs_the_platforms_method_then_kvrules(fake_platforms: type) -> None:
    vendor = type(
        "Vendor", (vllm_platform.KVRulesPlatformMixin, fake_platforms), {"kvrules_strategies": "default"}
    )
    cfg = vs.pair_config()
    vendor.update_block_size_for_backend(cfg)
    assert fake_platforms.calls == [16] and values(cfg) == (576, 1152, 1179648)
    hook = inspect.getattr_static(vendor, vllm_align.HOOK_NAME)
    assert vllm_platform.wrap_engine_start(lambda: DEFAULT, "0.33", vendor) is vendor  # already kvrules'
    assert inspect.getattr_static(vendor, vllm_align.HOOK_NAME) is hook and not vllm_align.is_wrapped(vendor)
    plain = type(
        "Plain", (vllm_platform.KVRulesPlatformMixin, fake_platforms), {"kvrules_strategies": "vllm-0.33"}
    )
    cfg = vs.pair_config()
    plain.update_block_size_for_backend(cfg)
    assert values(cfg) == vs.VLLM_PAIR_VALUES


def test_the_cpu_platform_starts_from_its_own_base_block() -> None:
    """vLLM's CPU platform skips the generic preferred-size phase: 0.29-0.32 aligns hybrids from
    the block its check_and_update_config set (128, or the user's); 0.33 prefers 128."""
    cpu = vllm_align.EngineView(lambda cfg: [vs.Backend(kernel=32)], lambda cfg: None, "cpu")
    gpu = vllm_align.EngineView(lambda cfg: [vs.Backend(kernel=32)], lambda cfg: None)
    backends = [vs.Backend(kernel=32)]
    assert vllm_align.phase_one_block(backends, "0.32", cpu, 128) == 128
    assert vllm_align.phase_one_block(backends, "0.32", cpu, 256) == 256  # the user's --block-size
    assert vllm_align.phase_one_block(backends, "0.33", cpu, None) == vllm_align.CPU_BASE_BLOCK
    assert vllm_align.phase_one_block(backends, "0.32", gpu, 128) == 32  # the generic rule: preferred
    cfg = vs.pair_config()
    assert vllm_align.kernel_alignment(cfg, backends, "0.32", cpu, 128) == 128
    assert vllm_align.kernel_alignment(cfg, backends, "0.32", gpu, 128) == 32


def test_importing_the_aligner_never_imports_vllm() -> None:
    code = (
        "import sys, kvrules.integrations.vllm_align;"
        "sys.exit(any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- the real vLLM, when it is importable ------------------------------------------------------
def test_real_vllm_engine_start_gives_the_offline_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm.platforms.interface")
    pytest.importorskip("transformers")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_engine_start.py"
    spec = importlib.util.spec_from_file_location("vllm_engine_start", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    line = bench.require_vllm()
    from vllm import platforms

    monkeypatch.setattr(platforms, "current_platform", bench.bench_platform())
    args = types.SimpleNamespace(memory=40 << 30, max_model_len=4096, k=4, checkpoint_alignment=None)
    alone, ours = bench.side(args, line, None), bench.side(args, line, "default")
    assert alone["values"] == vs.VLLM_PAIR_VALUES and ours["values"] == (576, 1152, 1179648)
    assert ours["decision"] == "applied: draft-aware-align"
    assert round(ours["max_concurrency"] / alone["max_concurrency"], 3) == 1.372
