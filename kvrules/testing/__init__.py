"""The conformance kit for kvrules plugin authors, and an opt-in pytest plugin.

Turn it on with ``pytest_plugins = ["kvrules.testing"]`` in a ``conftest.py`` or a test module,
or with ``pytest -p kvrules.testing``; it is never loaded by itself. It provides three fixtures:

* ``kvrules_pm``: a fresh plugin manager (built-ins plus installed plugins, your own included);
  register test plugins on it with ``kvrules_pm.register(obj, name="test-...")`` (an installed
  plugin registered again is a no-op); ``@pytest.mark.kvrules_pm(autoload=False, plugins=[...],
  blocked=[...])`` builds it with :func:`kvrules.get_plugin_manager`'s arguments instead;
  :func:`registered` lists what it holds (``registered(kvrules_pm, plugin="acme")``);
* ``make_specs``: :func:`make_specs`, to build a model from sample names and spec objects;
* ``captured_decisions``: every ``kvrules.decision`` event logged during the test, as
  :class:`~kvrules.Decision` objects (:class:`CapturedDecisions`);

and the checks :func:`check_rule`, :func:`check_spec_type`, :func:`check_allocator`,
:func:`check_view_layout`, :func:`check_plugin` and :func:`check_import_is_gpu_free`, which
raise :class:`ConformanceError` naming what broke and how to fix it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from kvrules.decisions import Decision
from kvrules.errors import PluginError
from kvrules.plugin.manager import KVRulesPluginManager, get_plugin_manager
from kvrules.testing.allocators import check_view_layout
from kvrules.testing.checks import (
    ConformanceError,
    PluginReport,
    RuleReport,
    check_allocator,
    check_import_is_gpu_free,
    check_plugin,
    check_rule,
    check_spec_type,
)
from kvrules.testing.registered import registered
from kvrules.testing.samples import (
    SAMPLE_SPEC_NAMES,
    Scenario,
    make_specs,
    sample_scenarios,
    sample_spec,
)

DECISION_EVENT = "kvrules.decision"


class CapturedDecisions:
    """Decisions logged while the ``captured_decisions`` fixture is active (newest last)."""

    def __init__(self, events: list[MutableMapping[str, Any]]) -> None:
        self._events = events

    @property
    def events(self) -> list[MutableMapping[str, Any]]:
        """The raw ``kvrules.decision`` event dicts (with ``event`` and ``log_level``)."""
        return [e for e in self._events if e.get("event") == DECISION_EVENT]

    @property
    def decisions(self) -> list[Decision]:
        """The events as :class:`~kvrules.Decision` objects."""
        return [Decision.from_dict(e) for e in self.events]

    def by_rule(self, rule: str) -> list[Decision]:
        """Decisions made by the rule named ``rule``."""
        return [d for d in self.decisions if d.rule == rule]

    def clear(self) -> None:
        """Forget everything captured so far."""
        self._events.clear()

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)


PM_MARKER = "kvrules_pm"


def pytest_configure(config: pytest.Config) -> None:
    """Registers the ``kvrules_pm`` marker (so ``--strict-markers`` suites accept it)."""
    config.addinivalue_line(
        "markers",
        f"{PM_MARKER}(autoload=True, plugins=(), blocked=()): how the kvrules_pm fixture builds its "
        "manager (the arguments of kvrules.get_plugin_manager)",
    )


@pytest.fixture
def kvrules_pm(request: pytest.FixtureRequest) -> KVRulesPluginManager:
    """A fresh plugin manager: built-ins plus installed plugins (honours the autoload variable).

    An installed plugin is already registered from its entry point, so the test pattern
    ``kvrules_pm.register(my_plugin, name="my-plugin")`` changes nothing and returns its name;
    a plugin that is not installed is registered once. A test marked
    ``@pytest.mark.kvrules_pm(autoload=False, plugins=[...], blocked=[...])`` gets the manager
    :func:`kvrules.get_plugin_manager` builds with those arguments (the closest mark wins).

    :raises PluginError: the mark's arguments are not ``get_plugin_manager``'s (or a plugin fails).
    """
    marker = request.node.get_closest_marker(PM_MARKER)
    if marker is None:
        return get_plugin_manager()
    if marker.args or set(marker.kwargs) - {"autoload", "plugins", "blocked"}:
        raise PluginError(
            f"@pytest.mark.{PM_MARKER} takes the keywords autoload, plugins and blocked (those of "
            f"kvrules.get_plugin_manager); got args {marker.args!r}, keywords {sorted(marker.kwargs)}"
        )
    return get_plugin_manager(**marker.kwargs)


@pytest.fixture(name="make_specs")
def make_specs_fixture() -> Callable[..., Any]:
    """:func:`kvrules.testing.make_specs`."""
    return make_specs


@pytest.fixture
def captured_decisions() -> Iterator[CapturedDecisions]:
    """Captures ``kvrules.decision`` events for the test (through ``structlog.testing.capture_logs``).

    Debug events are captured even when the application configured a higher level; structlog's
    configuration is restored afterwards.
    """
    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as events:
            yield CapturedDecisions(events)
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


__all__ = [
    "SAMPLE_SPEC_NAMES",
    "CapturedDecisions",
    "ConformanceError",
    "PluginReport",
    "RuleReport",
    "Scenario",
    "captured_decisions",
    "check_allocator",
    "check_import_is_gpu_free",
    "check_plugin",
    "check_rule",
    "check_spec_type",
    "check_view_layout",
    "kvrules_pm",
    "make_specs",
    "registered",
    "sample_scenarios",
    "sample_spec",
]
