"""A group spec holding several layers of one type but different page sizes."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from kvrules.errors import SpecError
from kvrules.specs.base import KVCacheSpec, cdiv
from kvrules.values import as_name, shown

if TYPE_CHECKING:
    from kvrules.config import EngineConfig


@dataclass(frozen=True, eq=False)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    """Layers that share one block table although their pages differ (one tensor per layer).

    ``kv_cache_specs`` maps layer name to spec, in layer order; one block of the group is one
    page of every member, so ``page_size_bytes`` is the sum of the member pages.
    """

    type_name: ClassVar[str] = "uniform_type"
    #: the page is the sum of the members' pages; the group's block_size does not resize them
    page_scales_with_block_size: ClassVar[bool] = False

    has_members: ClassVar[bool] = True

    kv_cache_specs: Mapping[str, KVCacheSpec]

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.kv_cache_specs, Mapping) or not self.kv_cache_specs:
            raise SpecError("UniformTypeKVCacheSpecs.kv_cache_specs must be a non-empty mapping")
        for name, spec in self.kv_cache_specs.items():
            as_name(name, "UniformTypeKVCacheSpecs.kv_cache_specs member name")
            if not isinstance(spec, KVCacheSpec):
                raise SpecError(f"UniformTypeKVCacheSpecs member {name!r} is not a spec: {shown(spec)}")
        object.__setattr__(self, "kv_cache_specs", MappingProxyType(dict(self.kv_cache_specs)))
        self._check_page_bytes()

    def field_values(self) -> tuple[Any, ...]:
        return (self.block_size, tuple(self.kv_cache_specs.items()))

    @classmethod
    def merge(cls, specs: Any) -> Any:
        """Equal group specs merge into the first; different ones do not (``ValueError``)."""
        first = specs[0]
        if any(spec != first for spec in specs):
            raise ValueError("uniform-type group specs differ")
        return first

    def __reduce__(self) -> tuple[Any, ...]:
        # a mappingproxy cannot be pickled; rebuild from a plain dict (plans cross processes)
        return (type(self), (self.block_size, dict(self.kv_cache_specs)))

    @cached_property
    def real_page_size_bytes(self) -> int:  # type: ignore[override]
        return sum(s.unpadded_page_size_bytes for s in self.kv_cache_specs.values())

    @cached_property
    def page_size_bytes(self) -> int:  # type: ignore[override]
        return sum(s.page_size_bytes for s in self.kv_cache_specs.values())

    def uniform_type_key(self) -> Hashable | None:
        return None

    def blocks_per_request(self, config: EngineConfig) -> int:
        """Blocks one request needs: the most pages any member needs."""
        return max(
            cdiv(s.max_memory_usage_bytes(config), s.page_size_bytes) for s in self.kv_cache_specs.values()
        )

    def members(self, layer_names: Iterable[str]) -> dict[str, KVCacheSpec]:
        """The members' own specs, for ``layer_names`` (each must be a member)."""
        specs = self.kv_cache_specs
        return {name: specs[name] for name in layer_names}

    @property
    def member_specs(self) -> Mapping[str, KVCacheSpec]:
        """The members' specs (``kv_cache_specs``)."""
        return self.kv_cache_specs

    def restricted_to(self, layer_names: Sequence[str]) -> KVCacheSpec:
        """Only the members in ``layer_names`` (itself when that is every member, or none)."""
        if not layer_names or len(layer_names) == len(self.kv_cache_specs):
            return self
        return UniformTypeKVCacheSpecs(self.block_size, self.members(layer_names))

    @property
    def label(self) -> str:
        """``uniform_type[a,b]``: the members' type names, sorted."""
        kinds = sorted({m.type_name for m in self.kv_cache_specs.values()})
        return f"uniform_type[{','.join(kinds)}]"

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return self.blocks_per_request(config) * self.page_size_bytes

    def page_sizes(self) -> tuple[int, ...]:
        """Distinct member page sizes, in order of first appearance."""
        return tuple(dict.fromkeys(s.page_size_bytes for s in self.kv_cache_specs.values()))

    def num_layer_tuples(self) -> int:
        """How many members have the most frequent page size."""
        counts: dict[int, int] = {}
        for s in self.kv_cache_specs.values():
            counts[s.page_size_bytes] = counts.get(s.page_size_bytes, 0) + 1
        return max(counts.values())

    @classmethod
    def is_uniform_type(cls, specs: Mapping[str, KVCacheSpec]) -> bool:
        """True when all ``specs`` have one block size and one non-None uniform-type key."""
        values = iter(specs.values())
        first = next(values, None)
        if first is None:
            return False
        key = first.uniform_type_key()
        if key is None:
            return False
        block = first.block_size
        return all(s.block_size == block and s.uniform_type_key() == key for s in values)
