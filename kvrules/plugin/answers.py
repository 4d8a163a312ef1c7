"""What the core guarantees about every plugin answer: one checker per extension point.

Each checker is a pure function that returns ``None`` when the answer keeps the contract, or a
sentence saying how it breaks it; :class:`kvrules.plugin.ask.Asker` turns that sentence into a
:class:`~kvrules.PluginError` naming the plugin. The contracts:

* any guard (``check``, ``supports``, ``recognises``): a :class:`~kvrules.plugin.Check` whose
  ``applies`` is a bool and whose ``reason`` is a string;
* spec type: ``block_size`` an int >= 1; ``page_size_bytes`` an int > 0, at least the unpadded
  page, which is at least the real page (both ints > 0); the spec hashes, and so does its
  ``uniform_type_key()`` (or it is ``None``); two equal specs ``merge`` into one equal to them;
  ``summary()`` and ``to_dict()`` are dicts, ``label``
  and ``unification_hint(page)`` strings (the core words its own messages with them); with an
  engine config, ``max_memory_usage_bytes(config)`` and ``blocks_per_request(config)`` are ints
  >= 0. Every spec a plugin hands the core is held to this, the specs a rule or an architecture
  makes as much as the caller's (a spec forged past its own validation is refused);
* converter and aligner: the same layers in the same order, each a spec (an aligner also keeps
  every layer's spec type and changes only the fields it ``touches``);
* layer strategy: a spec of the same type whose page is the target, changing only ``touches``;
* router, fallback, partitioner, grouper: a list of :class:`~kvrules.KVCacheGroup`; every layer
  in at most one group (exactly one for routers, fallbacks and groupers), no unknown layer; a
  pooled group (a spec without members) holds layers whose page is the group's page; a group
  spec with members has a member for each of its layers;
* layout: ``block_bytes`` an int > 0, ``request_bytes`` an int >= 0, ``tensors`` a tuple of
  :class:`~kvrules.KVCacheTensor` with non-negative sizes that cover every layer of the worker,
  name no other layer, and fit the worker's memory (a packed layout's one backing allocation
  counted once);
* architecture: a dict of layer name (str) to spec; its other answers are of the types
  :data:`ANSWERS` names (``uses_mla`` a bool, ``engine_settings`` a ``(dict, str)`` pair, ...);
* allocator: ``(buffers, views)`` with one buffer per planned tensor, of the planned size
  where the buffer tells its size, and one view entry per layer of the worker, each a tensor or
  a tuple of tensors; every buffer it hands a view layout is a tensor of the planned size;
* view layout: ``build(raw, place)`` returns a tensor or a non-empty tuple of tensors that
  together hold ``place.num_blocks * place.content_bytes`` bytes (each byte of each page's
  content once, so exactly that many; :meth:`~kvrules.Allocation.verify` checks where they lie);
* no answer changes, in place, a spec it was given (the asker compares field values).

No checker raises on its own account: a value that cannot even be inspected is itself the
problem. :func:`spec_problem` calls the spec's own methods, and what those raise is the spec
type's fault (the asker reports it so).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any, cast

from kvrules.config import EngineConfig, check_settings
from kvrules.dtypes import DTYPE_SIZES
from kvrules.errors import ConfigError
from kvrules.plan import KVCacheGroup, KVCacheTensor, interleaved
from kvrules.plugin.rules import Check
from kvrules.specs.asked import count_problem
from kvrules.specs.base import KVCacheSpec, field_names
from kvrules.values import copied, shown


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_problem(check: object) -> str | None:
    """A guard's answer."""
    if not isinstance(check, Check):
        return "a guard must return a Check (kvrules.plugin.applies(...) / declines(...))"
    if not isinstance(check.applies, bool):
        return f"Check.applies is {check.applies!r}, not a bool"
    if not isinstance(check.reason, str):
        return f"Check.reason is {check.reason!r}, not a sentence (str)"
    if check.details is not None and not isinstance(check.details, Mapping):
        return f"Check.details is {shown(check.details)}, not a mapping of JSON values (or None)"
    return None


def spec_problem(spec: KVCacheSpec, config: EngineConfig | None = None) -> str | None:
    """A spec's own answers (see the module docstring); the per-request ones only with ``config``.

    The spec's methods are called: one that raises is the spec type's problem, and the caller
    (:meth:`kvrules.plugin.ask.Asker.specs`) reports it as such.
    """
    problem = _sizes_problem(spec) or _identity_problem(spec)
    if problem or config is None:
        return problem
    return count_problem("max_memory_usage_bytes", spec.max_memory_usage_bytes(config)) or (
        count_problem("blocks_per_request", spec.blocks_per_request(config)) or None
    )


def _sizes_problem(spec: KVCacheSpec) -> str | None:
    block = spec.block_size
    if not _is_int(block) or block < 1:
        return f"has block_size {block!r}; it must be an int >= 1"
    page, unpadded, real = spec.page_size_bytes, spec.unpadded_page_size_bytes, spec.real_page_size_bytes
    for label, value in (("page_size_bytes", page), ("unpadded_page_size_bytes", unpadded)):
        if not _is_int(value) or value <= 0:
            return f"answers {label} = {value!r}; it must be an int > 0"
    if not _is_int(real) or real <= 0 or real > unpadded or unpadded > page:
        return (
            f"answers real page {real!r} <= unpadded page {unpadded!r} <= page {page!r}, which "
            "does not hold (all ints > 0)"
        )
    return None


