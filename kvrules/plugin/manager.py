"""Plugin manager factory: built-ins always, third parties through entry points.

Built-in plugins are declared as entry points in the group ``kvrules.plugins`` exactly like a
third party's and listed by name in :data:`BUILTIN_PLUGINS`. Third-party autoload is turned off
by setting ``KVRULES_DISABLE_PLUGIN_AUTOLOAD``; any plugin (built-in too) can be blocked by name.
Set ``KVRULES_TRACE=1`` to print every hook call to stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from kvrules import logs
from kvrules.errors import PluginError
from kvrules.plugin import hookspecs, patches
from kvrules.plugin.builtins import builtin_plugin_names
from kvrules.plugin.registry import IN_PROCESS, Registries
from kvrules.switches import flag

ENTRY_POINT_GROUP = "kvrules.plugins"
AUTOLOAD_ENV = "KVRULES_DISABLE_PLUGIN_AUTOLOAD"
TRACE_ENV = "KVRULES_TRACE"

#: entry-point names of the plugins that ship with kvrules (always loaded unless blocked), from
#: kvrules' own distribution metadata
BUILTIN_PLUGINS: tuple[str, ...] = builtin_plugin_names()

REGISTRATION_HOOKS: tuple[tuple[str, str], ...] = (
    ("kvrules_register_spec_types", "spec_types"),
    ("kvrules_register_rules", "rules"),
    ("kvrules_register_allocators", "allocators"),
    ("kvrules_register_architectures", "architectures"),
)


class KVRulesPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers each plugin's distribution and caches its registries."""

    def __init__(self) -> None:
        super().__init__("kvrules")
        self.add_hookspecs(hookspecs)
        self.distinfo: dict[str, str] = {}
        #: plugin name -> what it patched in kvrules when loaded (see :mod:`kvrules.plugin.patches`)
        self.patches: dict[str, str] = {}
        self._registries: Registries | None = None

    def describe(self, name: str) -> str:
        """``plugin 'name' (dist version)``, or ``plugin 'name' (registered in-process)`` for a
        plugin object registered by code rather than loaded from a distribution's entry point."""
        return f"plugin {name!r} ({self.distinfo.get(name) or IN_PROCESS})"

    @property
    def registries(self) -> Registries:
        """Everything the registered plugins contributed (collected once)."""
        if self._registries is None:
            self._registries = collect_registries(self)
        return self._registries

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin`` (see pluggy); the registries are collected afresh on next use.

        Registering a plugin that is already registered (an installed plugin's entry point, say,
        registered again by its own tests) changes nothing and returns the name it has.

        :raises PluginError: ``plugin`` implements a hook kvrules does not have (a misspelling),
            or implements one with the wrong arguments (the message lists the valid hooks); or
            another plugin already has ``name``.
        """
        existing = self.get_name(plugin)
        if existing is not None:
            return existing
        if name is not None and self.has_plugin(name):
            raise PluginError(
                f"cannot register {plugin!r} as {name!r}: that name is already taken by "
                f"{self.describe(name)}; register it under another name"
            )
        self._registries = None
        label = name or getattr(plugin, "__name__", None) or repr(plugin)
        try:
            result = super().register(plugin, name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"{self.describe(label)}: {exc}; {_valid_hooks()}") from exc
        except ValueError as exc:  # pluggy's other refusals, in kvrules' words
            raise PluginError(f"cannot register {label!r}: {exc}") from exc
        try:
            self.check_pending()
        except pluggy.PluginValidationError as exc:
            super().unregister(plugin)
            raise PluginError(f"{self.describe(label)}: {exc}; {_valid_hooks()}") from exc
        return result

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        """Unregister ``plugin`` or ``name`` (see pluggy); the registries are collected afresh."""
        self._registries = None
        return super().unregister(plugin, name)


def _valid_hooks() -> str:
    hooks = [n for n in vars(hookspecs) if n.startswith("kvrules_")]
    return f"the hooks a kvrules plugin may implement are {', '.join(sorted(hooks))}"


def _autoload_disabled() -> bool:
    return flag(AUTOLOAD_ENV)


def _load(pm: KVRulesPluginManager, ep: EntryPoint) -> None:
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PluginError(f'error loading plugin "{ep.name}": {type(exc).__name__}: {exc}') from exc
    label = _dist_label(ep)
    if label is not None:
        pm.distinfo[ep.name] = f"{label[0]} {label[1]}"
    pm.register(plugin, name=ep.name)
    logs.debug("kvrules.plugin.loaded", plugin=ep.name, distribution=pm.distinfo.get(ep.name))


def get_plugin_manager(
    *,
    autoload: bool = True,
    plugins: Iterable[Any] = (),
    blocked: Iterable[str] = (),
) -> KVRulesPluginManager:
    """A fresh plugin manager with the built-ins, autoloaded third parties and ``plugins``.

    :param autoload: load third-party entry points (also off when ``KVRULES_DISABLE_PLUGIN_AUTOLOAD`` is set).
    :param plugins: extra plugin objects to register (named by their ``name`` attribute or ``__name__``).
    :param blocked: plugins never to register, built-ins included: a plugin name (an entry-point
        name, or the name of one of ``plugins``), or a distribution name, which blocks every
        plugin that distribution provides.
    :raises PluginError: a plugin fails to load, kvrules' own entry points are missing, or a
        blocked name is neither a plugin nor a distribution (the message lists both).
    """
    pm = KVRulesPluginManager()
    plugins = list(plugins)
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name in _blocked_plugin_names(blocked, found, plugins):
        pm.set_blocked(name)
    missing = [name for name in BUILTIN_PLUGINS if name not in found]
    if missing or not BUILTIN_PLUGINS:
        raise PluginError(
            f"kvrules is not installed (its entry points {', '.join(missing) or '(all)'} in group "
            f"{ENTRY_POINT_GROUP!r} are missing); install it with `pip install -e .` from the repository"
        )
    for name in BUILTIN_PLUGINS:
        if not pm.is_blocked(name) and pm.get_plugin(name) is None:
            _load(pm, found[name])
    if autoload and not _autoload_disabled():
        for name, ep in sorted(found.items()):
            if name in BUILTIN_PLUGINS or pm.is_blocked(name) or pm.get_plugin(name) is not None:
                continue
            before = patches.snapshot()
            _load(pm, ep)
            changed = patches.changes(before, patches.snapshot())
            if changed:
                pm.patches[name] = patches.report(
                    name, pm.distinfo.get(name), changed, strict=flag(patches.STRICT_ENV)
                )
    for plugin in plugins:
        name = _plugin_name(plugin)
        if pm.is_blocked(name) or pm.get_plugin(name) is not None:
            continue
        pm.register(plugin, name=name)
    pm.check_pending()
    if flag(TRACE_ENV):
        enable_trace(pm)
    return pm


def _plugin_name(plugin: Any) -> str:
    return str(getattr(plugin, "name", None) or getattr(plugin, "__name__", None) or repr(plugin))


#: (name, version) by distribution path: a distribution's METADATA (kvrules' holds its whole
#: README) is parsed once per process, not once per entry point and question
_labels: dict[str, tuple[str, str]] = {}


def _dist_label(ep: EntryPoint) -> tuple[str, str] | None:
    """The name and version of the distribution providing ``ep`` (``None``: none known)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None
    key = str(getattr(dist, "_path", ""))
    found = _labels.get(key) if key else None
    if found is None:
        metadata = dist.metadata
        found = (str(metadata["Name"]), str(metadata["Version"]))
        if key:
            _labels[key] = found
    return found


