"""Conversion between vLLM's KV-cache spec objects and kvrules specs, by field introspection.

Classes are matched by name (vLLM's ``FullAttentionSpec`` <-> kvrules' ``FullAttentionSpec``,
and so on for every spec class the active plugins registered), and fields by name, so any vLLM
release whose spec classes are dataclasses with these names works (0.27.x and 0.28.x).

Contract, both ways:

* a field both sides have is converted exactly (dtypes by name, enums by member name);
* a vLLM field kvrules does not model is accepted only while it holds its default (so leaving
  it out on the way back restores it); any other value is a :class:`~kvrules.SpecError` that
  names the layer and the field;
* a kvrules field the target vLLM class lacks must hold its kvrules default, else SpecError;
  ``head_size_v`` equal to what both derive (``head_size``, 0 for MLA) is left for vLLM to derive;
* the page size is checked after every conversion: both sides must agree to the byte;
* ``num_head_slots`` / ``state_content_bytes`` (how a vLLM backend publishes a quantized or
  packed attention page) are read with vLLM's meaning: unset means ``num_kv_heads`` and the dense
  ``(head_size + head_size_v) x dtype size``. Each side leaves out what it derives itself: a
  vLLM spec with neither field set whose ``kv_quant_mode`` / ``cache_dtype_str`` would give
  kvrules another page becomes a kvrules spec with the dense ``state_content_bytes`` written
  out; published values equal to what kvrules' ``kv_quant_mode`` formula gives are left unset;
  on the way back kvrules emits its page through the two fields explicitly, leaving unset what
  vLLM derives. So every spec a backend customises converts both ways without loss.

Nothing here imports vLLM; :func:`vllm_classes` does, lazily, when it is first called.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kvrules.dtypes import dtype_name, to_torch
from kvrules.errors import KVRulesError, SpecError
from kvrules.plugin.manager import default_manager
from kvrules.specs.attention import AttentionSpec
from kvrules.specs.base import KVCacheSpec, KVQuantMode

#: the vLLM module that defines the spec, group, tensor and config classes
INTERFACE_MODULE = "vllm.v1.kv_cache_interface"


class VllmNotInstalledError(KVRulesError, ImportError):
    """vLLM is needed for this call but cannot be imported (``pip install 'kvrules[vllm]'``)."""


@dataclass(frozen=True)
class VllmClasses:
    """The vLLM classes a conversion builds: spec classes by name, plus the config classes.

    :ivar specs: spec class name -> class (``"FullAttentionSpec"`` -> the class).
    :ivar KVCacheConfig: vLLM's ``KVCacheConfig``.
    :ivar KVCacheGroupSpec: vLLM's ``KVCacheGroupSpec``.
    :ivar KVCacheTensor: vLLM's ``KVCacheTensor``.
    :ivar version: the vLLM version, for error messages.
    """

    specs: Mapping[str, type]
    KVCacheConfig: type
    KVCacheGroupSpec: type
    KVCacheTensor: type
    version: str = "unknown"

    @classmethod
    def from_namespace(cls, namespace: Any, *, version: str = "unknown") -> VllmClasses:
        """Collect the classes from a module (or any object) holding them as attributes.

        Every dataclass attribute whose name ends in ``Spec`` or ``Specs`` counts as a spec class.
        """
        specs: dict[str, type] = {}
        for name in dir(namespace):
            value = getattr(namespace, name, None)
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and name.endswith(("Spec", "Specs"))
                and name != "KVCacheGroupSpec"
            ):
                specs[name] = value
        try:
            return cls(
                specs=specs,
                KVCacheConfig=namespace.KVCacheConfig,
                KVCacheGroupSpec=namespace.KVCacheGroupSpec,
                KVCacheTensor=namespace.KVCacheTensor,
                version=version,
            )
        except AttributeError as exc:
            raise VllmNotInstalledError(
                f"{namespace!r} lacks vLLM's KV-cache config classes ({exc}); pass the module "
                f"{INTERFACE_MODULE} or an object with the same class names"
            ) from None


def vllm_version() -> str:
    """The installed vLLM's version, or ``"unknown"``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def vllm_classes() -> VllmClasses:
    """The installed vLLM's classes (imports vLLM on first call).

    :raises VllmNotInstalledError: vLLM cannot be imported.
    """
    try:
        module = importlib.import_module(INTERFACE_MODULE)
    except ImportError as exc:
        raise VllmNotInstalledError(
            f"vLLM is not importable ({exc}); install it with `pip install 'kvrules[vllm]'`"
        ) from exc
    return VllmClasses.from_namespace(module, version=vllm_version())


