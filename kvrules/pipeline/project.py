"""Stage ``project``: the global groups restricted to each worker's layers (same groups, same
order; a group may become empty on a worker), as vLLM 0.28 does for pipeline stages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvrules.plan import KVCacheGroup, project_group
from kvrules.specs.base import KVCacheSpec


def project(
    groups: Sequence[KVCacheGroup], workers: Sequence[Mapping[str, KVCacheSpec]]
) -> list[tuple[KVCacheGroup, ...]]:
    """For each worker, every group restricted to the layers that worker holds (a lone worker
    holds every layer of the model: its groups are the global ones, with no per-layer lookup)."""
    if len(workers) == 1:
        return [tuple(groups)]
    return [tuple(project_group(g, specs) for g in groups) for specs in workers]
