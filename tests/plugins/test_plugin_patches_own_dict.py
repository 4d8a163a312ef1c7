"""Issue 25 R9, the entries a spec class defines itself: a third-party plugin that replaces or
deletes a method or property in a class's own ``__dict__`` (not an inherited one) is named with
the entry and ``replaced`` / ``deleted``, warned about, and refused under KVRULES_STRICT_PLUGINS."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pytest

from kvrules import EngineConfig, MambaSpec, Planner, PluginError, SlidingWindowSpec
from kvrules.plugin import manager
from kvrules.plugin.patches import STRICT_ENV, PluginPatchWarning

SWA = "kvrules.specs.attention.SlidingWindowSpec"


@dataclass
class PatchingEntryPoint:
    """A third-party entry point whose load() runs ``patch``."""

    name: str
    patch: Callable[[], None]
    group: str = manager.ENTRY_POINT_GROUP
    dist: Any = None

    def load(self) -> object:
        self.patch()
        return type("Plugin", (), {})()


@pytest.fixture
def restore() -> Iterator[None]:
    """Put back what the patches below change in the two classes' own ``__dict__``."""
    saved = {cls: dict(vars(cls)) for cls in (SlidingWindowSpec, MambaSpec)}
    yield
    for cls, entries in saved.items():
        for name in set(vars(cls)) - set(entries):
            delattr(cls, name)
        for name, value in entries.items():
            if name not in ("__dict__", "__weakref__") and vars(cls).get(name) is not value:
                setattr(cls, name, value)


def _install(monkeypatch: pytest.MonkeyPatch, patch: Callable[[], None]) -> None:
    real = list(entry_points(group=manager.ENTRY_POINT_GROUP))
    fake = PatchingEntryPoint("own-dict-patcher", patch)
    monkeypatch.setattr(manager, "entry_points", lambda group: [*real, fake])


def _replace_own_method() -> None:
    assert "max_memory_usage_bytes" in vars(SlidingWindowSpec)  # defined on the class itself
    SlidingWindowSpec.max_memory_usage_bytes = lambda self, config: 0  # type: ignore[method-assign]


def _delete_own_method() -> None:
    del SlidingWindowSpec.max_memory_usage_bytes  # the inherited one answers from now on


def _replace_own_property() -> None:
    original = vars(MambaSpec)["page_size_bytes"]
    MambaSpec.page_size_bytes = property(lambda self: 2 * original.fget(self))  # type: ignore[method-assign,assignment]


def _delete_own_property() -> None:
    del MambaSpec.page_size_bytes


@pytest.mark.parametrize(
    ("patch", "entry"),
    [
        (_replace_own_method, f"{SWA}.max_memory_usage_bytes replaced"),
        (_delete_own_method, f"{SWA}.max_memory_usage_bytes deleted"),
        (_replace_own_property, "kvrules.specs.mamba.MambaSpec.page_size_bytes replaced"),
        (_delete_own_property, "kvrules.specs.mamba.MambaSpec.page_size_bytes deleted"),
    ],
)
def test_an_own_entry_replaced_or_deleted_is_named(
    monkeypatch: pytest.MonkeyPatch, restore: None, patch: Callable[[], None], entry: str
) -> None:
    _install(monkeypatch, patch)
    with pytest.warns(PluginPatchWarning, match="own-dict-patcher") as caught:
        pm = manager.get_plugin_manager()
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginPatchWarning)]
    assert any(entry in m for m in messages), messages
    assert entry in pm.patches["own-dict-patcher"]
    specs = {
        "swa": SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=128)
    }
    plan = Planner("vllm", plugin_manager=pm).plan(specs, 1 << 30, EngineConfig(max_model_len=4096))
    load = [d for d in plan.decisions if d.stage == "load"]
    assert [d.rule for d in load] == ["own-dict-patcher"]
    assert entry in load[0].reason


@pytest.mark.parametrize("patch", [_replace_own_method, _delete_own_method])
def test_strict_refuses_an_own_entry_replaced_or_deleted(
    monkeypatch: pytest.MonkeyPatch, restore: None, patch: Callable[[], None]
) -> None:
    _install(monkeypatch, patch)
    monkeypatch.setenv(STRICT_ENV, "yes")
    with pytest.raises(PluginError, match=r"own-dict-patcher.*SlidingWindowSpec\.max_memory_usage_bytes"):
        manager.get_plugin_manager()


def _defines_a_spec_type() -> None:
    from dataclasses import dataclass as frozen_dataclass

    from kvrules import FullAttentionSpec

    @frozen_dataclass(frozen=True)
    class OwnSpec(FullAttentionSpec):  # a plugin's own spec type: new entries of a new class
        type_name = "own_dict_test_spec"

        def max_memory_usage_bytes(self, config: Any) -> int:
            return 0

    _defines_a_spec_type.defined = OwnSpec  # type: ignore[attr-defined]  # kept alive


def test_a_plugin_defining_its_own_spec_type_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    _install(monkeypatch, _defines_a_spec_type)
    monkeypatch.setenv(STRICT_ENV, "1")  # a patch would be refused
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginPatchWarning)
        pm = manager.get_plugin_manager()
    assert pm.patches == {}
    del _defines_a_spec_type.defined  # type: ignore[attr-defined]  # no test after sees the class
    gc.collect()