def _identity_problem(spec: KVCacheSpec) -> str | None:
    hash(spec)
    key = spec.uniform_type_key()
    if key is not None and not _hashable(key):
        return f"answers uniform_type_key() = {key!r}, which is neither None nor hashable"
    for label, value in (("summary()", spec.summary()), ("to_dict()", spec.to_dict())):
        if not isinstance(value, dict):
            return f"answers {label} = {value!r}; it must be a dict"
    merged = type(spec).merge([spec, spec])
    if not (isinstance(merged, type(spec)) and merged == spec):
        return f"answers merge([spec, spec]) = {_short(merged)}; two equal specs merge into one equal to them"
    for label, text in (
        ("label", spec.label),
        ("unification_hint()", spec.unification_hint(spec.page_size_bytes)),
    ):
        if not isinstance(text, str):
            return f"answers {label} = {text!r}; it must be a str"
    return None


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def specs_problem(new: object, old: Mapping[str, KVCacheSpec], what: str) -> str | None:
    """A converter's or aligner's answer: the same layers, in order, each a spec."""
    if not isinstance(new, Mapping):
        return f"returned {type(new).__name__} from {what}, not a mapping of layer name to spec"
    if list(new) != list(old):
        return f"changed the set or order of layers in {what}"
    for name, spec in new.items():
        if not isinstance(spec, KVCacheSpec):
            return f"returned {spec!r} for layer {name!r} from {what}, not a spec"
    return None


def changed_fields(layer: str, old: KVCacheSpec, new: KVCacheSpec, touches: frozenset[str]) -> str | None:
    """Fields of ``new`` that differ from ``old`` outside ``touches``, described."""
    if type(new) is not type(old):
        return f"changed layer {layer!r} from {type(old).__name__} to {type(new).__name__}; it must keep the spec type"
    changed = [n for n in field_names(type(old)) if getattr(old, n) != getattr(new, n)]
    illegal = [n for n in changed if n not in touches]
    if illegal:
        return (
            f"changed field(s) {', '.join(illegal)} of layer {layer!r}; it may only change "
            f"{', '.join(sorted(touches)) or 'nothing'}"
        )
    return None


def strategy_problem(
    layer: str, old: KVCacheSpec, new: object, target: int, touches: frozenset[str]
) -> str | None:
    """A layer strategy's answer for ``layer``."""
    if not isinstance(new, KVCacheSpec):
        return f"returned {new!r} for layer {layer!r}, not a spec"
    problem = changed_fields(layer, old, new, touches)
    if problem:
        return problem
    if new.page_size_bytes != target:
        return f"returned a page of {new.page_size_bytes} bytes for layer {layer!r}; the target is {target} bytes"
    return None


def alignment_problem(old: Mapping[str, KVCacheSpec], new: object, touches: frozenset[str]) -> str | None:
    """An aligner's answer."""
    problem = specs_problem(new, old, "align()")
    if problem or not isinstance(new, Mapping):
        return problem
    for name, spec in new.items():
        problem = changed_fields(name, old[name], spec, touches)
        if problem:
            return problem
    return None


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


def tensors_problem(
    tensors: object, groups: Sequence[KVCacheGroup], memory: int, num_blocks: int = 0
) -> str | None:
    """A layout's tensors for ``num_blocks`` blocks of one worker holding ``groups`` with ``memory`` bytes."""
    if not isinstance(tensors, (tuple, list)):
        return f"returned {type(tensors).__name__} from tensors(), not a tuple of KVCacheTensor"
    for index, tensor in enumerate(tensors):
        problem = _tensor_problem(index, tensor)
        if problem:
            return problem
    widest = _widest_pages(tensors, groups)
    if isinstance(widest, str):
        return widest
    packed = total = 0
    for index, tensor in enumerate(tensors):
        problem = _size_problem(index, tensor, widest[index], num_blocks)
        if problem:
            return problem
        if tensor.block_stride > 0:
            packed = max(packed, tensor.size)
        else:
            total += tensor.size
    total += packed
    if total > memory:
        return f"laid out {total} bytes of tensors on a worker with {memory} bytes"
    return None


def architecture_problem(specs: object) -> str | None:
    """An architecture's built specs."""
    if not isinstance(specs, dict):
        return f"built {type(specs).__name__}, not a dict of layer name to spec"
    for name, spec in specs.items():
        if not isinstance(name, str) or not isinstance(spec, KVCacheSpec):
            return f"built {name!r}: {spec!r}; expected layer name -> spec"
    return None


