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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvrules.config import EngineConfig, check_settings
from kvrules.dtypes import DTYPE_SIZES
from kvrules.errors import ConfigError
from kvrules.plan_checks import groups_problem, int_problem, partition_problem, tensors_problem
from kvrules.plugin.rules import Check
from kvrules.specs.asked import count_problem
from kvrules.specs.base import KVCacheSpec, field_names
from kvrules.values import shown


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
