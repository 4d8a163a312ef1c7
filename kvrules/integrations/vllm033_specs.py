"""Conversion between vLLM 0.33's KV-cache spec objects and kvrules specs.

vLLM 0.33 renamed and added spec fields (``shared/reference/vllm-0.33-seam.md`` c); this module
maps them onto the 0.28 conversion of :mod:`kvrules.integrations.vllm_specs`, whose contract
holds unchanged (classes and fields matched by name, an unmodelled field accepted only at its
default, the page checked to the byte both ways). What differs:

* ``tokens_per_state`` (0.33) is kvrules' ``compress_ratio`` on the MLA classes
  (``num_states = block_size // tokens_per_state``, the same page); on every other class it must
  hold its default (1 for attention, -1 for Mamba), else a SpecError naming layer and field;
* ``is_draft`` and ``max_tp_shards`` do not change a page, a block count or the layout: the
  builder leaves them to vLLM's Core (eagle groups, ``kv_tp_replicas``) and carries them back
  onto every spec it returns (:func:`to_vllm033_spec` ``carried=``);
* every non-MLA attention spec comes in with ``indexes_kv_by_block_stride=True``: 0.33 removed
  that field because it pads every such page through a strided view (``kv_cache_planning.py``
  396-399), so a strategy set with ``stride-pad`` (``default``) pads what vLLM 0.33 pads; on the
  way back the flag is left to 0.33, which implies it for those classes;
* every other new field (``block_stride_alignment``, ``dcp_sharded`` off its
  class default, MLA ``topk_buffer_width`` / ``cache_role`` / ..., Mamba prefill checkpoints,
  ``tp_replicated``, ...) is refused when it is not at its default; classes kvrules does not
  model (``CircularBufferSpec``, ``RSWASpec``, HiSparse) are refused by name.

docs/vllm.md has the table, class by class. Nothing here imports vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from kvrules.errors import SpecError
from kvrules.integrations.vllm_specs import (
    VllmClasses,
    _field_default,
    _to_kvrules_value,
    _where,
    built_for_vllm,
    built_from_vllm,
    kinds_of,
    kvrules_class_of,
    vllm_class_of,
    vllm_kwargs,
)
from kvrules.specs.base import KVCacheSpec

#: vLLM 0.33 field -> kvrules field, where only the name differs (on classes having the target)
RENAMED: dict[str, str] = {"tokens_per_state": "compress_ratio"}
#: vLLM 0.33 fields the builder never reads (Core's: ``is_draft`` tags eagle groups,
#: ``max_tp_shards`` gives ``kv_tp_replicas``); dropped in, carried back out from the layers
CORE_FIELDS: tuple[str, ...] = ("is_draft", "max_tp_shards")
#: vLLM 0.33 fields a class derives from its members (``UniformTypeKVCacheSpecs.dcp_sharded``:
#: the members' common value); checked against the members in, derived again out
MEMBER_DERIVED: tuple[str, ...] = ("dcp_sharded",)


def _members_value(members: Mapping[str, Any], name: str) -> Any:
    """The value every member spec holds for ``name`` (``None`` when they differ or none has it)."""
    values = {getattr(m, name, None) for m in members.values()}
    return values.pop() if len(values) == 1 else None


def _refuse(layer: str | None, vname: str, name: str, value: Any, default: Any) -> SpecError:
    return SpecError(
        f"{_where(layer)}: vLLM's {vname}.{name}={value!r} is not modelled by kvrules (only its "
        f"default {default!r} can be planned exactly); inside an engine vLLM's own planner plans "
        "such a model (rule vllm-fallback); outside one, register a kvrules spec type that models it"
    )


def _renamed_value(layer: str | None, vname: str, name: str, value: Any) -> int:
    """``tokens_per_state`` as kvrules' integer ``compress_ratio``."""
    if isinstance(value, Fraction) and value.denominator == 1:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(
            f"{_where(layer)}: vLLM 0.33 {vname}.{name}={value!r}; kvrules models a whole number of "
            "tokens per stored state (an int >= 1), as compress_ratio"
        )
    return value


#: kvrules' field for what vLLM 0.33 implies of every non-MLA attention class: its backend reads
#: pages through a strided view, so 0.33 pads any such page that does not divide the largest
#: (``kv_cache_planning.py:396-399``; 0.28's ``indexes_kv_by_block_stride`` field is gone)
STRIDED_READ = "indexes_kv_by_block_stride"

#: converts one member spec of a group spec (vLLM's spec, its layer) to kvrules'
MemberConverter = Callable[[Any, str], KVCacheSpec]


def reads_pages_strided(vllm_cls: type) -> bool:
    """True for the vLLM 0.33 classes whose pages 0.33 pads: every ``AttentionSpec`` but the
    ``MLAAttentionSpec`` family (by class name along the MRO, so stand-ins count alike)."""
    names = {c.__name__ for c in vllm_cls.__mro__}
    return "AttentionSpec" in names and "MLAAttentionSpec" not in names


