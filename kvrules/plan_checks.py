"""Where layers may lie: the invariants of groups and tensors, checked alike on the answers of
plugins (:mod:`kvrules.plugin.answers`) and on plans from outside (:func:`kvrules.plan.plan_problem`).

Each checker returns ``None`` when the invariant holds, or a sentence whose subject is left to
the caller (``"placed unknown layer 'x' in group 1"``: a rule, or a plan document).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import cast

from kvrules.plan_records import KVCacheGroup, KVCacheTensor, allocated_bytes, interleaved
from kvrules.specs.base import KVCacheSpec
from kvrules.values import copied, shown


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def groups_problem(groups: object, specs: Mapping[str, KVCacheSpec], *, complete: bool = True) -> str | None:
    """A router's, fallback's, grouper's (``complete``) or partitioner's groups over ``specs``."""
    problem, left = _unplaced(groups, specs)
    if problem is None and complete and left:
        missing = list(left)
        return f"left {len(missing)} layer(s) out of every group, e.g. {', '.join(missing[:3])}"
    return problem


def partition_problem(
    groups: object, remaining: Mapping[str, KVCacheSpec], specs: Mapping[str, KVCacheSpec]
) -> tuple[str | None, Mapping[str, KVCacheSpec]]:
    """A partitioner's groups and remaining specs: the groups as :func:`groups_problem` checks
    them (layers may be left out), and the remaining specs exactly the layers no group holds,
    each with its given spec object. Returns the problem (``None`` if none) and those layers in
    ``specs``' order."""
    problem, left = _unplaced(groups, specs)
    if problem is not None:
        return problem, {}
    wrong = next((n for n, s in remaining.items() if left.get(n) is not s), None)
    if wrong is not None:
        return f"left layer {wrong!r} in both its groups and the remaining specs, or changed it", {}
    if len(left) != len(remaining):
        lost = next(n for n in left if n not in remaining)
        return f"left layer {lost!r} neither in a group nor in the remaining specs", {}
    return None, left


def _unplaced(
    groups: object, specs: Mapping[str, KVCacheSpec]
) -> tuple[str | None, Mapping[str, KVCacheSpec]]:
    """The first problem of ``groups`` over ``specs`` (every layer at most once, none unknown,
    pooled pages equal) and the layers no group holds, in ``specs``' order.

    One pass over the groups' layers: each is popped from a copy of ``specs``, so an unknown or
    repeated layer fails its pop and what stays in the copy is in no group (copying a dict costs
    about what reading it does; building a table of every layer would cost more)."""
    if not isinstance(groups, (list, tuple)):
        return f"returned {type(groups).__name__}, not a list of KVCacheGroup", {}
    left = copied(specs)
    for index, group in enumerate(groups):
        problem = _group_problem(index, group) or _layers_problem(index, groups, specs, left)
        if problem:
            return problem, {}
    return None, left


def _group_problem(index: int, group: object) -> str | None:
    """Group ``index`` itself: its type, flag, spec, and members or page (its layers: :func:`_layers_problem`)."""
    if not isinstance(group, KVCacheGroup):
        return f"returned {group!r} as group {index}, not a KVCacheGroup"
    spec = group.spec
    if not isinstance(group.is_eagle_group, bool):
        return f"returned group {index} with is_eagle_group={group.is_eagle_group!r}, not a bool"
    if not isinstance(spec, KVCacheSpec) or not isinstance(group.layer_names, tuple):
        return f"returned group {index} with spec {spec!r} and layers {group.layer_names!r}"
    if spec.has_members:
        try:
            spec.members(group.layer_names)
            exact = set(spec.member_specs) == set(group.layer_names)
        except (KeyError, TypeError):
            exact = False
        if not exact:
            return f"gave group {index} a spec whose members are not exactly its layers"
    return None


def _layers_problem(
    index: int,
    groups: Sequence[KVCacheGroup],
    specs: Mapping[str, KVCacheSpec],
    remaining: dict[str, KVCacheSpec],
) -> str | None:
    """Group ``index``'s layers: known and in no earlier group (each is popped from
    ``remaining``), and, when pooled, of the
    group's page. The layer at fault is looked for only once a pop fails or a page differs."""
    group = groups[index]
    names = group.layer_names
    try:
        if not set(map(type, names)) <= {str}:
            raise TypeError
        layer_specs = list(map(remaining.pop, names))
    except (KeyError, TypeError):  # unknown, repeated, not a string, or unhashable
        return _misplaced_layer(index, groups, specs)
    if group.spec.has_members:
        return None
    page = group.spec.page_size_bytes
    distinct = dict(zip(map(id, layer_specs), layer_specs, strict=True))  # few: layers share specs
    if all(spec.page_size_bytes == page for spec in distinct.values()):
        return None
    odd = next(n for n in names if specs[n].page_size_bytes != page)
    return (
        f"pooled layer {odd!r} (page {specs[odd].page_size_bytes} bytes) in group {index}, whose "
        f"page is {page} bytes; a pooled group holds one page size"
    )