# -- helpers ---------------------------------------------------------------------------------
def _where(layer: str | None) -> str:
    return f"layer {layer!r}" if layer is not None else "spec"


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _page_of(obj: Any) -> int | None:
    try:
        page = obj.page_size_bytes
    except Exception:  # a third-party class may not compute pages standalone
        return None
    return page if isinstance(page, int) and not isinstance(page, bool) else None


def _check_page(layer: str | None, kv: KVCacheSpec, vllm_spec: Any, direction: str) -> None:
    page = _page_of(vllm_spec)
    if page is not None and page != kv.page_size_bytes:
        raise SpecError(
            f"{_where(layer)}: {direction} {type(kv).__name__} changes the page size: vLLM computes "
            f"{page} bytes, kvrules {kv.page_size_bytes} bytes; the spec cannot be mapped exactly "
            "(a field one side does not model affects the page). Plan this model with vLLM's own "
            "planner (kvrules.integrations.vllm.uninstall()) or register a kvrules spec type for it"
        )


def kvrules_classes_by_name(spec_types: Mapping[str, type[KVCacheSpec]]) -> dict[str, type[KVCacheSpec]]:
    """Registered kvrules spec classes keyed by class name (the key vLLM classes are matched on).

    The first class registered under a name wins, so a plugin cannot shadow a built-in.
    """
    out: dict[str, type[KVCacheSpec]] = {}
    for cls in spec_types.values():
        out.setdefault(cls.__name__, cls)
    return out


def kinds_of(spec_types: Mapping[str, type[KVCacheSpec]] | None) -> dict[str, type[KVCacheSpec]]:
    """:func:`kvrules_classes_by_name` of ``spec_types``, of every registered spec type when ``None``."""
    return kvrules_classes_by_name(
        spec_types if spec_types is not None else default_manager().registries.spec_types.classes
    )


# -- vLLM -> kvrules ---------------------------------------------------------------------------
def _to_kvrules_value(
    name: str, value: Any, layer: str | None, kinds: Mapping[str, type[KVCacheSpec]]
) -> Any:
    if name == "dtype":
        return dtype_name(value, field=f"{_where(layer)} dtype")
    if name == "dtypes":
        return tuple(dtype_name(v, field=f"{_where(layer)} dtypes") for v in value)
    if name == "shapes":
        return tuple(tuple(int(x) for x in shape) for shape in value)
    if name == "kv_quant_mode":
        return KVQuantMode.parse(
            value.name if isinstance(value, enum.Enum) else value, field=f"{_where(layer)} kv_quant_mode"
        )
    if name == "mamba_type":
        return value.name.lower() if isinstance(value, enum.Enum) else value
    if name == "kv_cache_specs":
        return {member: _from_vllm(spec, member, kinds) for member, spec in value.items()}
    return value


def kvrules_class_of(
    spec: Any, layer: str | None, kinds: Mapping[str, type[KVCacheSpec]], line: str, advice: str
) -> type[KVCacheSpec]:
    """The kvrules spec class of a vLLM spec (``kinds`` by vLLM class name), on either vLLM line.

    :raises SpecError: no kvrules class of that name (naming the layer, the type, the types
        kvrules models and ``advice``), or ``spec`` is no dataclass.
    """
    vname = type(spec).__name__
    kcls = kinds.get(vname)
    if kcls is None or not dataclasses.is_dataclass(spec):
        raise SpecError(
            f"{_where(layer)}: {line} spec type {vname} has no kvrules equivalent; kvrules models "
            f"{', '.join(sorted(kinds))}. {advice}"
        )
    return kcls


