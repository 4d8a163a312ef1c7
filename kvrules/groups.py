"""The layout primitives a plan is made of: groups and tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvrules.specs.base import KVCacheSpec


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """Layers that share one block table; ``spec`` describes one layer of the group.

    For a uniform-type group, ``spec`` is a :class:`~kvrules.UniformTypeKVCacheSpecs` whose
    members are the layers' own specs.
    """

    layer_names: tuple[str, ...]
    spec: KVCacheSpec
    is_eagle_group: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "layer_names": list(self.layer_names),
            "spec": self.spec.to_dict(),
            "is_eagle_group": self.is_eagle_group,
        }


@dataclass(frozen=True, slots=True)
class KVCacheTensor:
    """One raw byte buffer of a worker.

    ``shared_by`` lists the layers whose pages live in it. With ``block_stride > 0`` (packed
    layout) every tensor of the worker aliases ONE backing allocation of ``size`` bytes, and the
    page of a layer in ``shared_by`` for block ``b`` starts at ``offset + b * block_stride``.
    """

    size: int
    shared_by: tuple[str, ...]
    offset: int = 0
    block_stride: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "size": self.size,
            "shared_by": list(self.shared_by),
            "offset": self.offset,
            "block_stride": self.block_stride,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KVCacheTensor:
        """Inverse of :meth:`to_dict`."""
        return cls(
            size=int(data["size"]),
            shared_by=tuple(data["shared_by"]),
            offset=int(data.get("offset", 0)),
            block_stride=int(data.get("block_stride", 0)),
        )


def group_page_size(group: KVCacheGroup) -> int:
    """Bytes one block of the group takes for one of its layers (sum of members if uniform-type)."""
    return group.spec.page_size_bytes
