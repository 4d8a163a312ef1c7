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