def built_for_vllm(
    vcls: type,
    kwargs: Mapping[str, Any],
    spec: KVCacheSpec,
    layer: str | None,
    classes: VllmClasses,
    what: str,
) -> Any:
    """``vcls(**kwargs)``, the vLLM object standing for kvrules' ``spec``: vLLM's refusal re-raised
    as a :class:`SpecError` naming the layer, and its page checked against ``spec``'s (``what``
    says which conversion, for the message)."""
    try:
        out = vcls(**kwargs)
    except (TypeError, ValueError, AssertionError) as exc:
        raise SpecError(
            f"{_where(layer)}: vLLM {classes.version}'s {vcls.__name__} rejected {kwargs}: {exc}"
        ) from None
    _check_page(layer, spec, out, what)
    return out


def built_from_vllm(
    kcls: type[KVCacheSpec], kwargs: dict[str, Any], spec: Any, layer: str | None, line: str, published: bool
) -> KVCacheSpec:
    """``kcls(**kwargs)``, kvrules' spec for the vLLM ``spec`` of ``line`` (``vLLM 0.33``): its
    refusal re-raised as a :class:`SpecError` naming the layer and the class, vLLM's meaning of
    the published fields given to an attention spec when ``published``, and its page checked
    against ``spec``'s."""
    what = f"{line} {type(spec).__name__}"
    try:
        kv = kcls(**kwargs)
    except SpecError as exc:
        raise SpecError(f"{_where(layer)}: {what}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{_where(layer)}: {what} cannot be converted: {exc}") from None
    if published and isinstance(kv, AttentionSpec):
        kv = _published_from_vllm(kv)
    _check_page(layer, kv, spec, f"converting {line}'s")
    return kv


def _from_vllm(spec: Any, layer: str | None, kinds: Mapping[str, type[KVCacheSpec]]) -> KVCacheSpec:
    vname = type(spec).__name__
    kcls = kvrules_class_of(
        spec,
        layer,
        kinds,
        "vLLM",
        "Register a kvrules spec type whose class has that name through a plugin, or plan this model "
        "with vLLM's own planner (kvrules.integrations.vllm.uninstall())",
    )
    known = {f.name for f in dataclasses.fields(kcls)}
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if field.name in known:
            kwargs[field.name] = _to_kvrules_value(field.name, value, layer, kinds)
            continue
        default = _field_default(field)
        if default is dataclasses.MISSING or value != default:
            raise SpecError(
                f"{_where(layer)}: vLLM {vname}.{field.name}={value!r} is not modelled by kvrules "
                f"(only its default {default!r} can be planned exactly); plan this model with vLLM's own "
                "planner (kvrules.integrations.vllm.uninstall())"
            )
    return built_from_vllm(kcls, kwargs, spec, layer, "vLLM", _publishes_fields(spec))


_PUBLISHED_FIELDS = ("num_head_slots", "state_content_bytes")


def _publishes_fields(vllm_obj_or_class: Any) -> bool:
    """True when the vLLM spec (or class) has both published-page fields (vLLM 0.28 and later)."""
    names = {f.name for f in dataclasses.fields(vllm_obj_or_class)}
    return all(name in names for name in _PUBLISHED_FIELDS)


def _published_from_vllm(kv: AttentionSpec) -> AttentionSpec:
    """``kv`` (built from vLLM's fields as they were) given vLLM's meaning of the published
    fields: neither set means the dense page, which kvrules writes out when its own
    ``kv_quant_mode`` formula differs; a published layout that formula gives anyway is unset."""
    fallback = kv.fallback_state_layout()
    if not kv.publishes_page:
        dense = (kv.num_kv_heads, kv.dense_state_content_bytes)
        if fallback == dense:
            return kv
        return kv.evolve(state_content_bytes=kv.dense_state_content_bytes)
    if kv.state_layout() == fallback:
        return kv.evolve(num_head_slots=None, state_content_bytes=None)
    return kv


