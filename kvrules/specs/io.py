"""Model-file form of specs: ``{"type": NAME, field: value, ...}`` (architecture §3)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from kvrules.errors import SpecError
from kvrules.specs.base import KVCacheSpec, field_names


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, KVCacheSpec):
        return spec_to_dict(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _is_default(spec: KVCacheSpec, field: dataclasses.Field[Any]) -> bool:
    value = getattr(spec, field.name)
    if field.name == "head_size_v":
        default_v = spec.head_size if getattr(spec, "default_head_size_v_is_head_size", True) else 0  # type: ignore[attr-defined]
        return bool(value == default_v)
    if field.name == "page_size_padded" and getattr(spec, "alignment", None) is not None:
        # derived from ``alignment``: written only when it pads beyond the alignment
        rebuilt = spec.evolve(page_size_padded=None)
        return bool(rebuilt.page_size_bytes == spec.page_size_bytes)
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    return False


def spec_to_dict(spec: KVCacheSpec) -> dict[str, Any]:
    """``{"type": ..., **fields}`` with JSON values; fields at their default are left out."""
    out: dict[str, Any] = {"type": spec.type_name}
    for field in dataclasses.fields(spec):
        if _is_default(spec, field):
            continue
        out[field.name] = _plain(getattr(spec, field.name))
    return out


def spec_from_dict(
    data: Mapping[str, Any],
    *,
    layer: str | None = None,
    spec_types: Mapping[str, type[KVCacheSpec]] | None = None,
) -> KVCacheSpec:
    """Build a spec from its model-file form.

    :param layer: the layer name, used in error messages.
    :param spec_types: type name -> class; defaults to every registered spec type.
    :raises SpecError: unknown type or key, a missing field, or an invalid value (naming the layer).
    """
    where = f"layer {layer!r}" if layer is not None else "spec"
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected an object with a 'type' key, got {type(data).__name__}")
    if spec_types is None:
        from kvrules.plugin.manager import default_registries

        spec_types = default_registries().spec_types.classes
    type_name = data.get("type")
    if type_name is None:
        raise SpecError(f"{where}: missing 'type'; use one of {', '.join(sorted(spec_types))}")
    cls = spec_types.get(type_name)
    if cls is None:
        raise SpecError(
            f"{where}: unknown spec type {type_name!r}; registered types: {', '.join(sorted(spec_types))}"
        )
    known = set(field_names(cls))
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "type":
            continue
        if key not in known:
            raise SpecError(
                f"{where}: unknown key {key!r} for type {type_name!r}; its fields are {', '.join(sorted(known))}"
            )
        if key == "kv_cache_specs" and isinstance(value, Mapping):
            value = {
                name: spec_from_dict(member, layer=name, spec_types=spec_types)
                for name, member in value.items()
            }
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
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: invalid value for type {type_name!r}: {exc}") from None