def _misplaced_layer(index: int, groups: Sequence[KVCacheGroup], specs: Mapping[str, KVCacheSpec]) -> str:
    """The message for group ``index``'s first unknown layer, else for the layer it repeats."""
    for name in groups[index].layer_names:
        if type(name) is not str or name not in specs:
            return f"placed unknown layer {name!r} in group {index}"
    return _repeated_layer(index, groups)


def _repeated_layer(index: int, groups: Sequence[KVCacheGroup]) -> str:
    """The message for a layer that group ``index`` repeats (within itself or from an earlier group)."""
    first: dict[str, int] = {}
    for at, group in enumerate(groups[: index + 1]):
        for name in group.layer_names:
            if name in first:
                return f"placed layer {name!r} in groups {first[name]} and {at}"
            first[name] = at
    return f"placed a layer twice in group {index}"


def int_problem(value: object, what: str, minimum: int) -> str | None:
    """``value`` is an int (not a bool) of at least ``minimum``."""
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        return f"gave {value!r} for {what}; it must be an int >= {minimum}"
    return None


def _pages(groups: Sequence[KVCacheGroup]) -> dict[str, int]:
    """Each layer's page in its group: the group's page when pooled, its own member's otherwise
    (built in one pass; the groups were checked when they were made, so no layer repeats)."""
    if len(groups) == 1 and not groups[0].spec.has_members:
        return dict.fromkeys(groups[0].layer_names, groups[0].spec.page_size_bytes)
    return dict(chain.from_iterable(_layer_pages(g) for g in groups))


def _layer_pages(group: KVCacheGroup) -> Iterable[tuple[str, int]]:
    if group.spec.has_members:
        return ((n, s.page_size_bytes) for n, s in group.spec.members(group.layer_names).items())
    return zip(group.layer_names, repeat(group.spec.page_size_bytes))


def _tensor_problem(index: int, tensor: object) -> str | None:
    """Tensor ``index`` is a :class:`KVCacheTensor` with non-negative int size, offset and stride."""
    if not isinstance(tensor, KVCacheTensor):
        return f"returned {tensor!r} as tensor {index}, not a KVCacheTensor"
    if not isinstance(tensor.shared_by, (tuple, list)):
        return f"gave tensor {index} shared_by = {shown(tensor.shared_by)}; it must be a tuple of layer names"
    size, offset, stride = tensor.size, tensor.offset, tensor.block_stride
    if type(size) is int and type(offset) is int and type(stride) is int and min(size, offset, stride) >= 0:
        return None  # the common case, without a call per field
    for label, value in (("size", size), ("offset", offset), ("block_stride", stride)):
        problem = int_problem(value, f"tensor {index}'s {label}", 0)
        if problem:
            return problem
    return None


def _size_problem(index: int, tensor: KVCacheTensor, widest_page: int, num_blocks: int) -> str | None:
    """Tensor ``index`` holds ``num_blocks`` blocks of its widest layer page (or of its block stride)."""
    per_block = tensor.block_stride if tensor.block_stride > 0 else widest_page
    if tensor.size < per_block * num_blocks:
        return (
            f"made tensor {index} of {tensor.size} bytes, less than {num_blocks} blocks of {per_block} bytes "
            f"for {', '.join(tensor.shared_by[:3])}"
        )
    return None


def _in_group_order(tensors: Sequence[KVCacheTensor], groups: Sequence[KVCacheGroup]) -> bool:
    """Whether ``tensors`` list the layers of ``groups`` position by position: the first layer
    of every group, then the second of every group that has one, and so on (a shared pool's
    arrangement, however the rows are cut into tensors). Then every layer is in exactly one
    tensor and no other layer is in any, as the groups were checked when they were made; found
    by comparing two lists in order, where a table of a million layers would be probed at
    random a million times."""
    expected = interleaved([g.layer_names for g in groups])
    try:
        placed = list(chain.from_iterable(map(attrgetter("shared_by"), tensors)))
    except TypeError:  # a shared_by that is not a sequence: the general check names it
        return False
    return _same_names(placed, expected)


def _same_names(given: list[object], names: list[str]) -> bool:
    """Whether ``given`` (from a plugin) is the list of layer names ``names``: the very name
    objects, compared without touching them (at a million layers each look at a string is a
    cache miss), else strings equal to them (types first: a plugin's object may compare oddly)."""
    if len(given) != len(names):
        return False
    return all(map(is_, given, names)) or (set(map(type, given)) <= {str} and given == names)