def _published_for_vllm(spec: AttentionSpec, layer: str | None) -> dict[str, int | None]:
    """The published fields vLLM needs to compute ``spec``'s page: kvrules' layout with what
    vLLM derives (``num_kv_heads``, the dense state content) left unset.

    :raises SpecError: the page has no ``num_heads x num_states x state_content`` form.
    """
    layout = spec.state_layout()
    if layout is None:
        raise SpecError(
            f"{_where(layer)}: {type(spec).__name__}'s page ({spec.unpadded_page_size_bytes} bytes) "
            "cannot be written as vLLM's num_head_slots x stored tokens x state_content_bytes; "
            "set num_head_slots and state_content_bytes explicitly"
        )
    heads, content = layout
    return {
        "num_head_slots": None if heads == spec.num_kv_heads else heads,
        "state_content_bytes": None if content == spec.dense_state_content_bytes else content,
    }


def from_vllm_spec(
    spec: Any, *, layer: str | None = None, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
) -> KVCacheSpec:
    """The kvrules spec equal to vLLM's ``spec`` (see the module docstring for the contract).

    :param layer: the layer name, for error messages.
    :param spec_types: kvrules type name -> class; every registered spec type by default.
    :raises SpecError: an unknown spec class, an unmodelled non-default field, or a page mismatch.
    """
    return _from_vllm(spec, layer, kinds_of(spec_types))


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """The dataclass field names of ``cls`` (``None`` for a class that is no dataclass)."""
    if cls not in _FIELD_NAMES:
        is_dc = dataclasses.is_dataclass(cls)
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls)) if is_dc else None
    return _FIELD_NAMES[cls]


def memo_key(spec: Any) -> Hashable | None:
    """A key equal for specs of one class whose every field (``compare=False`` ones included)
    is equal, or ``None`` when a field is unhashable (a group spec's member mapping) or ``spec``
    is no dataclass instance."""
    names = _field_names(type(spec))
    if names is None:
        return None
    key = (type(spec), tuple(getattr(spec, name) for name in names))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _convert_each(specs: Mapping[str, Any], convert: Callable[[Any, str], Any]) -> dict[str, Any]:
    """``convert(spec, layer)`` for every layer, once per distinct spec (a model's layers repeat a
    handful of specs); layers with equal specs share the converted object (specs are frozen).
    A failure names the first layer holding that spec."""
    done: dict[Hashable, Any] = {}
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        key = memo_key(spec)
        if key is None:
            out[name] = convert(spec, name)
        elif key in done:
            out[name] = done[key]
        else:
            out[name] = done[key] = convert(spec, name)
    return out


def from_vllm_specs(
    specs: Mapping[str, Any], *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
) -> dict[str, KVCacheSpec]:
    """:func:`from_vllm_spec` for every layer of ``specs`` (layer order kept; each distinct spec
    is converted once)."""
    kinds = kinds_of(spec_types)
    return _convert_each(specs, lambda spec, name: _from_vllm(spec, name, kinds))


# -- conversions kept across calls -------------------------------------------------------------
#: conversions a :class:`ConversionCache` keeps before it starts afresh (a model has at most a
#: few thousand layers, and each planning call adds at most one entry per layer)
CACHE_LIMIT = 65536


