"""The conformance kit (kvrules.testing): every built-in passes it, and it catches broken plugins."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import structlog

import kvrules
import kvrules.testing as kit
from kvrules import EngineConfig, FullAttentionSpec, KVCacheSpec, PluginError, SpecError, hookimpl
from kvrules.allocation import Allocator, Placement, ViewLayout
from kvrules.plan import KVCacheGroup, KVCacheTensor
from kvrules.plugin.context import PlanContext
from kvrules.plugin.manager import KVRulesPluginManager, get_plugin_manager
from kvrules.plugin.rules import Check, Grouper, LayerStrategy, Layout, Router, applies, declines
from kvrules.testing import (
    CapturedDecisions,
    ConformanceError,
    Scenario,
    check_allocator,
    check_import_is_gpu_free,
    check_plugin,
    check_rule,
    check_spec_type,
    check_view_layout,
)

BUILTINS = get_plugin_manager(autoload=False).registries


@pytest.mark.parametrize("name", sorted(BUILTINS.rules.rules))
def test_every_builtin_rule_conforms(name: str) -> None:
    report = check_rule(BUILTINS.rules.rules[name])
    if BUILTINS.rules.rules[name].kind != "align":  # aligners run in the model front door
        assert sum(report.asked.values()) > 0


@pytest.mark.parametrize("name", sorted(BUILTINS.spec_types.classes))
def test_every_builtin_spec_type_conforms(name: str) -> None:
    check_spec_type(BUILTINS.spec_types.classes[name])


@pytest.mark.parametrize("name", sorted(BUILTINS.allocators.items))
def test_every_builtin_allocator_conforms(name: str) -> None:
    check_allocator(BUILTINS.allocators.items[name])


@pytest.mark.parametrize("name", sorted(BUILTINS.allocators.view_layouts))
def test_every_builtin_view_layout_conforms(name: str) -> None:
    assert check_view_layout(BUILTINS.allocators.view_layouts[name])


def test_builtin_plugin_modules_import_without_a_gpu() -> None:
    check_import_is_gpu_free("kvrules_plugins.torch_allocator")


# -- the kit catches broken objects ----------------------------------------------------------


@dataclass(frozen=True)
class GoodPad(LayerStrategy):
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})
    name: str = "test-good-pad"
    priority: int = 1000
    description: str = "Pads every attention page (test)."

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if not isinstance(spec, kvrules.AttentionSpec):
            return declines("not attention.")
        return applies("test backend reads by block stride.")

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        return spec.evolve(page_size_padded=target)


@dataclass(frozen=True)
class RaisingPad(GoodPad):
    name: str = "test-raising-pad"

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        raise ValueError("boom")


@dataclass(frozen=True)
class ShortPad(GoodPad):
    name: str = "test-short-pad"

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        return spec.evolve(page_size_padded=target - 2)


@dataclass(frozen=True)
class SilentGrouper(Grouper):
    name: str = "test-silent-grouper"
    description: str = "One group per layer (test); records nothing itself."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        return applies("always.")

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return [KVCacheGroup((name,), spec) for name, spec in specs.items()]


@dataclass(frozen=True)
class LyingLayout(Layout):
    name: str = "test-lying-layout"
    priority: int = 1000
    description: str = "Claims half the bytes its tensors hold (test)."

    def check(self, groups: Any, ctx: PlanContext) -> Check:
        return applies("always.")

    def block_bytes(self, groups: Any) -> int:
        return max(1, sum(g.spec.page_size_bytes for g in groups) // 2)

    def request_bytes(self, groups: Any, config: EngineConfig) -> int:
        return 0

    def tensors(self, groups: Any, num_blocks: int) -> tuple[KVCacheTensor, ...]:
        return tuple(KVCacheTensor(g.spec.page_size_bytes * num_blocks, g.layer_names) for g in groups)


@dataclass(frozen=True)
class NeverAsked(Router):
    name: str = "test-never-asked"
    priority: int = -1
    description: str = "A router below unified-page (test)."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        return declines("never.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return []


@dataclass(frozen=True)
class NoAction(Router):
    name: str = "test-no-action"
    description: str = "Forgot route() (test)."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        return declines("never.")


@dataclass(frozen=True)
class Unvalidated(GoodPad):
    name: str = "test-unvalidated"

    def __post_init__(self) -> None:  # forgets super().__post_init__()
        pass


def test_a_good_rule_passes_and_reports_what_it_did() -> None:
    report = check_rule(GoodPad())
    assert report.applied > 0
    assert report.asked["gemma"] > 0 and report.outcomes["gemma"]["applied"] == 6


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            RaisingPad(),
            "in scenario 'gemma' the core rejected it: rule 'test-raising-pad' "
            "(plugin 'kvrules-testing-subject' (registered in-process)) raised ValueError in check: boom",
        ),
        (ShortPad(), "the core rejected it: rule 'test-short-pad'"),
        (SilentGrouper(), None),
        (LyingLayout(), "laid out 17179869184 bytes of tensors on a worker with 8589934592 bytes"),
        (NoAction(), "it does not implement route()"),
        (Unvalidated(), "the invalid name 'Bad Name' was accepted"),
    ],
)
def test_broken_rules_are_caught(rule: Any, message: str | None) -> None:
    if message is None:  # the core records an "applied" decision for a grouper that records none
        assert check_rule(rule).applied > 0
        return
    with pytest.raises(ConformanceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_rule(rule)


def test_a_rule_never_asked_fails_unless_allowed() -> None:
    with pytest.raises(ConformanceError, match=f"never asked it in {len(kit.sample_scenarios())} scenarios"):
        check_rule(NeverAsked(), others=True)
    report = check_rule(NeverAsked(), others=True, require_asked=False)
    assert not any(report.asked.values())


def test_a_rule_name_taken_by_a_builtin_is_caught() -> None:
    @dataclass(frozen=True)
    class Impostor(GoodPad):
        name: str = "block-scale"

    with pytest.raises(ConformanceError, match="already taken"):
        check_rule(Impostor())


@dataclass(frozen=True, eq=False, kw_only=True)
class RingSpec(kvrules.AttentionSpec):
    """A test spec type: one block per request."""

    type_name: ClassVar[str] = "test_ring"

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return self.page_size_bytes


@dataclass(frozen=True, eq=False, kw_only=True)
class ListSpec(RingSpec):
    """Stores a list: the JSON round trip turns it into a different value."""

    type_name: ClassVar[str] = "test_list"
    tags: Any = ()


@dataclass(frozen=True, eq=False, kw_only=True)
class ShrinkingSpec(RingSpec):
    type_name: ClassVar[str] = "test_shrinking"

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return self.page_size_bytes * 1000 // config.max_model_len


@dataclass(frozen=True, eq=True, kw_only=True)
class EqSpec(RingSpec):
    type_name: ClassVar[str] = "test_eq"


@dataclass(frozen=True, eq=False, kw_only=True)
class Clash(RingSpec):
    type_name: ClassVar[str] = "mamba"


def ring(cls: type[RingSpec] = RingSpec, **extra: Any) -> Any:
    return cls(16, num_kv_heads=2, head_size=64, dtype="bfloat16", **extra)


def test_a_good_spec_type_passes() -> None:
    check_spec_type(RingSpec, [ring(), ring(page_size_padded=1 << 20)])


@pytest.mark.parametrize(
    ("cls", "examples", "message"),
    [
        (ListSpec, [ring(ListSpec, tags=("a", "b"))], "JSON round trip changed it"),
        (ShrinkingSpec, [ring(ShrinkingSpec)], "memory for .* tokens is less than for fewer"),
        (EqSpec, [ring(EqSpec)], "replaces the base class's __eq__"),
        (Clash, [ring(Clash)], "is a built-in type's name"),
        (RingSpec, None, "no example instances"),
        (
            RingSpec,
            [FullAttentionSpec(16, num_kv_heads=1, head_size=64, dtype="bfloat16")],
            "is a FullAttentionSpec",
        ),
    ],
)
def test_broken_spec_types_are_caught(cls: Any, examples: Any, message: str) -> None:
    with pytest.raises(ConformanceError, match=message):
        check_spec_type(cls, examples)


@dataclass(frozen=True)
class CountingAllocator(Allocator):
    name: str = "test-counting"
    priority: int = 10
    description: str = "Meta buffers through torch.empty (test)."

    def supports(self, device: str) -> Check:
        return applies("meta only.") if device == "meta" else declines("meta only.")

    def buffer(self, nbytes: int, device: str) -> Any:
        import torch

        return torch.empty(nbytes, dtype=torch.int8, device=device)


@dataclass(frozen=True)
class ShortAllocator(CountingAllocator):
    name: str = "test-short"

    def buffer(self, nbytes: int, device: str) -> Any:
        return super().buffer(max(1, nbytes - 1), device)


@dataclass(frozen=True)
class GreedyAllocator(CountingAllocator):
    name: str = "test-greedy"

    def supports(self, device: str) -> Check:
        return applies("anything goes.")


def test_allocators_are_checked() -> None:
    check_allocator(CountingAllocator())
    with pytest.raises(ConformanceError, match="claims to support the device 'no-such-device:7'"):
        check_allocator(GreedyAllocator())
    with pytest.raises(ConformanceError, match="test-short"):
        check_allocator(ShortAllocator())


@dataclass(frozen=True)
class OverlappingView(ViewLayout):
    name: str = "test-overlapping"
    priority: int = 1000
    description: str = "Views K twice (test)."

    def supports(self, spec: KVCacheSpec) -> Check:
        return applies("full attention.") if type(spec) is FullAttentionSpec else declines("only full.")

    def build(self, raw: Any, place: Placement) -> Any:
        import torch

        return torch.as_strided(raw, (place.num_blocks, 2, 8), (place.block_stride, 0, 1), place.offset)


def test_view_layouts_are_checked() -> None:
    with pytest.raises(ConformanceError, match="test-overlapping"):
        check_view_layout(OverlappingView())


def test_check_plugin_runs_everything_a_plugin_registers() -> None:
    class Plugin:
        name = "test-vendor"

        @hookimpl
        def kvrules_register_spec_types(self, registry: Any) -> None:
            registry.add(RingSpec)

        @hookimpl
        def kvrules_register_rules(self, registry: Any) -> None:
            registry.add(GoodPad())

        @hookimpl
        def kvrules_register_allocators(self, registry: Any) -> None:
            registry.add(CountingAllocator())

    report = check_plugin(Plugin(), spec_examples={"test_ring": [ring()]})
    assert set(report.rules) == {"test-good-pad"}
    assert "test_ring" in report.registries.spec_types.classes

    class Misspelled:
        @hookimpl
        def kvrules_register_rule(self, registry: Any) -> None: ...

    with pytest.raises(ConformanceError, match="kvrules_register_rule"):
        check_plugin(Misspelled())


def test_gpu_touching_imports_are_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "torch"  # a stand-in torch, so the test does not import the real one
    fake.mkdir()
    (fake / "__init__.py").write_text("from torch import cuda\n")
    (fake / "cuda.py").write_text(
        "def device_count():\n    return 0\n\ndef is_available():\n    return False\n\n"
        "def is_initialized():\n    return False\n"
    )
    (tmp_path / "kvtest_eager.py").write_text("import torch\nDEVICES = torch.cuda.device_count()\n")
    (tmp_path / "kvtest_lazy.py").write_text(
        "import torch\n\ndef devices():\n    return torch.cuda.device_count()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    check_import_is_gpu_free("kvtest_lazy")
    with pytest.raises(ConformanceError, match=r"touched the GPU \(device_count\)"):
        check_import_is_gpu_free("kvtest_eager")
    with pytest.raises(ConformanceError, match="importing it failed"):
        check_import_is_gpu_free("kvtest_missing_module")


# -- fixtures and helpers ----------------------------------------------------------------------


def test_the_kit_is_an_opt_in_pytest_plugin(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # here tests/conftest.py opts in with pytest_plugins; no entry point loads it by itself
    assert request.config.pluginmanager.get_plugin("kvrules.testing") is kit
    assert request.config.pluginmanager.get_plugin("kvrules") is None
    (tmp_path / "test_uses_kit.py").write_text("def test_fixture(kvrules_pm):\n    assert kvrules_pm\n")
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_uses_kit.py"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    without = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode != 0 and "fixture 'kvrules_pm' not found" in without.stdout
    opted = subprocess.run(
        [*run, "-p", "kvrules.testing"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert opted.returncode == 0, opted.stdout + opted.stderr


def test_kvrules_pm_is_fresh_and_sees_late_registrations(kvrules_pm: KVRulesPluginManager) -> None:
    assert "test-good-pad" not in kvrules_pm.registries.rules.rules

    class Late:
        @hookimpl
        def kvrules_register_rules(self, registry: Any) -> None:
            registry.add(GoodPad())

    kvrules_pm.register(Late(), name="test-late")
    assert "test-good-pad" in kvrules_pm.registries.rules.rules
    kvrules_pm.unregister(name="test-late")
    assert "test-good-pad" not in kvrules_pm.registries.rules.rules


class _LatePlugin:
    @hookimpl
    def kvrules_register_rules(self, registry: Any) -> None:
        registry.add(GoodPad())


@pytest.mark.kvrules_pm(autoload=False, blocked=["beyond-vllm"])
def test_a_kvrules_pm_mark_builds_the_manager_with_those_arguments(kvrules_pm: KVRulesPluginManager) -> None:
    assert kvrules_pm.is_blocked("beyond-vllm")
    assert "min-padding" not in kvrules_pm.registries.rules.rules
    assert "vllm-group-size" in kvrules_pm.registries.rules.rules


@pytest.mark.kvrules_pm(plugins=[_LatePlugin()])
def test_a_kvrules_pm_mark_registers_its_plugins(kvrules_pm: KVRulesPluginManager) -> None:
    assert "test-good-pad" in kvrules_pm.registries.rules.rules
    assert "min-padding" in kvrules_pm.registries.rules.rules  # the built-ins are still there


@pytest.mark.kvrules_pm(autoloads=False)
def test_a_kvrules_pm_mark_with_a_wrong_keyword_is_a_plugin_error(request: pytest.FixtureRequest) -> None:
    with pytest.raises(PluginError, match=r"takes the keywords autoload, plugins and blocked.*'autoloads'"):
        request.getfixturevalue("kvrules_pm")


def test_make_specs_builds_models(make_specs: Callable[..., dict[str, KVCacheSpec]]) -> None:
    spec = ring()
    specs = make_specs("full", spec, repeat=2)
    assert list(specs) == [
        "model.layers.0.full_attention",
        "model.layers.1.test_ring",
        "model.layers.2.full_attention",
        "model.layers.3.test_ring",
    ]
    assert specs["model.layers.1.test_ring"] is spec
    with pytest.raises(SpecError, match="unknown sample spec 'nope'"):
        make_specs("nope")


@pytest.mark.kvrules_pm(autoload=False)
def test_captured_decisions_sees_every_decision(
    captured_decisions: CapturedDecisions,
    make_specs: Callable[..., dict[str, KVCacheSpec]],
    kvrules_pm: KVRulesPluginManager,
) -> None:
    plan = kvrules.Planner("vllm", plugin_manager=kvrules_pm).plan(
        make_specs("full", "sliding", repeat=2), 1 << 30, EngineConfig(max_model_len=1024)
    )
    assert captured_decisions.decisions == list(plan.decisions)
    scaled = captured_decisions.by_rule("block-scale")
    assert [d.layer for d in scaled] == ["model.layers.1.sliding_window", "model.layers.3.sliding_window"]
    captured_decisions.clear()
    assert len(captured_decisions) == 0


@pytest.mark.kvrules_pm(autoload=False)
def test_sample_scenarios_plan_or_fail_with_kvrules_errors(kvrules_pm: KVRulesPluginManager) -> None:
    planner = kvrules.Planner(plugin_manager=kvrules_pm)
    failed = []
    for scenario in kit.sample_scenarios():
        try:
            planner.plan(list(scenario.workers), list(scenario.memory), scenario.config)
        except kvrules.KVRulesError:
            failed.append(scenario.name)
    assert failed == ["not-unifiable"]


def test_scenario_split_keeps_layer_order() -> None:
    one = Scenario.single("m", kit.make_specs("full", "sliding", repeat=3))
    two = one.split((1, 2))
    assert [list(w) for w in two.workers] == [list(one.workers[0])[:3], list(one.workers[0])[3:]]
    assert two.memory == (1, 2) and two.name == "m-pp2"


def test_importing_the_kit_imports_neither_torch_nor_cuda() -> None:
    assert "kvrules.testing" in sys.modules
    code = "import kvrules.testing, sys; print('torch' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture
def app_logs_warnings_only() -> Iterator[None]:
    """An application that configured structlog to drop debug events (set up before the kit's fixture)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    structlog.reset_defaults()


@pytest.mark.kvrules_pm(autoload=False)
def test_captured_decisions_despite_the_application_s_level(
    app_logs_warnings_only: None, captured_decisions: CapturedDecisions, kvrules_pm: KVRulesPluginManager
) -> None:
    specs = kit.make_specs("full", "sliding")
    plan = kvrules.Planner("vllm", plugin_manager=kvrules_pm).plan(
        specs, 1 << 30, EngineConfig(max_model_len=1024)
    )
    assert captured_decisions.decisions == list(plan.decisions)
