"""The spec base class: what one page of a layer's KV cache holds and what it costs.

Contract for every spec type (built-in or third-party):

* it is an immutable dataclass; invalid values raise :class:`~kvrules.SpecError` on construction;
* ``type_name`` is the model-file type name; ``page_size_bytes`` is the bytes one block of the
  layer takes in the pool (padding included), ``real_page_size_bytes`` the bytes of real state;
* ``page_scales_with_block_size`` says whether multiplying ``block_size`` multiplies the page;
* ``uniform_type_key()`` returns the "same token slots" key: layers whose keys are equal (and not
  ``None``) and whose block sizes are equal may share one uniform-type group;
* ``merge(specs)`` returns one spec standing for several layers, or raises ``ValueError``
  (:func:`merged_spec` asks it about a mapping of layers);
* ``max_memory_usage_bytes(config)`` is the bytes one request of ``config.max_model_len`` needs.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, cast, overload

from kvrules.errors import SpecError
from kvrules.values import MAX_BYTES, MAX_TOKENS, as_int, shown

if TYPE_CHECKING:
    from kvrules.config import EngineConfig

S = TypeVar("S", bound="KVCacheSpec")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``."""
    return cdiv(value, multiple) * multiple


class KVQuantMode(enum.Enum):
    """How KV values are quantised (vLLM's member names)."""

    NONE = "none"
    FP8_PER_TENSOR = "fp8_per_tensor"
    INT8_PER_TOKEN_HEAD = "int8_per_token_head"
    FP8_PER_TOKEN_HEAD = "fp8_per_token_head"
    INT4_PER_TOKEN_HEAD = "int4_per_token_head"
    NVFP4 = "nvfp4"

    @property
    def is_per_token_head(self) -> bool:
        """True for modes that store one fp32 scale per token and head (for K and for V)."""
        return self in (
            KVQuantMode.INT8_PER_TOKEN_HEAD,
            KVQuantMode.FP8_PER_TOKEN_HEAD,
            KVQuantMode.INT4_PER_TOKEN_HEAD,
        )

    @classmethod
    def parse(cls, value: Any, *, field: str = "kv_quant_mode") -> KVQuantMode:
        """Accept a member, its name or its value, case-insensitively."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            text = value.strip()
            for member in cls:
                if text.upper() == member.name or text.lower() == member.value:
                    return member
        raise SpecError(
            f"{field}={shown(value)} is not a KV quant mode; use one of {', '.join(m.name for m in cls)}"
        )

    @classmethod
    def from_cache_dtype(cls, kv_cache_dtype: str) -> KVQuantMode:
        """vLLM's rule from ``--kv-cache-dtype`` to a quant mode."""
        text = kv_cache_dtype.lower()
        direct = {
            "int4_per_token_head": cls.INT4_PER_TOKEN_HEAD,
            "int8_per_token_head": cls.INT8_PER_TOKEN_HEAD,
            "fp8_per_token_head": cls.FP8_PER_TOKEN_HEAD,
            "nvfp4": cls.NVFP4,
        }
        if text in direct:
            return direct[text]
        if text.startswith("fp8"):
            return cls.FP8_PER_TENSOR
        return cls.NONE


@overload
def check_int(
    field: str,
    value: Any,
    *,
    minimum: int | None = 1,
    maximum: int = MAX_TOKENS,
    optional: Literal[False] = False,
) -> int: ...


@overload
def check_int(
    field: str, value: Any, *, minimum: int | None = 1, maximum: int = MAX_TOKENS, optional: bool
) -> int | None: ...