def _kwargs_from_vllm(
    spec: Any,
    layer: str | None,
    kcls: type[KVCacheSpec],
    kinds: Mapping[str, type[KVCacheSpec]],
    member: MemberConverter | None,
) -> dict[str, Any]:
    """kvrules constructor arguments from a vLLM 0.33 spec's fields (refusing unmodelled values);
    the members of a group spec through ``member`` when given."""
    vname = type(spec).__name__
    known = {f.name for f in dataclasses.fields(kcls)}
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(spec):
        name, value = field.name, getattr(spec, field.name)
        target = RENAMED.get(name, name)
        if name in CORE_FIELDS:
            continue
        if name in MEMBER_DERIVED and hasattr(spec, "kv_cache_specs") and name not in known:
            if value != _members_value(spec.kv_cache_specs, name):
                raise _refuse(layer, vname, name, value, _members_value(spec.kv_cache_specs, name))
            continue
        if name == "kv_cache_specs":
            each = member or (lambda s, m: _from_vllm033(s, m, kinds, None))
            kwargs[name] = {m: each(s, m) for m, s in value.items()}
        elif target != name and target in known:
            kwargs[target] = _renamed_value(layer, vname, name, value)
        elif name in known:
            kwargs[name] = _to_kvrules_value(name, value, layer, kinds)
        elif (default := _field_default(field)) is dataclasses.MISSING or value != default:
            raise _refuse(layer, vname, name, value, default)
    if STRIDED_READ in known and reads_pages_strided(type(spec)):
        kwargs[STRIDED_READ] = True
    return kwargs


def _from_vllm033(
    spec: Any, layer: str | None, kinds: Mapping[str, type[KVCacheSpec]], member: MemberConverter | None
) -> KVCacheSpec:
    kcls = kvrules_class_of(
        spec,
        layer,
        kinds,
        "vLLM 0.29+",
        "Inside an engine vLLM's own planner plans such a model (rule vllm-fallback); outside one, "
        "register a kvrules spec type of that class name through a plugin",
    )
    kwargs = _kwargs_from_vllm(spec, layer, kcls, kinds, member)
    return built_from_vllm(kcls, kwargs, spec, layer, "vLLM 0.33", published=True)


def from_vllm033_spec(
    spec: Any,
    *,
    layer: str | None = None,
    spec_types: Mapping[str, type[KVCacheSpec]] | None = None,
    member: MemberConverter | None = None,
) -> KVCacheSpec:
    """The kvrules spec equal to vLLM 0.33's ``spec`` (module docstring: the contract).

    :param member: converts each member of a ``UniformTypeKVCacheSpecs`` (vLLM's spec, its
        layer), e.g. through the integration's cache; this function by default.
    :raises SpecError: an unknown class, an unmodelled non-default field (naming layer and
        field), or a page that differs.
    """
    return _from_vllm033(spec, layer, kinds_of(spec_types), member)


def from_vllm033_specs(
    specs: Mapping[str, Any], *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
) -> dict[str, KVCacheSpec]:
    """:func:`from_vllm033_spec` for every layer (layer order kept)."""
    kinds = kinds_of(spec_types)
    return {name: _from_vllm033(spec, name, kinds, None) for name, spec in specs.items()}


def _to_vllm033(
    spec: KVCacheSpec, layer: str | None, classes: VllmClasses, carried: Mapping[str, Any]
) -> Any:
    vcls = vllm_class_of(spec, layer, classes)
    kwargs = vllm_kwargs(
        spec,
        layer,
        classes,
        vcls,
        members=lambda specs: {m: _to_vllm033(s, m, classes, carried) for m, s in specs.items()},
        renamed=RENAMED,
        implied=lambda name, value: name == STRIDED_READ and bool(value) and reads_pages_strided(vcls),
    )
    names = {f.name for f in dataclasses.fields(vcls)}
    if "kv_cache_specs" in kwargs:  # a group's figures its members agree on
        arguments = {f.name for f in dataclasses.fields(vcls) if f.init}
        for derived in MEMBER_DERIVED:
            common = _members_value(kwargs["kv_cache_specs"], derived)
            if derived in arguments and derived not in kwargs and common is not None:
                kwargs[derived] = common
    kwargs.update({k: v for k, v in carried.items() if k in CORE_FIELDS and k in names})
    return built_for_vllm(vcls, kwargs, spec, layer, classes, "building vLLM 0.33's")


def to_vllm033_spec(
    spec: KVCacheSpec,
    *,
    classes: VllmClasses,
    layer: str | None = None,
    carried: Mapping[str, Any] | None = None,
) -> Any:
    """The vLLM 0.33 spec object equal to kvrules' ``spec``, with the :data:`CORE_FIELDS` in
    ``carried`` (``{"is_draft": True}``) put back as given.

    :raises SpecError: vLLM has no such class, lacks a field holding a non-default value, or
        computes a different page.
    """
    return _to_vllm033(spec, layer, classes, carried or {})


def carried_fields(specs: Any, layer: str | None = None) -> dict[str, Any]:
    """The :data:`CORE_FIELDS` values of vLLM specs that share one group spec: ``is_draft`` when
    any is a draft layer, every other field when all agree (vLLM asserts that when it merges).

    :raises SpecError: the specs disagree about a field other than ``is_draft`` (naming it).
    """
    out: dict[str, Any] = {}
    specs = list(specs)
    for name in CORE_FIELDS:
        values = [getattr(s, name) for s in specs if hasattr(s, name)]
        if not values:
            continue
        if name == "is_draft":
            out[name] = any(values)
        elif len(set(values)) > 1:
            raise SpecError(
                f"{_where(layer)}: the layers of one group hold different {name} values "
                f"({sorted(set(values), key=repr)}); vLLM merges only equal ones"
            )
        else:
            out[name] = values[0]
    return out


__all__ = [
    "carried_fields",
    "CORE_FIELDS",
    "MEMBER_DERIVED",
    "RENAMED",
    "STRIDED_READ",
    "reads_pages_strided",
    "from_vllm033_spec",
    "from_vllm033_specs",
    "to_vllm033_spec",
]