def allocation_problem(
    result: object, sizes: Sequence[int], backing: Sequence[int], layers: set[str]
) -> str | None:
    """An allocator's ``(buffers, views)`` for planned allocation ``sizes`` and tensor ``backing``."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return f"returned {type(result).__name__}, not (buffers, views)"
    buffers, views = result
    if not isinstance(buffers, (tuple, list)) or len(buffers) != len(backing):
        count = len(buffers) if isinstance(buffers, (tuple, list)) else type(buffers).__name__
        return f"returned {count} buffers for {len(backing)} tensors"
    for index, buffer in enumerate(buffers):
        nbytes = buffer_bytes(buffer)
        if nbytes is not None and nbytes != sizes[backing[index]]:
            return f"returned buffer {index} of {nbytes} bytes; the plan asks for {sizes[backing[index]]}"
    if not isinstance(views, dict) or set(views) != layers:
        return "returned views that do not match the worker's layers"
    for layer, view in views.items():
        if not _pieces(view):
            return (
                f"returned {_short(view)} as the view of layer {layer!r}, not a tensor or a tuple of tensors"
            )
    return None


def buffer_bytes(buffer: Any) -> int | None:
    """Bytes of a tensor (``numel() * element_size()``); ``None`` for anything that cannot tell."""
    try:
        return int(buffer.numel()) * int(buffer.element_size())
    except Exception:
        return None


def _pieces(view: object) -> list[int]:
    """Bytes of each tensor of a view (a tensor or a non-empty tuple of them); ``[]`` otherwise."""
    pieces = view if isinstance(view, tuple) else (view,)
    sizes = [buffer_bytes(piece) for piece in pieces]
    return [] if None in sizes else [n for n in sizes if n is not None]


def _short(value: object) -> str:
    text = repr(value) if not hasattr(value, "numel") else type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def buffer_problem(raw: object, expected: int) -> str | None:
    """A buffer an allocator hands a view layout: a tensor of the ``expected`` (planned) bytes."""
    nbytes = buffer_bytes(raw)
    if nbytes is None:
        return f"{_short(raw)}, which is not a tensor"
    if nbytes != expected:
        return f"{nbytes} bytes; the plan asks for {expected}"
    return None


def view_problem(view: object, num_blocks: int, content_bytes: int) -> str | None:
    """A view layout's ``build()`` answer for a layer of ``num_blocks`` pages of ``content_bytes``."""
    pieces = _pieces(view)
    if not pieces:
        return f"built {_short(view)}, not a tensor or a non-empty tuple of tensors"
    wanted = num_blocks * content_bytes
    if sum(pieces) != wanted:
        return (
            f"built views of {sum(pieces)} bytes in all; {num_blocks} blocks of {content_bytes} "
            f"bytes of content are {wanted} bytes, each covered once"
        )
    return None


def _count(minimum: int, optional: bool = False) -> Callable[[object], str | None]:
    def problem(value: object) -> str | None:
        if (optional and value is None) or (_is_int(value) and value >= minimum):  # type: ignore[operator]
            return None
        return f"{_short(value)}; it must be an int >= {minimum}{' or None' if optional else ''}"

    return problem


def _engine_settings(value: object) -> str | None:
    """A ``(settings, reason)`` pair whose settings are :class:`EngineConfig` fields with valid
    values (an architecture's wrong setting is its fault, not the user's)."""
    if not (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], dict)
        and isinstance(value[1], str)
    ):
        return f"{_short(value)}; it must be (settings dict, reason str)"
    try:
        check_settings(value[0])
    except ConfigError as exc:
        return f"engine settings {_short(value[0])}: {exc}"
    return None


def _of_type(kind: type) -> Callable[[object], str | None]:
    def problem(value: object) -> str | None:
        return None if isinstance(value, kind) else f"{_short(value)}; it must be a {kind.__name__}"

    return problem


#: the contracts of the answers asked through :meth:`kvrules.plugin.ask.Asker.call` alone:
#: ``(kind, method) -> checker``
def _dtype_or_auto(value: object) -> str | None:
    if value == "auto" or (isinstance(value, str) and value in DTYPE_SIZES):
        return None
    return f"{value!r} is neither 'auto' nor a dtype name ({', '.join(sorted(DTYPE_SIZES))})"


ANSWERS: Mapping[tuple[str, str], Callable[[object], str | None]] = {
    ("architecture", "uses_mla"): _of_type(bool),
    ("architecture", "mamba_ssm_dtype_default"): _dtype_or_auto,
    ("architecture", "engine_settings"): _engine_settings,
    ("architecture", "mtp_layer_count"): _count(0),
    ("architecture", "mamba_chunk_size"): _count(1, optional=True),
}


def answer_problem(kind: str, method: str, value: object) -> str | None:
    """The answer ``value`` of ``method`` of a ``kind`` object, by :data:`ANSWERS` (``None``
    when it keeps the contract, or when the method has no contract there)."""
    checker = ANSWERS.get((kind, method))
    return checker(value) if checker is not None else None


__all__ = [
    "ANSWERS",
    "alignment_problem",
    "answer_problem",
    "buffer_bytes",
    "buffer_problem",
    "allocation_problem",
    "architecture_problem",
    "changed_fields",
    "check_problem",
    "groups_problem",
    "partition_problem",
    "int_problem",
    "spec_problem",
    "specs_problem",
    "strategy_problem",
    "tensors_problem",
    "view_problem",
]