def check_int(
    field: str,
    value: Any,
    *,
    minimum: int | None = 1,
    maximum: int = MAX_TOKENS,
    optional: bool = False,
) -> int | None:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (:func:`kvrules.values.as_int`: numpy and
    torch integers become ``int``; floats, bools and strings are refused), or ``None`` when
    ``optional`` and absent.

    :raises SpecError: ``"{field}={value} must be ..."``, naming the bound that is broken.
    """
    if value is None and optional:
        return None
    try:
        number = as_int(value, field)
    except SpecError:
        raise SpecError(f"{field}={shown(value)} must be an integer (not a float, bool or string)") from None
    if minimum is not None and number < minimum:
        raise SpecError(f"{field}={number} must be >= {minimum}")
    if number > maximum:
        raise SpecError(
            f"{field}={shown(number)} must be <= {maximum}; no real layer comes near that, and the "
            "sizes it leads to could not be held by a tensor"
        )
    return number


def largest_divisor_at_most(number: int, limit: int) -> int:
    """The largest divisor of ``number`` (>= 1) that is at most ``limit`` (>= 1).

    A divisor ``d > isqrt(number)`` is ``number // i`` for a divisor ``i <= isqrt(number)``, and
    ``d <= limit`` exactly when ``i >= ceil(number / limit)``: the smallest such ``i`` gives the
    answer; failing that the answer is the largest small divisor ``<= limit``. At most
    ``2 * isqrt(number)`` remainders, never work proportional to ``number`` itself.
    """
    if limit >= number:
        return number
    root = math.isqrt(number)
    for small in range(-(-number // limit), root + 1):
        if number % small == 0:
            return number // small
    return next(d for d in range(min(limit, root), 0, -1) if number % d == 0)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_VALUES: dict[type, attrgetter[Any]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """Dataclass field names of a spec class, cached."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = tuple(f.name for f in fields(cls))
        _FIELD_NAMES[cls] = names
    return names


def _values_getter(cls: type) -> attrgetter[Any]:
    """An ``attrgetter`` of every field of a spec class (a C-level read of all of them), cached."""
    getter = _VALUES.get(cls)
    if getter is None:
        getter = _VALUES[cls] = attrgetter(*field_names(cls))
    return getter