def _widest_pages(tensors: Sequence[KVCacheTensor], groups: Sequence[KVCacheGroup]) -> list[int] | str:
    """Each tensor's widest layer page when every layer of the worker's ``groups`` is in exactly
    one tensor and no other layer is in any (each is popped from a table of the worker's
    layers), else the sentence naming the layer at fault."""
    page = _pooled_page(groups)
    if page is not None and _in_group_order(tensors, groups):
        return [page if t.shared_by else 0 for t in tensors]
    remaining = cast("dict[str, object]", _pages(groups))  # popped empty; built again for a message
    widest: list[int] = []
    for tensor in tensors:
        names = tensor.shared_by
        try:
            if not set(map(type, names)) <= {str}:
                raise TypeError
            if page is None:
                widest.append(max(map(cast("dict[str, int]", remaining).pop, names), default=0))
            else:
                deque(map(remaining.pop, names), maxlen=0)
                widest.append(page if names else 0)
        except (KeyError, TypeError):  # not on the worker, repeated, not a string, or unhashable
            return _placements_problem(tensors, _pages(groups)) or "placed a layer twice"
    if remaining:
        missing = list(remaining)
        return f"left {len(missing)} layer(s) in no tensor, e.g. {', '.join(missing[:3])}"
    return widest


def _pooled_page(groups: Sequence[KVCacheGroup]) -> int | None:
    """The one page of ``groups`` when every one is pooled (no members) with that page."""
    if any(g.spec.has_members for g in groups):
        return None
    pages = {g.spec.page_size_bytes for g in groups}
    return pages.pop() if len(pages) == 1 else None


def _placements_problem(tensors: Sequence[KVCacheTensor], pages: Mapping[str, int]) -> str | None:
    """The first tensor that names a layer not on the worker (``pages``) or one an earlier tensor
    (or itself) holds; ``None`` when there is none."""
    placed: set[str] = set()
    for index, tensor in enumerate(tensors):
        problem = _placement_problem(index, tensor.shared_by, pages, placed)
        if problem:
            return problem
    return None


def _placement_problem(
    index: int, names: Sequence[str], pages: Mapping[str, int], placed: set[str]
) -> str | None:
    """Tensor ``index``'s layers are on this worker and in no earlier tensor (``placed`` gains them)."""
    try:
        known = set(map(type, names)) <= {str} and pages.keys() >= set(names)
    except TypeError:  # an unhashable "name"
        known = False
    if not known:
        odd = next(n for n in names if type(n) is not str or n not in pages)
        return f"put layer {odd!r}, which is not on this worker, in tensor {index}"
    if placed.isdisjoint(names) and len(set(names)) == len(names):
        placed.update(names)
        return None
    twice = _first_repeat(placed, names)
    return f"put layer {twice!r} in more than one tensor (again in tensor {index})"


def _first_repeat(placed: set[str], names: Sequence[str]) -> str:
    """The first of ``names`` already in ``placed`` or earlier in ``names``."""
    seen = set(placed)
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""  # not reached: callers ask only once a repeat is known


def placement_problem(tensors: object, groups: Sequence[KVCacheGroup], num_blocks: int) -> str | None:
    """Tensors of one worker holding ``groups``: non-negative sizes, every layer in exactly one
    tensor and no other layer in any, each tensor ``num_blocks`` blocks of its widest page (or of
    its block stride)."""
    if not isinstance(tensors, (tuple, list)):
        return f"returned {type(tensors).__name__} from tensors(), not a tuple of KVCacheTensor"
    for index, tensor in enumerate(tensors):
        problem = _tensor_problem(index, tensor)
        if problem:
            return problem
    widest = _widest_pages(tensors, groups)
    if isinstance(widest, str):
        return widest
    for index, tensor in enumerate(tensors):
        problem = _size_problem(index, tensor, widest[index], num_blocks)
        if problem:
            return problem
    return None


def tensors_problem(
    tensors: object, groups: Sequence[KVCacheGroup], memory: int, num_blocks: int = 0
) -> str | None:
    """A layout's tensors for ``num_blocks`` blocks of one worker holding ``groups`` with ``memory``
    bytes: :func:`placement_problem`, and the tensors fit (:func:`allocated_bytes`)."""
    problem = placement_problem(tensors, groups, num_blocks)
    if problem is not None:
        return problem
    total = allocated_bytes(cast("Sequence[KVCacheTensor]", tensors))
    if total > memory:
        return f"laid out {total} bytes of tensors on a worker with {memory} bytes"
    return None


__all__ = ["groups_problem", "int_problem", "partition_problem", "placement_problem", "tensors_problem"]