@dataclass
class ConversionCache:
    """Spec conversions kept across planning calls, both ways (the integration owns one per
    strategy set; vLLM specs are frozen, so an object converts the same every time).

    vLLM -> kvrules is looked up by object, then by value (:func:`memo_key`: vLLM re-makes some
    specs on every call, e.g. 0.33's ``extra_retained_tokens`` on sliding-window layers), so
    layers with equal specs share one kvrules object. kvrules -> vLLM is looked up by the
    kvrules object, the vLLM class to build and a key (the fields a line carries back;
    ``back_key(vllm_spec, layer)`` of the spec it came from, ``()`` by default): an unchanged spec
    comes back as the very vLLM object it was converted from, and never as an object of other
    vLLM classes. Each table is emptied when it reaches ``limit`` entries.
    """

    back_key: Callable[[Any, str], Hashable] | None = None
    limit: int = CACHE_LIMIT
    _by_id: dict[int, tuple[Any, KVCacheSpec]] = dataclasses.field(default_factory=dict)
    _by_value: dict[Hashable, KVCacheSpec] = dataclasses.field(default_factory=dict)
    _back: dict[tuple[int, type | None, Hashable], tuple[KVCacheSpec, Any]] = dataclasses.field(
        default_factory=dict
    )

    def to_kvrules(self, spec: Any, layer: str, convert: Callable[[Any, str], KVCacheSpec]) -> KVCacheSpec:
        """kvrules' spec for vLLM's ``spec``: ``convert(spec, layer)`` unless this object or an
        equal one was converted before (``spec`` is then remembered as the way back)."""
        hit = self._by_id.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        value = memo_key(spec)
        kv = self._by_value.get(value) if value is not None else None
        if kv is None:
            kv = convert(spec, layer)
            if value is not None:
                self._bounded(self._by_value)[value] = kv
            self.remember(spec, kv, self.back_key(spec, layer) if self.back_key is not None else ())
        return kv

    def to_vllm(
        self,
        spec: KVCacheSpec,
        layer: str,
        convert: Callable[[KVCacheSpec, str], Any],
        *,
        target: type | None,
        key: Hashable = (),
    ) -> Any:
        """vLLM's spec of class ``target`` for kvrules' ``spec`` under ``key``: the very object it
        came from, or ``convert(spec, layer)`` (remembered both ways)."""
        hit = self._back.get((id(spec), target, key))
        if hit is not None and hit[0] is spec:
            return hit[1]
        out = convert(spec, layer)
        self.remember(out, spec, key)
        return out

    def remember(self, vllm_spec: Any, spec: KVCacheSpec, key: Hashable = ()) -> None:
        """Record that vLLM's ``vllm_spec`` and kvrules' ``spec`` are one spec (``key``: the way
        back); an existing way back for ``spec`` is kept."""
        self._bounded(self._by_id)[id(vllm_spec)] = (vllm_spec, spec)
        self._bounded(self._back).setdefault((id(spec), type(vllm_spec), key), (spec, vllm_spec))

    def clear(self) -> None:
        """Forget every conversion."""
        self._by_id.clear()
        self._by_value.clear()
        self._back.clear()

    def _bounded(self, table: dict[Any, Any]) -> dict[Any, Any]:
        if len(table) >= self.limit:
            table.clear()
        return table


# -- kvrules -> vLLM ---------------------------------------------------------------------------
def _enum_member(
    enum_cls: type[enum.Enum], name: str, layer: str | None, field: str, classes: VllmClasses
) -> Any:
    try:
        return enum_cls[name]
    except KeyError:
        raise SpecError(
            f"{_where(layer)}: {field}={name} has no member in vLLM {classes.version}'s "
            f"{enum_cls.__name__} ({', '.join(enum_cls.__members__)})"
        ) from None


def _to_vllm_value(
    name: str, value: Any, field: dataclasses.Field[Any], layer: str | None, classes: VllmClasses
) -> Any:
    default = field.default
    if name == "dtype":
        return to_torch(value)
    if name == "dtypes":
        return tuple(to_torch(v) for v in value)
    if name == "kv_quant_mode" and isinstance(default, enum.Enum):
        return _enum_member(type(default), value.name, layer, name, classes)
    if name == "mamba_type" and isinstance(default, enum.Enum):
        return _enum_member(type(default), str(value).upper(), layer, name, classes)
    return value


def _derived_by_default(spec: KVCacheSpec, name: str, value: Any) -> bool:
    """True when ``value`` is what both sides derive for ``name`` left unset (``head_size_v``:
    ``head_size``, or 0 for MLA); such a field is left for vLLM to derive, as its own specs do."""
    if name != "head_size_v":
        return False
    implied = (
        getattr(spec, "head_size", None)
        if getattr(type(spec), "default_head_size_v_is_head_size", True)
        else 0
    )
    return bool(value == implied)


#: builds vLLM's spec for one member of a kvrules group spec (the member spec, its layer)
MemberBuilder = Callable[[KVCacheSpec, str], Any]


def vllm_class_of(spec: KVCacheSpec, layer: str | None, classes: VllmClasses) -> type:
    """vLLM's class of the same name as ``spec``'s type.

    :raises SpecError: vLLM has none (naming the layer and vLLM's spec classes).
    """
    kname = type(spec).__name__
    vcls = classes.specs.get(kname)
    if vcls is None:
        raise SpecError(
            f"{_where(layer)}: kvrules spec type {kname} has no class in vLLM {classes.version} "
            f"(its spec classes: {', '.join(sorted(classes.specs))})"
        )
    return vcls