def _distribution(ep: EntryPoint) -> str | None:
    label = _dist_label(ep)
    return None if label is None else label[0]


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _blocked_plugin_names(
    blocked: Iterable[str], found: dict[str, EntryPoint], plugins: list[Any]
) -> set[str]:
    """The plugin names ``blocked`` means: plugin names as given, distribution names expanded
    to every plugin of that distribution.

    :raises PluginError: a name that is neither (listing the plugins and distributions there are).
    """
    known = set(found) | {_plugin_name(p) for p in plugins}
    by_dist: dict[str, set[str]] = {}
    for name, ep in found.items():
        dist = _distribution(ep)
        if dist is not None:
            by_dist.setdefault(_canonical(dist), set()).add(name)
    names: set[str] = set()
    for name in blocked:
        if name in known:
            names.add(name)
        elif _canonical(name) in by_dist:
            names |= by_dist[_canonical(name)]
        else:
            dists = sorted({_distribution(ep) or "" for ep in found.values()} - {""})
            raise PluginError(
                f"cannot block {name!r}: it is neither a plugin ({', '.join(sorted(known))}) nor the "
                f"distribution of one ({', '.join(dists)})"
            )
    return names


def _registered(registry: Any) -> set[str]:
    """Everything a registry holds, as ``"kind name"`` strings (for the trace)."""
    what = getattr(registry, "what", "object")
    names = {f"{what} {name}" for name in getattr(registry, "providers", {})}
    names |= {f"preset {name}" for name in getattr(registry, "presets", {})}
    names |= {f"view layout {name}" for name in getattr(registry, "view_layouts", {})}
    return names


