"""Issue 25 R7: the built-in plugin list is kvrules' own entry points, and the plugin manager's
boolean switches read 1/true/yes/on vs 0/false/no/off/empty, anything else an error."""

from __future__ import annotations

from importlib.metadata import distribution

import pytest

from kvrules import ConfigError
from kvrules.plugin.builtins import builtin_plugin_names
from kvrules.plugin.manager import (
    AUTOLOAD_ENV,
    BUILTIN_PLUGINS,
    TRACE_ENV,
    _autoload_disabled,
    get_plugin_manager,
)


def test_builtins_are_every_entry_point_of_kvrules_distribution() -> None:
    own = {ep.name for ep in distribution("kvrules").entry_points.select(group="kvrules.plugins")}
    assert set(BUILTIN_PLUGINS) == own
    assert "ssm-architectures" in BUILTIN_PLUGINS


def test_no_autoload_keeps_every_builtin() -> None:
    pm = get_plugin_manager(autoload=False)
    assert all(pm.get_plugin(name) is not None for name in BUILTIN_PLUGINS)


def test_an_uninstalled_distribution_has_no_builtins() -> None:
    assert builtin_plugin_names("kvrules-no-such-distribution") == ()


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "off", "", " Off "])
def test_off_values_keep_autoload_and_trace_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    monkeypatch.setenv(TRACE_ENV, value)
    get_plugin_manager()  # an off value is no error
    assert _autoload_disabled() is False


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON"])
def test_on_values_disable_autoload(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    assert _autoload_disabled() is True


@pytest.mark.parametrize("name", [AUTOLOAD_ENV, TRACE_ENV])
@pytest.mark.parametrize("value", ["2", "enable", "nein"])
def test_other_values_are_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        get_plugin_manager()