def vllm_kwargs(
    spec: KVCacheSpec,
    layer: str | None,
    classes: VllmClasses,
    vcls: type,
    *,
    members: Callable[[Mapping[str, KVCacheSpec]], dict[str, Any]],
    renamed: Mapping[str, str] | None = None,
    implied: Callable[[str, Any], bool] | None = None,
) -> dict[str, Any]:
    """The constructor arguments of ``vcls`` for kvrules' ``spec``: each field under vLLM's name
    (``renamed``: vLLM's name -> kvrules'), a group's ``kv_cache_specs`` built by ``members``;
    fields at a value vLLM derives by default, or ``implied(name, value)`` by the class, left out.

    :raises SpecError: ``vcls`` lacks a field holding a non-default value.
    """
    vfields = {f.name: f for f in dataclasses.fields(vcls) if f.init}
    back = {kv_name: v_name for v_name, kv_name in (renamed or {}).items() if v_name in vfields}
    published: dict[str, int | None] = {}
    if isinstance(spec, AttentionSpec) and all(name in vfields for name in _PUBLISHED_FIELDS):
        published = _published_for_vllm(spec, layer)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(spec):
        value = published.get(field.name, getattr(spec, field.name))
        name = back.get(field.name, field.name)
        vfield = vfields.get(name)
        if _derived_by_default(spec, field.name, value) or (
            implied is not None and implied(field.name, value)
        ):
            continue
        if vfield is None:
            if field.default is dataclasses.MISSING or value != field.default:
                raise SpecError(
                    f"{_where(layer)}: {type(spec).__name__}.{field.name}={value!r} cannot be expressed: "
                    f"vLLM {classes.version}'s {vcls.__name__} has no field {field.name!r}"
                )
            continue
        if field.name == "kv_cache_specs":
            kwargs[name] = members(value)
        else:
            kwargs[name] = _to_vllm_value(field.name, value, vfield, layer, classes)
    return kwargs


def _to_vllm(
    spec: KVCacheSpec, layer: str | None, classes: VllmClasses, member: MemberBuilder | None = None
) -> Any:
    vcls = vllm_class_of(spec, layer, classes)
    each = member if member is not None else (lambda kv, name: _to_vllm(kv, name, classes))
    kwargs = vllm_kwargs(
        spec, layer, classes, vcls, members=lambda specs: {n: each(s, n) for n, s in specs.items()}
    )
    return built_for_vllm(vcls, kwargs, spec, layer, classes, "building vLLM's")


def to_vllm_spec(
    spec: KVCacheSpec,
    *,
    layer: str | None = None,
    classes: VllmClasses | None = None,
    member: MemberBuilder | None = None,
) -> Any:
    """The vLLM spec object equal to kvrules' ``spec``.

    :param layer: the layer name, for error messages.
    :param classes: the vLLM classes to build (the installed vLLM's by default).
    :param member: builds each member of a ``UniformTypeKVCacheSpecs`` (the member, its layer),
        e.g. through an integration's cache; this function by default.
    :raises SpecError: vLLM has no such class, lacks a field holding a non-default value, or
        computes a different page size.
    """
    return _to_vllm(spec, layer, classes if classes is not None else vllm_classes(), member)


def to_vllm_specs(specs: Mapping[str, KVCacheSpec], *, classes: VllmClasses | None = None) -> dict[str, Any]:
    """:func:`to_vllm_spec` for every layer of ``specs`` (layer order kept; each distinct spec is
    converted once)."""
    resolved = classes if classes is not None else vllm_classes()
    return _convert_each(specs, lambda spec, name: _to_vllm(spec, name, resolved))


__all__ = [
    "CACHE_LIMIT",
    "ConversionCache",
    "INTERFACE_MODULE",
    "VllmClasses",
    "VllmNotInstalledError",
    "from_vllm_spec",
    "from_vllm_specs",
    "kvrules_classes_by_name",
    "memo_key",
    "to_vllm_spec",
    "to_vllm_specs",
    "vllm_classes",
    "vllm_version",
]