def enable_trace(pm: pluggy.PluginManager, stream: Any = None) -> None:
    """Print every hook call to ``stream`` (stderr by default): the plugin called, what it
    registered, how long it took, or what it raised. Calls of plugins that do not implement the
    hook are not shown.
    """
    if getattr(pm, "_kvrules_traced", False):  # --trace together with KVRULES_TRACE=1
        return
    setattr(pm, "_kvrules_traced", True)  # noqa: B010
    out = stream or sys.stderr
    for message in getattr(pm, "patches", {}).values():  # plugins that patched kvrules when loaded
        print(f"kvrules trace: {message}", file=out)
    started: list[tuple[float, set[str]]] = []

    def describe(impls: Any) -> str:
        names = [impl.plugin_name for impl in impls]
        if isinstance(pm, KVRulesPluginManager):
            names = [pm.describe(name) for name in names]
        return ", ".join(names)

    def before(hook_name: str, impls: Any, kwargs: Any) -> None:
        started.append((time.perf_counter(), _registered(kwargs.get("registry"))))
        if impls:
            args = ", ".join(kwargs)
            print(f"kvrules trace: {hook_name}({args}) -> {describe(impls)}", file=out)

    def after(outcome: Any, hook_name: str, impls: Any, kwargs: Any) -> None:
        start, known = started.pop()
        if not impls:
            return
        took = f"{(time.perf_counter() - start) * 1000:.2f} ms"
        error = outcome.exception
        if error is not None:
            print(f"kvrules trace:   raised {type(error).__name__}: {error} ({took})", file=out)
            return
        added = sorted(_registered(kwargs.get("registry")) - known)
        print(f"kvrules trace:   registered {', '.join(added) or 'nothing'} ({took})", file=out)

    pm.add_hookcall_monitoring(before, after)


def collect_registries(pm: KVRulesPluginManager) -> Registries:
    """Call every registration hook plugin by plugin, recording each object's provider.

    A registration hook is handed no input, so anything it raises (a ``SpecError`` from a spec it
    builds, too) is a :class:`PluginError` naming the plugin; after each plugin's hook the objects
    it registered are validated again (:meth:`~kvrules.plugin.registry.Registry.recheck`).
    """
    registries = Registries()
    plugins = pm.list_name_plugin()
    for hook_name, attr in REGISTRATION_HOOKS:
        registry = getattr(registries, attr)
        for name, plugin in plugins:
            others = [p for n, p in plugins if p is not plugin]
            caller = pm.subset_hook_caller(hook_name, remove_plugins=others)
            registry.provider = pm.describe(name)
            if name in BUILTIN_PLUGINS:
                registries.builtin.add(registry.provider)
            try:
                caller(registry=registry)
                registry.recheck()
            except PluginError as exc:
                who = pm.describe(name)
                if who in str(exc) or str(exc).startswith(f"plugin {name!r}"):
                    raise
                raise PluginError(f"{who} failed in {hook_name}: {exc}") from exc
            except Exception as exc:  # a registration hook has no input: any error is the plugin's
                raise PluginError(
                    f"{pm.describe(name)} failed in {hook_name}: {type(exc).__name__}: {exc}"
                ) from exc
        registry.provider = IN_PROCESS
    return registries


_default: KVRulesPluginManager | None = None


def default_manager() -> KVRulesPluginManager:
    """The process-level manager used wherever a caller passes none (``Planner()``,
    ``spec_from_dict()``, ``allocate()``, ``build_hf_model()``): built on first use with
    :func:`get_plugin_manager`'s defaults, never at import time, and kept until
    :func:`set_default_manager` replaces it or :func:`reset_default_manager` drops it."""
    global _default
    if _default is None:
        _default = get_plugin_manager()
    return _default


def set_default_manager(pm: KVRulesPluginManager) -> None:
    """Make ``pm`` the manager that :func:`default_manager` returns (an application's choice)."""
    global _default
    if not isinstance(pm, KVRulesPluginManager):
        raise PluginError(f"set_default_manager() needs a manager from get_plugin_manager(), got {pm!r}")
    _default = pm


def reset_default_manager() -> None:
    """Drop the default manager; the next :func:`default_manager` call builds a fresh one."""
    global _default
    _default = None


__all__ = [
    "default_manager",
    "reset_default_manager",
    "set_default_manager",
    "AUTOLOAD_ENV",
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "KVRulesPluginManager",
    "REGISTRATION_HOOKS",
    "TRACE_ENV",
    "collect_registries",
    "enable_trace",
    "get_plugin_manager",
]
