"""Issue 24 item 6: the plugin author's test pattern works with the plugin installed, and a
registration error is a PluginError (never pluggy's raw ValueError)."""

from __future__ import annotations

import types

import pytest

from kvrules import KVRulesPluginManager, PluginError
from kvrules.plugin import hookimpl


def _plugin(label: str) -> types.SimpleNamespace:
    @hookimpl
    def kvrules_register_rules(registry: object) -> None:
        return None

    return types.SimpleNamespace(kvrules_register_rules=kvrules_register_rules, label=label)


@pytest.mark.kvrules_pm(autoload=False)
def test_registering_an_already_registered_plugin_again_is_a_no_op(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    installed = _plugin("installed")
    assert pm.register(installed, name="acme") == "acme"  # as its entry point would
    before = pm.list_name_plugin()
    assert pm.register(installed, name="test-acme") == "acme"  # the docs' test pattern
    assert pm.list_name_plugin() == before


@pytest.mark.kvrules_pm(autoload=False)
def test_a_taken_name_is_a_plugin_error_naming_it(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    pm.register(_plugin("first"), name="acme")
    with pytest.raises(PluginError, match=r"'acme': that name is already taken .*another name"):
        pm.register(_plugin("second"), name="acme")


def test_a_builtin_module_registered_again_is_not_a_raw_value_error(kvrules_pm: KVRulesPluginManager) -> None:
    pm = kvrules_pm
    name, plugin = next(iter(pm.list_name_plugin()))
    assert pm.register(plugin, name="test-again") == name