@dataclass(frozen=True, eq=False)
class KVCacheSpec:
    """Base of every spec. Subclasses are ``@dataclass(frozen=True, eq=False)``."""

    type_name: ClassVar[str] = ""
    page_scales_with_block_size: ClassVar[bool] = True
    #: fields that :meth:`merge` may combine although they differ (at most one non-None value)
    mergeable_fields: ClassVar[tuple[str, ...]] = ()
    #: True for a group spec whose layers keep specs of their own (one tensor per layer) rather
    #: than sharing one page size in a pool (:class:`~kvrules.UniformTypeKVCacheSpecs`)
    has_members: ClassVar[bool] = False
    #: True for a spec kept out of page unification and re-sized to the common page afterwards
    #: with :meth:`aligned_to` (vLLM 0.28's hidden-state cache)
    sized_after_unification: ClassVar[bool] = False
    #: what one page holds, for code that reads pages (view layouts, converters): ``"kv"`` K and V
    #: per token and head, ``"latent"`` one latent vector per stored token (MLA), both with the
    #: fields of :class:`~kvrules.AttentionSpec`; ``"state"`` recurrent state tensors back to back
    #: (the ``shapes``, ``dtypes`` and ``state_bytes`` of :class:`~kvrules.MambaSpec`); ``""``
    #: anything else (group specs, a third-party type that does not say)
    page_format: ClassVar[str] = ""
    #: True for full (causal) attention, MLA included: every token of a request stays cached
    is_full_attention: ClassVar[bool] = False

    block_size: int

    def __post_init__(self) -> None:
        self._set_int("block_size", minimum=1, maximum=MAX_TOKENS)

    def set_int_field(
        self, name: str, *, minimum: int | None = 1, maximum: int = MAX_TOKENS, optional: bool = False
    ) -> None:
        """Check the integer field ``name`` (:func:`check_int`, named ``Class.name``) and store it
        as a plain ``int``, so specs built from ``16`` and ``numpy.int64(16)`` are equal. For a
        spec type's ``__post_init__`` (the built-in types and plugins' alike).

        :raises SpecError: not an integer (a bool, a float, a string), or out of range."""
        value = check_int(
            f"{type(self).__name__}.{name}",
            getattr(self, name),
            minimum=minimum,
            maximum=maximum,
            optional=optional,
        )
        object.__setattr__(self, name, value)

    def check_page_bytes(self) -> None:
        """Raise :class:`SpecError` naming this spec's fields when its page (padded or not) is
        more than :data:`~kvrules.values.MAX_BYTES`; every pool size derived from it is then
        bounded by the number of blocks. For the end of a spec type's ``__post_init__``."""
        page = max(self.page_size_bytes, self.unpadded_page_size_bytes)
        if page > MAX_BYTES:
            raise SpecError(
                f"{type(self).__name__}({self._fields_text()}) has a page of {shown(page)} bytes, more "
                f"than {MAX_BYTES} (the largest tensor torch can hold); lower block_size or the "
                "layer's dimensions"
            )

    #: the names the built-in types use (kept for them; plugins use the public ones)
    _set_int = set_int_field
    _check_page_bytes = check_page_bytes

    def _fields_text(self) -> str:
        """``name=value`` for each field that is set, for messages (mappings left out)."""
        parts = []
        for name in field_names(type(self)):
            value = getattr(self, name)
            if value is None or isinstance(value, Mapping):
                continue
            parts.append(f"{name}={value.name if isinstance(value, enum.Enum) else shown(value)}")
        return ", ".join(parts)

    # -- identity -----------------------------------------------------------------------
    def field_values(self) -> tuple[Any, ...]:
        """All field values in declaration order."""
        values = _values_getter(type(self))(self)
        return values if len(field_names(type(self))) > 1 else (values,)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        values = _VALUES.get(type(self)) or _values_getter(type(self))  # one C-level read per side
        return bool(values(self) == values(other))

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((type(self), self.field_values()))
            self.__dict__["_hash"] = cached
        return int(cached)

    def evolve(self: S, **changes: Any) -> S:
        """A copy with ``changes`` applied (validated like a new spec)."""
        return cast(S, replace(cast(Any, self), **changes))

    # -- sizes ----------------------------------------------------------------------------
    @property
    def real_page_size_bytes(self) -> int:
        """Bytes of real state in one page (no padding)."""
        raise NotImplementedError

    @property
    def unpadded_page_size_bytes(self) -> int:
        """Bytes one page needs before any padding (real state plus quantisation scales)."""
        return self.real_page_size_bytes

    def page_shape(self) -> tuple[int, int, int]:
        """The unpadded page as vLLM 0.33's logical ``(heads, states, content bytes)`` (the
        ``H, N, C`` of its ``[L, B, H, N, C]`` KV-cache axes, whose product is
        :attr:`unpadded_page_size_bytes`): one head and one state by default; attention specs
        answer their heads and stored tokens. A KV-cache layout that puts heads outside blocks
        (``LHBNC``) strides blocks by a head's share of the page."""
        return (1, 1, self.unpadded_page_size_bytes)

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block of this layer takes in the pool, padding included."""
        padded = getattr(self, "page_size_padded", None)
        return int(padded) if padded is not None else self.unpadded_page_size_bytes

    @property
    def padding_bytes(self) -> int:
        """Bytes of padding in each page."""
        return self.page_size_bytes - self.unpadded_page_size_bytes

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        """Bytes one request of ``config.max_model_len`` tokens needs for this layer."""
        raise NotImplementedError

    # -- grouping -------------------------------------------------------------------------
    def uniform_type_key(self) -> Hashable | None:
        """The "same token slots" key; ``None`` means this spec never joins a uniform-type group."""
        return None

    @classmethod
    def merge(cls: type[S], specs: Sequence[S]) -> S:
        """One spec standing for all ``specs``; raises ``ValueError`` when they cannot share a group.

        The default requires equal specs except for :attr:`mergeable_fields`, each of which may
        hold at most one distinct non-``None`` value.
        """
        first = specs[0]
        merged: dict[str, Any] = {}
        for other in specs:
            if type(other) is not type(first):
                raise ValueError(f"{type(other).__name__} cannot merge with {type(first).__name__}")
        for name in field_names(type(first)):
            values = {getattr(s, name) for s in specs}
            if name in cls.mergeable_fields:
                present = {v for v in values if v is not None}
                if len(present) > 1:
                    raise ValueError(f"{name} differs: {sorted(present)}")
                if present:
                    merged[name] = present.pop()
            elif len(values) > 1:
                raise ValueError(f"{name} differs")
        if not merged:
            return first
        return first.evolve(**merged)

    # -- as a group's spec ---------------------------------------------------------------
    def members(self, layer_names: Iterable[str]) -> dict[str, KVCacheSpec]:
        """Each of ``layer_names``' own spec when this spec describes their group (here: itself)."""
        return dict.fromkeys(layer_names, self)

    @property
    def member_specs(self) -> Mapping[str, KVCacheSpec]:
        """Every member's own spec by layer name, for a group spec with members (else empty)."""
        return {}

    def restricted_to(self, layer_names: Sequence[str]) -> KVCacheSpec:
        """This group spec for a group holding only ``layer_names`` (a worker's share)."""
        return self

    def aligned_to(self, common_page: int, group_block_size: int) -> KVCacheSpec:
        """This spec re-sized to follow the other groups' ``common_page`` and block size (only
        specs with :attr:`sized_after_unification` implement it)."""
        raise NotImplementedError(f"{type(self).__name__} is not sized after unification")

    def blocks_per_request(self, config: EngineConfig) -> int:
        """Blocks of its group one request of ``config.max_model_len`` tokens needs."""
        return cdiv(self.max_memory_usage_bytes(config), self.page_size_bytes)

    @property
    def is_attention(self) -> bool:
        """True for an attention layer (:attr:`page_format` ``"kv"`` or ``"latent"``): the spec has
        the fields of :class:`~kvrules.AttentionSpec` (heads, head sizes, dtype, quant mode)."""
        return self.page_format in ("kv", "latent")

    def full_attention_form(self, block_size: int | None = None) -> KVCacheSpec | None:
        """For a local-attention layer (sliding window, chunked local): the spec it has when stored
        as full attention, at ``block_size`` (default: its own); ``None`` for every other spec.

        Used where local layers must share full attention's token slots (the hybrid KV-cache
        manager disabled, vLLM's full-allocation fallback); the window or chunk is kept as a hint.
        """
        return None

    @property
    def label(self) -> str:
        """A short name for reports: the type name (uniform-type groups list their members' types)."""
        return self.type_name

    def unification_hint(self, target: int) -> str:
        """What would let page unification bring this layer's page to ``target`` bytes."""
        return (
            f"choose block sizes so that the largest page ({target} bytes) is a whole multiple of this "
            f"layer's page ({self.page_size_bytes} bytes), or add a strategy plugin that handles "
            f"{shown(self.type_name)} layers"
        )

    # -- presentation ---------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The small dict used in decision records (``before`` / ``after``)."""
        return {
            "spec_type": self.type_name,
            "block_size": self.block_size,
            "page_size_bytes": self.page_size_bytes,
            "page_size_padded": getattr(self, "page_size_padded", None),
        }

    def to_dict(self) -> dict[str, Any]:
        """Model-file form: ``type`` plus every field that differs from its default."""
        return spec_to_dict(self)


