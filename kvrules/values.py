"""What a value entering kvrules may be: one vocabulary for every edge (specs, ``EngineConfig``,
``plan()``'s arguments, model files, Hugging Face configs, command-line flags).

* An **integer** is any non-``bool`` integral value with ``__index__`` (Python, numpy and torch
  integers), normalised to ``int``; floats, strings and bools are refused where an integer is meant.
* A **number** (where a field is fractional) is an ``int``, a ``Fraction`` or a finite ``float``;
  never NaN or infinity, never a bool or a string.
* A **name** is a non-empty ``str`` that can be written as UTF-8 (no lone surrogates).
* **Bounds** keep every figure below what no real model approaches and below what the tensors
  that carry it can hold (torch sizes are int64): see the constants below.

Every violation raises the caller's :class:`~kvrules.KVRulesError` subclass naming the field,
the value (shortened when huge) and what is allowed.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

from kvrules.errors import KVRulesError, SpecError

#: the largest byte count of any tensor, pool or memory figure (torch sizes are int64)
MAX_BYTES = (1 << 63) - 1
#: the largest number of tokens (``max_model_len``, block sizes, windows, batched tokens)
MAX_TOKENS = 1 << 40
#: the largest count of anything countable per layer (heads, head size, state dimensions)
MAX_DIMENSION = 1 << 32
#: the most layers a model may have (planning 1,000,000 layers is supported)
MAX_LAYERS = 1 << 21
#: the most blocks a pool may have (``num_gpu_blocks_override``)
MAX_BLOCKS = 1 << 48


K = TypeVar("K")
V = TypeVar("V")


def copied(mapping: Mapping[K, V]) -> dict[K, V]:
    """A new dict of ``mapping``'s items in order. A read-only view (``MappingProxyType``, what
    rules and checkers are handed) is copied through its dict's own ``copy()``: ``dict(view)``
    reads item by item, about 12x slower at a million layers."""
    if isinstance(mapping, MappingProxyType):
        copy = mapping.copy()
        if type(copy) is dict:
            return copy
    return dict(mapping)


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened for messages (a 400-digit integer becomes ``<int of 400 digits>``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1  # never converts to str
        return f"<int of about {digits} digits>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'>"


def _fail(error: type[KVRulesError], what: str, value: Any, allowed: str) -> KVRulesError:
    return error(f"{what} = {shown(value)} is not allowed: {allowed}")


def as_int(
    value: Any,
    what: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[KVRulesError] = SpecError,
) -> int:
    """``value`` as an ``int`` within ``[minimum, maximum]`` (see the module docstring)."""
    if isinstance(value, (bool, float, str, bytes, Fraction)) or value is None:
        raise _fail(error, what, value, _range_text("an integer", minimum, maximum))
    try:
        number = operator.index(value)
    except TypeError:
        raise _fail(error, what, value, _range_text("an integer", minimum, maximum)) from None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise _fail(error, what, number, _range_text("an integer", minimum, maximum))
    return int(number)


def as_optional_int(
    value: Any,
    what: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[KVRulesError] = SpecError,
) -> int | None:
    """``None``, or :func:`as_int`."""
    return None if value is None else as_int(value, what, minimum=minimum, maximum=maximum, error=error)


def as_name(value: Any, what: str, *, error: type[KVRulesError] = SpecError) -> str:
    """``value`` as a non-empty name that can be written as UTF-8."""
    if not isinstance(value, str) or not value:
        raise _fail(error, what, value, "a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(
            error, what, value, "a string that can be written as UTF-8 (no lone surrogates)"
        ) from None
    return value


def as_bool(value: Any, what: str, *, error: type[KVRulesError] = SpecError) -> bool:
    """``value`` when it is a ``bool`` (``0``/``1`` and strings are refused)."""
    if not isinstance(value, bool):
        raise _fail(error, what, value, "true or false")
    return value


def allowed_range(kind: str, minimum: float | None = None, maximum: float | None = None) -> str:
    """What is allowed, in words: ``"an integer from 1 to 1099511627776"`` (for callers that word
    their own messages, e.g. ``EngineConfig.max_model_len=0 must be ...``)."""
    return _range_text(kind, minimum, maximum)


def as_bytes(value: Any, what: str, *, error: type[KVRulesError] = SpecError) -> int:
    """``value`` as a byte count: :func:`as_int` from 0 to :data:`MAX_BYTES`, the bound spelt
    out in full in the message (``shown`` shortens integers of 19 digits and more)."""
    number = as_int(value, what, minimum=0, error=error)
    if number > MAX_BYTES:
        raise _fail(error, what, number, f"at most {MAX_BYTES} bytes (2**63 - 1, the largest torch tensor)")
    return number


def _range_text(kind: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} from {minimum} to {shown(maximum)}"
    if minimum is not None:
        return f"{kind} >= {minimum}"
    if maximum is not None:
        return f"{kind} <= {shown(maximum)}"
    return kind


__all__ = [
    "MAX_BLOCKS",
    "MAX_BYTES",
    "MAX_DIMENSION",
    "MAX_LAYERS",
    "MAX_TOKENS",
    "allowed_range",
    "as_bool",
    "as_bytes",
    "as_int",
    "as_name",
    "as_optional_int",
    "shown",
]
