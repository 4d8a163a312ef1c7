"""Issue 25 R9: a third-party plugin that patches kvrules when it loads is named, warned
about, and refused under KVRULES_STRICT_PLUGINS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pytest

import kvrules
from kvrules import FullAttentionSpec, PluginError
from kvrules.plugin import manager
from kvrules.plugin.patches import STRICT_ENV, PluginPatchWarning


@dataclass
class FakeEntryPoint:
    """An entry point whose load() runs ``patch`` (a plugin that patches kvrules at import)."""

    name: str
    patch: Callable[[], None]
    group: str = manager.ENTRY_POINT_GROUP
    dist: Any = None

    def load(self) -> object:
        self.patch()
        return type("Plugin", (), {})()


@pytest.fixture
def restore() -> Iterator[None]:
    saved = dict(vars(FullAttentionSpec))
    plan = kvrules.plan
    yield
    for name in set(vars(FullAttentionSpec)) - set(saved):
        delattr(FullAttentionSpec, name)
    for name, value in saved.items():
        if name not in ("__dict__", "__weakref__") and vars(FullAttentionSpec).get(name) is not value:
            setattr(FullAttentionSpec, name, value)
    kvrules.plan = plan


def _with(monkeypatch: pytest.MonkeyPatch, patch: Callable[[], None]) -> None:
    real = list(entry_points(group=manager.ENTRY_POINT_GROUP))
    fake = FakeEntryPoint("test-patcher", patch)
    monkeypatch.setattr(manager, "entry_points", lambda group: [*real, fake])


def _method() -> None:
    FullAttentionSpec.max_memory_usage_bytes = lambda self, config: 0  # type: ignore[method-assign]


def _property() -> None:
    original = FullAttentionSpec.page_size_bytes
    FullAttentionSpec.page_size_bytes = property(lambda self: 2 * original.fget(self))  # type: ignore[assignment,method-assign,attr-defined]


def _function() -> None:
    kvrules.plan = lambda *a, **k: None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("patch", "entry"),
    [
        (_method, "FullAttentionSpec.max_memory_usage_bytes added"),
        (_property, "FullAttentionSpec.page_size_bytes added"),
        (_function, "kvrules.plan replaced"),
    ],
)
def test_a_patch_is_named_and_warned(
    monkeypatch: pytest.MonkeyPatch, restore: None, patch: Callable[[], None], entry: str
) -> None:
    _with(monkeypatch, patch)
    with pytest.warns(PluginPatchWarning, match="test-patcher") as caught:
        pm = manager.get_plugin_manager()
    assert entry in str(caught[0].message)
    assert entry in pm.patches["test-patcher"]


def test_strict_refuses_a_patch(monkeypatch: pytest.MonkeyPatch, restore: None) -> None:
    _with(monkeypatch, _property)
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(PluginError, match=r"test-patcher.*page_size_bytes added"):
        manager.get_plugin_manager()


def test_a_plugin_that_patches_nothing_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, lambda: None)
    pm = manager.get_plugin_manager()
    assert pm.patches == {}


def test_strategies_names_the_patch(
    monkeypatch: pytest.MonkeyPatch, restore: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvrules.cli import main

    _with(monkeypatch, _function)
    with pytest.warns(PluginPatchWarning):
        assert main(["strategies"]) == 0
    assert "patched: plugin 'test-patcher'" in capsys.readouterr().out


def _harmless() -> None:
    FullAttentionSpec.kvrules_test_helper = lambda self: 1  # type: ignore[attr-defined]


def test_every_plan_records_the_patch_as_a_decision(monkeypatch: pytest.MonkeyPatch, restore: None) -> None:
    from kvrules import EngineConfig, Planner

    _with(monkeypatch, _harmless)
    with pytest.warns(PluginPatchWarning):
        pm = manager.get_plugin_manager()
    specs = {"l0": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")}
    for strategies in ("vllm", "default"):
        plan = Planner(strategies, plugin_manager=pm).plan(specs, 2**30, EngineConfig(max_model_len=4096))
        first = plan.decisions[0]
        assert (first.stage, first.rule, first.outcome) == ("load", "test-patcher", "applied")
        assert "kvrules_test_helper added" in first.reason
        assert plan.to_dict()["decisions"][0]["stage"] == "load"


def test_a_clean_plan_has_no_load_decision() -> None:
    from kvrules import EngineConfig, Planner

    specs = {"l0": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")}
    plan = Planner("vllm").plan(specs, 2**30, EngineConfig(max_model_len=4096))
    assert all(d.stage != "load" for d in plan.decisions)


def test_trace_names_the_patch(monkeypatch: pytest.MonkeyPatch, restore: None) -> None:
    import io

    _with(monkeypatch, _harmless)
    with pytest.warns(PluginPatchWarning):
        pm = manager.get_plugin_manager()
    out = io.StringIO()
    manager.enable_trace(pm, out)
    assert "kvrules trace: plugin 'test-patcher'" in out.getvalue()
    assert "kvrules_test_helper added" in out.getvalue()
