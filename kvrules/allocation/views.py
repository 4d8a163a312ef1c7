"""View layouts: how a layer's pages are seen as typed tensors, and how one is chosen per layer.

View layouts are registered with ``registry.add_view_layout(layout)`` in a
``kvrules_register_allocators`` hook; their names are a name space of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvrules.errors import AllocationError
from kvrules.plugin.allocator import LayoutChoice, Placement, ViewLayout
from kvrules.plugin.ask import Asker
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.plugin.rules import Check


def _layout_by_name(registry: AllocatorRegistry, name: str) -> ViewLayout:
    found = registry.view_layouts.get(name)
    if found is None:
        raise AllocationError(
            f"unknown view layout {name!r}; available: {', '.join(sorted(registry.view_layouts)) or 'none'}"
        )
    return found


def check_layout_names(registry: AllocatorRegistry, choice: LayoutChoice) -> None:
    """Raise :class:`~kvrules.AllocationError` early when ``choice`` names an unknown view layout."""
    names = [choice] if isinstance(choice, str) else list(choice.values()) if choice is not None else []
    for name in names:
        _layout_by_name(registry, name)


def _parse_choice(
    placements: Sequence[Placement], registry: AllocatorRegistry, choice: LayoutChoice
) -> tuple[ViewLayout | None, dict[str, ViewLayout]]:
    """``choice`` as one named layout, or a mapping from layer or spec type name to a layout."""
    if isinstance(choice, str):
        return _layout_by_name(registry, choice), {}
    if choice is None:
        return None, {}
    if not isinstance(choice, Mapping):
        raise AllocationError(f"layout={choice!r} must be a view-layout name or a mapping")
    known = {p.layer for p in placements} | {p.spec.type_name for p in placements}
    mapping: dict[str, ViewLayout] = {}
    for key, name in choice.items():
        if key not in known:
            raise AllocationError(
                f"layout mapping key {key!r} is neither a layer of this worker nor one of its spec "
                f"types ({', '.join(sorted({p.spec.type_name for p in placements}))})"
            )
        mapping[key] = _layout_by_name(registry, name)
    return None, mapping


def resolve_view_layouts(
    placements: Sequence[Placement], registry: AllocatorRegistry, choice: LayoutChoice, ask: Asker
) -> dict[str, ViewLayout]:
    """Layer name -> view layout: the user's choice where it applies, else the best default.

    ``choice`` is one layout name (used for every layer it supports; it must support at least
    one), or a mapping from layer name or spec type name to a layout name (that layout must
    support the layer). Records one ``allocate`` decision per layer, and each distinct answer of
    a default layout that declined (with the first layer it declined).
    """
    named, mapping = _parse_choice(placements, registry, choice)
    defaults = [lay for lay in registry.ordered_view_layouts() if lay.default]
    cache: dict[int, tuple[ViewLayout, Check]] = {}  # by id: the plan keeps every spec alive
    declined: set[tuple[str, str]] = set()
    chosen: dict[str, ViewLayout] = {}
    used_named = False
    for place in placements:
        spec = place.spec
        forced = mapping.get(place.layer) or mapping.get(spec.type_name)
        asked = forced if forced is not None else named  # never both: a mapping or one name
        if asked is not None:
            check = ask.check("view-layout", asked, "supports", spec)
            if check.applies:
                used_named = True
                chosen[place.layer] = asked
                ask.record(
                    "allocate", asked.name, "applied", f"asked for by name: {check.reason}", layer=place.layer
                )
                continue
            if forced is not None:
                raise AllocationError(
                    f"layer {place.layer!r} ({spec.type_name}): view layout {forced.name!r} was asked for "
                    f"but declines: {check.reason}"
                )
        hit = cache.get(id(spec))
        if hit is None:
            hit = _default_layout(place, defaults, ask, declined)
            cache[id(spec)] = hit
        chosen[place.layer] = hit[0]
        ask.record("allocate", hit[0].name, "applied", hit[1].reason, layer=place.layer)
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
    ask: Asker,
    declined: set[tuple[str, str]],
) -> tuple[ViewLayout, Check]:
    asked = ask.first(
        defaults,
        "allocate",
        (place.spec,),
        kind="view-layout",
        method="supports",
        layer=place.layer,
        record=False,
    )
    for decision in asked.declines:  # each distinct answer once, with the first layer it was given for
        if (decision.rule, decision.reason) not in declined:
            declined.add((decision.rule, decision.reason))
            ask.decisions.add(decision)
    if asked.found is not None:
        return asked.found, asked.check
    raise AllocationError(
        f"no view layout supports layer {place.layer!r} (spec type {place.spec.type_name!r}); asked: "
        f"{'; '.join(asked.declined) or 'no default view layout is registered'}. Register one with "
        "registry.add_view_layout(...) in a kvrules_register_allocators hook, or block the plugin "
        "that provides this spec type"
    )


__all__ = ["check_layout_names", "resolve_view_layouts"]
