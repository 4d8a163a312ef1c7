"""View layouts: how a layer's pages are seen as typed tensors, and how one is chosen per layer.

View layouts are registered with ``registry.add_view_layout(layout)`` in a
``kvrules_register_allocators`` hook; their names are a name space of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvrules.allocation.placement import Placement
from kvrules.decisions import DecisionLog
from kvrules.errors import AllocationError, KVRulesError, PluginError
from kvrules.plugin.registry import AllocatorRegistry, NamedPlugin
from kvrules.plugin.rules import Check
from kvrules.specs.base import KVCacheSpec

#: what ``layout=`` accepts: one view-layout name, or a mapping from layer name or spec type
#: name (``"full_attention"``, ``"mamba"``, ...) to a view-layout name
LayoutChoice = str | Mapping[str, str] | None


@dataclass(frozen=True)
class ViewLayout(NamedPlugin):
    """How a layer's pages are seen as typed tensors (a backend's cache shape and strides).

    ``supports(spec)`` says whether the layout can view ``spec``'s page, and why; ``build(raw,
    place)`` returns the view (a tensor, or a tuple of tensors) over the int8 buffer ``raw``.
    Contract: block ``b`` of every returned tensor lies in bytes ``[place.page_start(b),
    place.page_start(b) + place.content_bytes)`` of ``raw``, and together the tensors cover those
    bytes exactly once (checked by :meth:`Allocation.verify`). With ``default`` set, the layout
    may be chosen automatically: the highest-priority default layout that supports a spec wins.
    """

    default: bool = True

    def supports(self, spec: KVCacheSpec) -> Check:
        """Whether this layout can view ``spec``'s pages, with a sentence saying why."""
        raise NotImplementedError

    def build(self, raw: Any, place: Placement) -> Any:
        """The view(s) of ``place.layer`` over ``raw`` (no copy, no allocation)."""
        raise NotImplementedError


def _layout_by_name(registry: AllocatorRegistry, name: str) -> ViewLayout:
    found = registry.view_layouts.get(name)
    if found is None:
        raise AllocationError(
            f"unknown view layout {name!r}; available: {', '.join(sorted(registry.view_layouts)) or 'none'}"
        )
    if not isinstance(found, ViewLayout):
        raise PluginError(
            f"view layout {name!r} ({registry.view_layout_providers.get(name)}) does not derive from "
            "kvrules.allocation.ViewLayout"
        )
    return found


def check_layout_names(registry: AllocatorRegistry, choice: LayoutChoice) -> None:
    """Raise :class:`~kvrules.AllocationError` early when ``choice`` names an unknown view layout."""
    names = [choice] if isinstance(choice, str) else list(choice.values()) if choice is not None else []
    for name in names:
        _layout_by_name(registry, name)


def _ask(layout: ViewLayout, spec: KVCacheSpec, registry: AllocatorRegistry) -> Check:
    try:
        check = layout.supports(spec)
    except KVRulesError:
        raise
    except Exception as exc:
        raise PluginError(
            f"view layout {layout.name!r} ({registry.view_layout_providers.get(layout.name)}) raised "
            f"{type(exc).__name__} in supports(): {exc}"
        ) from exc
    if not isinstance(check, Check):
        raise PluginError(f"view layout {layout.name!r} returned {check!r} from supports(), not a Check")
    return check


def resolve_view_layouts(
    placements: Sequence[Placement], registry: AllocatorRegistry, choice: LayoutChoice, log: DecisionLog
) -> dict[str, ViewLayout]:
    """Layer name -> view layout: the user's choice where it applies, else the best default.

    ``choice`` is one layout name (used for every layer it supports; it must support at least
    one), or a mapping from layer name or spec type name to a layout name (that layout must
    support the layer). Records one ``allocate`` decision per layer, and each distinct answer of
    a default layout that declined (with the first layer it declined).
    """
    named: ViewLayout | None = None
    mapping: dict[str, ViewLayout] = {}
    if isinstance(choice, str):
        named = _layout_by_name(registry, choice)
    elif choice is not None:
        if not isinstance(choice, Mapping):
            raise AllocationError(f"layout={choice!r} must be a view-layout name or a mapping")
        known = {p.layer for p in placements} | {p.spec.type_name for p in placements}
        for key, name in choice.items():
            if key not in known:
                raise AllocationError(
                    f"layout mapping key {key!r} is neither a layer of this worker nor one of its spec "
                    f"types ({', '.join(sorted({p.spec.type_name for p in placements}))})"
                )
            mapping[key] = _layout_by_name(registry, name)
    defaults = [
        _layout_by_name(registry, lay.name)
        for lay in registry.ordered_view_layouts()
        if getattr(lay, "default", False)
    ]
    cache: dict[int, tuple[ViewLayout, Check]] = {}  # by id: the plan keeps every spec alive
    declined: set[tuple[str, str]] = set()
    chosen: dict[str, ViewLayout] = {}
    used_named = False
    for place in placements:
        spec = place.spec
        forced = mapping.get(place.layer) or mapping.get(spec.type_name)
        if forced is not None:
            check = _ask(forced, spec, registry)
            if not check.applies:
                raise AllocationError(
                    f"layer {place.layer!r} ({spec.type_name}): view layout {forced.name!r} was asked for "
                    f"but declines: {check.reason}"
                )
            chosen[place.layer] = forced
            log.record(
                "allocate", forced.name, "applied", f"asked for by name: {check.reason}", layer=place.layer
            )
            continue
        if named is not None:
            check = _ask(named, spec, registry)
            if check.applies:
                used_named = True
                chosen[place.layer] = named
                log.record(
                    "allocate", named.name, "applied", f"asked for by name: {check.reason}", layer=place.layer
                )
                continue
        hit = cache.get(id(spec))
        if hit is None:
            hit = _default_layout(place, defaults, registry, log, declined)
            cache[id(spec)] = hit
        chosen[place.layer] = hit[0]
        log.record("allocate", hit[0].name, "applied", hit[1].reason, layer=place.layer)
    if named is not None and placements and not used_named:
        raise AllocationError(
            f"view layout {named.name!r} supports none of this worker's layers (spec types "
            f"{', '.join(sorted({p.spec.type_name for p in placements}))}); name a view layout that "
            "supports them, or leave layout unset for the defaults"
        )
    return chosen


def _default_layout(
    place: Placement,
    defaults: Sequence[ViewLayout],
    registry: AllocatorRegistry,
    log: DecisionLog,
    declined: set[tuple[str, str]],
) -> tuple[ViewLayout, Check]:
    reasons = []
    for layout in defaults:
        check = _ask(layout, place.spec, registry)
        if check.applies:
            return layout, check
        if (layout.name, check.reason) not in declined:
            declined.add((layout.name, check.reason))
            log.record("allocate", layout.name, "declined", check.reason, layer=place.layer)
        reasons.append(f"{layout.name}: {check.reason}")
    raise AllocationError(
        f"no view layout supports layer {place.layer!r} (spec type {place.spec.type_name!r}); asked: "
        f"{'; '.join(reasons) or 'no default view layout is registered'}. Register one with "
        "registry.add_view_layout(...) in a kvrules_register_allocators hook, or block the plugin "
        "that provides this spec type"
    )


__all__ = ["LayoutChoice", "ViewLayout", "check_layout_names", "resolve_view_layouts"]