def distinct_specs(specs: Iterable[KVCacheSpec]) -> list[KVCacheSpec]:
    """One of each spec object in ``specs`` (by identity, in first-seen order), without a Python
    call per layer: models share spec objects between layers, so a million layers give a few.

    While the objects found hold many layers, each costs one C-level pass keeping the layers
    that are not it (no object made per layer); at most :data:`_FEW_PASSES` such passes, and
    once one removes less than a sixteenth of the layers left, the rest is gathered in one pass
    by identity."""
    rest = list(specs)
    found: list[KVCacheSpec] = []
    while rest and len(found) < _FEW_PASSES:
        first = rest[0]
        found.append(first)
        left = len(rest)
        rest = list(filter(partial(is_not, first), rest))
        if (left - len(rest)) * 16 < left:
            break
    if rest:
        found += dict(zip(map(id, rest), rest, strict=True)).values()
    return found


#: distinct spec objects :func:`distinct_specs` finds by one filtering pass each
_FEW_PASSES = 8


def merged_spec(specs: Mapping[str, KVCacheSpec]) -> KVCacheSpec | None:
    """The one spec standing for all of ``specs`` (:meth:`KVCacheSpec.merge` of the first
    layer's type, given each spec object once, in first-seen order), or ``None`` when there are
    none or they do not merge."""
    values = distinct_specs(specs.values())
    if not values:
        return None
    try:
        return type(values[0]).merge(values)
    except ValueError:
        return None


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
        aligned_page = getattr(spec, "aligned_page_size", None)
        if aligned_page is None:  # a plugin's type: rebuild it to learn what alignment alone gives
            return bool(spec.evolve(page_size_padded=None).page_size_bytes == spec.page_size_bytes)
        aligned = aligned_page()
        return bool((spec.unpadded_page_size_bytes if aligned is None else aligned) == spec.page_size_bytes)
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
