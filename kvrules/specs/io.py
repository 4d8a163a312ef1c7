"""Model-file form of specs: ``{"type": NAME, field: value, ...}`` (architecture §3)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from kvrules.errors import PluginError, SpecError
from kvrules.specs.base import KVCacheSpec, field_names, spec_to_dict
from kvrules.specs.builtin import BUILTIN_SPEC_TYPES
from kvrules.values import as_name, shown


def _type_class(
    data: Mapping[str, Any], where: str, spec_types: Mapping[str, type[KVCacheSpec]]
) -> type[KVCacheSpec]:
    """The class ``data["type"]`` names: the type name must be a string that is registered."""
    type_name = data.get("type")
    registered = ", ".join(sorted(spec_types))
    if type_name is None:
        raise SpecError(f"{where}: missing 'type'; use one of {registered}")
    if not isinstance(type_name, str):
        raise SpecError(
            f"{where}: 'type' = {shown(type_name)} must be a string naming a spec type: {registered}"
        )
    cls = spec_types.get(type_name)
    if cls is None:
        raise SpecError(f"{where}: unknown spec type {type_name!r}; registered types: {registered}")
    return cls


def _members(value: Any, where: str, spec_types: Mapping[str, type[KVCacheSpec]]) -> dict[str, KVCacheSpec]:
    """``kv_cache_specs``: member layer name (a string) -> its spec in model-file form."""
    members: dict[str, KVCacheSpec] = {}
    for name, member in value.items():
        member_name = as_name(name, f"{where}: kv_cache_specs member name")
        members[member_name] = spec_from_dict(member, layer=member_name, spec_types=spec_types)
    return members


def spec_from_dict(
    data: Mapping[str, Any],
    *,
    layer: str | None = None,
    spec_types: Mapping[str, type[KVCacheSpec]] | None = None,
) -> KVCacheSpec:
    """Build a spec from its model-file form.

    :param layer: the layer name, used in error messages.
    :param spec_types: type name -> class; defaults to the built-in spec types only (this
        function never consults a plugin manager; ``kvrules.spec_from_dict`` passes the default
        manager's registered types).
    :raises SpecError: unknown type or key, a missing field, or an invalid value (naming the layer).
    :raises PluginError: code outside kvrules (a plugin that patched a built-in spec class) raised
        while a built-in spec was built.
    """
    where = f"layer {layer!r}" if layer is not None else "spec"
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected an object with a 'type' key, got {type(data).__name__}")
    if spec_types is None:
        spec_types = {cls.type_name: cls for cls in BUILTIN_SPEC_TYPES}
    cls = _type_class(data, where, spec_types)
    type_name = str(data["type"])
    known = set(field_names(cls))
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "type":
            continue
        if not isinstance(key, str) or key not in known:
            raise SpecError(
                f"{where}: unknown key {shown(key)} for type {type_name!r}; its fields are {', '.join(sorted(known))}"
            )
        if key == "kv_cache_specs" and isinstance(value, Mapping):
            value = _members(value, where, spec_types)
        kwargs[key] = value
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in kwargs]
    if missing:
        raise SpecError(f"{where}: type {type_name!r} needs field(s) {', '.join(missing)}")
    try:
        return cls(**kwargs)
    except Exception as exc:
        foreign = _foreign_module(exc.__traceback__) if cls.__module__.startswith("kvrules.") else None
        if foreign is not None:
            raise PluginError(
                f"{where}: module {foreign!r}, which is not kvrules, raised {type(exc).__name__} while kvrules' "
                f"{type_name!r} spec was built: {exc}. A plugin that replaced part of kvrules when it was "
                "loaded runs there (`kvrules strategies` names it; --block NAME leaves it out)"
            ) from exc
        if isinstance(exc, SpecError):
            raise SpecError(f"{where}: {exc}") from None
        if isinstance(exc, (TypeError, ValueError)):
            raise SpecError(f"{where}: invalid value for type {type_name!r}: {exc}") from None
        raise


def _foreign_module(tb: TracebackType | None) -> str | None:
    """The innermost traceback frame's module that is neither kvrules nor the standard library:
    third-party code that ran inside a built-in spec's construction (a patched method)."""
    found = None
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        top = module.partition(".")[0]
        if module and top != "kvrules" and top not in sys.stdlib_module_names and module != "__main__":
            found = module
        tb = tb.tb_next
    return found


__all__ = ["spec_from_dict", "spec_to_dict"]
