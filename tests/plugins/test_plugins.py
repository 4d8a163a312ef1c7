"""Plugin machinery: built-ins as entry points, third-party entry points, blocking, faulty plugins, order."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import kvrules
from kvrules import (
    BUILTIN_PLUGINS,
    EngineConfig,
    FullAttentionSpec,
    Planner,
    PluginError,
    SlidingWindowSpec,
    UnificationError,
    get_plugin_manager,
    hookimpl,
)
from kvrules.plugin import hookspecs as hookspec_module
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Check, LayerStrategy, applies
from kvrules.specs import KVCacheSpec

PAIR = {
    "full": FullAttentionSpec(16, num_kv_heads=3, head_size=128, dtype="bfloat16"),
    "swa": SlidingWindowSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=512),
}
CFG = EngineConfig(max_model_len=4096)

THIRD_PARTY = """
from dataclasses import dataclass
from typing import ClassVar
import kvrules
from kvrules.plugin.rules import LayerStrategy, applies, declines

@dataclass(frozen=True)
class AlwaysPad(LayerStrategy):
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})
    name: str = "always-pad"
    priority: int = 1000
    description: str = "Pad any attention page (a test vendor's backend reads by block stride)."

    def check(self, layer, spec, target, ctx):
        if not isinstance(spec, kvrules.AttentionSpec):
            return declines("not attention")
        return applies("this vendor's backend reads every page by block stride")

    def apply(self, layer, spec, target, ctx):
        return spec.evolve(page_size_padded=target)

@kvrules.hookimpl
def kvrules_register_rules(registry):
    registry.add(AlwaysPad())
"""


def make_distribution(root: Path, dist: str, module: str, source: str, entry: str) -> None:
    """A minimal installed distribution: a module and a dist-info with one kvrules entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[kvrules.plugins]\n{entry} = {module}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("kvtest_")]:
        del sys.modules[name]


def test_builtins_are_registered_by_entry_point_name() -> None:
    pm = get_plugin_manager(autoload=False)
    names = {name for name, _ in pm.list_name_plugin()}
    assert set(BUILTIN_PLUGINS) <= names
    assert pm.registries.rules.providers["mamba-pad"].startswith("plugin 'page-unify' (kvrules ")


def test_loading_twice_is_harmless() -> None:
    a = get_plugin_manager().registries.rules.rules
    b = get_plugin_manager().registries.rules.rules
    assert a.keys() == b.keys()


def test_layer_strategy_order_is_priority_then_name() -> None:
    planner = Planner("vllm")
    assert [r.name for r in planner.strategies.rules("layer-strategy")] == [
        "mamba-pad",
        "block-scale",
        "stride-pad",
    ]
    assert [r.name for r in planner.strategies.rules("router")] == [
        "attention-free",
        "uniform-spec",
        "uniform-type",
        "deepseekv4-packing",
        "unified-page",
    ]


def test_third_party_entry_point_changes_a_decision_and_can_be_blocked(site: Path) -> None:
    make_distribution(site, "kvtest-vendor", "kvtest_vendor", THIRD_PARTY, "vendor-pad")
    pm = get_plugin_manager()
    assert pm.registries.rules.providers["always-pad"] == "plugin 'vendor-pad' (kvtest-vendor 1.0)"
    plan = Planner(plugin_manager=pm).plan(PAIR, 1 << 30, CFG)
    applied = [d for d in plan.decisions if d.layer == "full" and d.outcome == "applied"]
    assert [d.rule for d in applied] == ["always-pad"]
    assert plan.specs["full"].page_size_bytes == 32_768
    blocked = get_plugin_manager(blocked=["vendor-pad"])
    assert "always-pad" not in blocked.registries.rules.rules
    with pytest.raises(UnificationError):
        Planner(plugin_manager=blocked).plan(PAIR, 1 << 30, CFG)


def test_blocking_a_distribution_blocks_all_its_plugins(site: Path) -> None:
    make_distribution(site, "kvtest-vendor", "kvtest_vendor", THIRD_PARTY, "vendor-pad")
    for name in ("kvtest-vendor", "kvtest_vendor", "KVTest-Vendor"):
        blocked = get_plugin_manager(blocked=[name])
        assert "always-pad" not in blocked.registries.rules.rules
        assert blocked.is_blocked("vendor-pad")
    assert "mamba-pad" in blocked.registries.rules.rules


def test_blocking_an_unknown_name_lists_plugins_and_distributions(site: Path) -> None:
    make_distribution(site, "kvtest-vendor", "kvtest_vendor", THIRD_PARTY, "vendor-pad")
    with pytest.raises(
        PluginError,
        match=r"cannot block 'vendor': it is neither a plugin \(.*vendor-pad.*\) "
        r"nor the distribution of one \(.*kvtest-vendor.*\)",
    ):
        get_plugin_manager(blocked=["vendor"])


def test_autoload_can_be_disabled(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_distribution(site, "kvtest-vendor", "kvtest_vendor", THIRD_PARTY, "vendor-pad")
    monkeypatch.setenv("KVRULES_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = get_plugin_manager()
    assert "always-pad" not in pm.registries.rules.rules
    assert "mamba-pad" in pm.registries.rules.rules  # built-ins still load


def test_plugin_failing_to_load_is_named(site: Path) -> None:
    make_distribution(site, "kvtest-broken", "kvtest_broken", "raise RuntimeError('boom')\n", "broken")
    with pytest.raises(PluginError, match=r'error loading plugin "broken": RuntimeError: boom'):
        get_plugin_manager()
    assert get_plugin_manager(blocked=["broken"])


def test_duplicate_rule_names_name_both_providers(site: Path) -> None:
    clash = "import kvrules\nfrom kvrules_plugins.page_unify import MambaPad\n@kvrules.hookimpl\ndef kvrules_register_rules(registry):\n    registry.add(MambaPad())\n"
    make_distribution(site, "kvtest-clash", "kvtest_clash", clash, "clash")
    with pytest.raises(PluginError) as info:
        get_plugin_manager().registries  # noqa: B018
    assert "'mamba-pad' is registered twice" in str(info.value)
    assert "plugin 'page-unify'" in str(info.value) and "plugin 'clash'" in str(info.value)


def test_blocking_a_builtin_removes_its_rules() -> None:
    pm = get_plugin_manager(blocked=["page-unify"])
    with pytest.raises(UnificationError, match="no layer strategy is active"):
        Planner(plugin_manager=pm).plan(PAIR, 1 << 30, CFG)


@dataclass(frozen=True)
class Faulty(LayerStrategy):
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})
    name: str = "faulty"
    priority: int = 900
    mode: str = "page"

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if self.mode == "raise":
            raise ValueError("oops")
        return applies("always")

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        if self.mode == "page":
            return spec.evolve(page_size_padded=target + 1)
        if self.mode == "field":
            return spec.evolve(num_kv_heads=4)
        return spec


class FaultyPlugin:
    def __init__(self, mode: str) -> None:
        self.name = f"test-faulty-{mode}"
        self.mode = mode

    @hookimpl
    def kvrules_register_rules(self, registry: kvrules.plugin.registry.RuleRegistry) -> None:
        registry.add(Faulty(mode=self.mode))


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "page",
            r"rule 'faulty' \(plugin 'test-faulty-page' \(registered in-process\)\) returned a page of 32769 "
            r"bytes for layer 'full'",
        ),
        ("field", r"rule 'faulty' .* changed field\(s\) num_kv_heads of layer 'full'"),
        ("raise", r"rule 'faulty' .* raised ValueError in check: oops"),
    ],
)
def test_faulty_rule_is_reported_by_name(mode: str, message: str) -> None:
    pm = get_plugin_manager(autoload=False, plugins=[FaultyPlugin(mode)])
    with pytest.raises(PluginError, match=message):
        Planner(plugin_manager=pm).unify(PAIR)


def test_unknown_strategy_names_list_the_available_ones() -> None:
    with pytest.raises(
        PluginError, match=r"unknown strategy set 'fast'.*presets: default, vllm.*block-scale"
    ):
        Planner("fast")
    with pytest.raises(PluginError, match=r"unknown rule 'nope'"):
        Planner(["vllm", "nope"])


def test_a_list_replaces_only_the_kinds_it_names() -> None:
    planner = Planner(["block-scale", "stride-pad"])
    assert [r.name for r in planner.strategies.rules("layer-strategy")] == ["block-scale", "stride-pad"]
    assert "unified-page" in [r.name for r in planner.strategies.rules("router")]
    with pytest.raises(UnificationError, match="mamba"):
        planner.unify(
            {
                "m": kvrules.MambaSpec(16, [[3, 7]], ["bfloat16"]),
                "a": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16"),
            }
        )


def test_every_hook_documents_its_semantics() -> None:
    hooks = [
        f for n, f in inspect.getmembers(hookspec_module, inspect.isfunction) if n.startswith("kvrules_")
    ]
    assert {h.__name__ for h in hooks} == {
        "kvrules_register_spec_types",
        "kvrules_register_rules",
        "kvrules_register_allocators",
        "kvrules_register_architectures",
    }
    for hook in hooks:
        doc = inspect.getdoc(hook) or ""
        assert ":param registry:" in doc and ":return:" in doc, hook.__name__
        assert "All implementations are called" in doc or "Stops at first non-None result" in doc


def test_every_registration_hook_is_called_once_per_plugin() -> None:
    calls: list[str] = []

    class Spy:
        name = "test-spy"

        @hookimpl
        def kvrules_register_spec_types(self, registry: object) -> None:
            calls.append("spec_types")

        @hookimpl
        def kvrules_register_rules(self, registry: object) -> None:
            calls.append("rules")

        @hookimpl
        def kvrules_register_allocators(self, registry: object) -> None:
            calls.append("allocators")

        @hookimpl
        def kvrules_register_architectures(self, registry: object) -> None:
            calls.append("architectures")

    get_plugin_manager(autoload=False, plugins=[Spy()]).registries  # noqa: B018
    assert sorted(calls) == ["allocators", "architectures", "rules", "spec_types"]


def test_rule_names_and_priorities_are_validated() -> None:
    with pytest.raises(PluginError, match="rule name 'Bad_Name' is invalid"):
        Faulty(name="Bad_Name")
    with pytest.raises(PluginError, match="priority"):
        Faulty(priority="high")  # type: ignore[arg-type]


def test_planning_does_not_import_torch() -> None:
    """Planning is pure Python: importing kvrules and planning never loads torch (or touches a GPU)."""
    code = (
        "import sys, kvrules\n"
        "s = {'a': kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype='bfloat16')}\n"
        "kvrules.plan(s, 1 << 30, kvrules.EngineConfig(max_model_len=1024))\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_kvrules_distributed_resolves_on_attribute_access_without_torch() -> None:
    """``import kvrules; kvrules.distributed.plan_across_ranks`` works (as the README writes it)
    and neither the import nor the attribute loads torch."""
    code = (
        "import sys, kvrules\n"
        "before = 'kvrules.distributed' in sys.modules\n"
        "fn = kvrules.distributed.plan_across_ranks\n"
        "print(before, callable(fn), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False"]
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        kvrules.nonexistent  # noqa: B018
