"""The plan: what an engine needs to build its KV cache, and its versioned JSON form."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from kvrules.config import EngineConfig
from kvrules.decisions import Decision
from kvrules.errors import ModelFileError
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.io import spec_from_dict

SCHEMA = "kvrules.plan/v1"


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :meth:`Plan.to_dict` output, shipped with the package."""
    text = (resources.files("kvrules") / "schemas" / "plan-v1.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


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


@dataclass(frozen=True)
class WorkerWaste:
    """One worker's bytes for one request of ``max_model_len`` (see the module docstring)."""

    block_bytes: int
    allocated_bytes: int
    real_bytes: int
    page_padding_bytes: int
    slot_padding_bytes: int

    @property
    def efficiency(self) -> float:
        """``real / allocated`` (1.0 when nothing is allocated)."""
        return 1.0 if self.allocated_bytes == 0 else self.real_bytes / self.allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {**asdict(self), "efficiency": self.efficiency}


@dataclass(frozen=True)
class WasteReport:
    """Padding and efficiency of a plan, summed over workers.

    :ivar padding_slots: empty tensor slots over the groups (a shared pool's ``group_size -
        len(group)`` summed over groups).
    :ivar ideal_max_concurrency: requests the same memory would hold with no padding.
    :ivar ideal_capacity_tokens: ``floor(ideal_max_concurrency * max_model_len)``.
    """

    workers: tuple[WorkerWaste, ...]
    padding_slots: int
    ideal_max_concurrency: float
    ideal_capacity_tokens: int

    @property
    def allocated_bytes(self) -> int:
        """Bytes one request reserves, all workers."""
        return sum(w.allocated_bytes for w in self.workers)

    @property
    def real_bytes(self) -> int:
        """Bytes of real state one request holds, all workers."""
        return sum(w.real_bytes for w in self.workers)

    @property
    def page_padding_bytes(self) -> int:
        """Page padding one request reserves, all workers."""
        return sum(w.page_padding_bytes for w in self.workers)

    @property
    def slot_padding_bytes(self) -> int:
        """Slot padding one request reserves, all workers."""
        return sum(w.slot_padding_bytes for w in self.workers)

    @property
    def efficiency(self) -> float:
        """``real / allocated`` over all workers."""
        return 1.0 if self.allocated_bytes == 0 else self.real_bytes / self.allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "allocated_bytes": self.allocated_bytes,
            "real_bytes": self.real_bytes,
            "page_padding_bytes": self.page_padding_bytes,
            "slot_padding_bytes": self.slot_padding_bytes,
            "efficiency": self.efficiency,
            "padding_slots": self.padding_slots,
            "ideal_max_concurrency": None
            if math.isinf(self.ideal_max_concurrency)
            else self.ideal_max_concurrency,
            "ideal_capacity_tokens": self.ideal_capacity_tokens,
            "workers": [w.to_dict() for w in self.workers],
        }


@dataclass(frozen=True)
class UnifyResult:
    """Result of :meth:`Planner.unify`: the unified specs and the decisions taken."""

    specs: Mapping[str, KVCacheSpec]
    decisions: tuple[Decision, ...]


def project_group(group: KVCacheGroup, layers: Mapping[str, Any] | set[str]) -> KVCacheGroup:
    """``group`` restricted to ``layers`` (a uniform-type spec keeps only those members; the
    EAGLE flag stays only when some layer remains, as in vLLM 0.28)."""
    names = tuple(n for n in group.layer_names if n in layers)
    return KVCacheGroup(names, group.spec.restricted_to(names), group.is_eagle_group and bool(names))


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's (pipeline stage's) share of the plan.

    :ivar num_blocks: the agreed number of blocks (same on every worker).
    :ivar tensors: the worker's buffers, sized for ``num_blocks``.
    :ivar groups: the global groups restricted to this worker's layers (same order).
    :ivar layout: the name of the tensor layout used.
    :ivar available_memory: bytes planned against (after ``num_gpu_blocks_override``).
    :ivar own_num_blocks: blocks this worker's memory alone would give.
    """

    num_blocks: int
    tensors: tuple[KVCacheTensor, ...]
    groups: tuple[KVCacheGroup, ...] = ()
    layout: str = ""
    available_memory: int = 0
    own_num_blocks: int = 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes of all buffers, a packed backing allocation counted once."""
        packed = {t.size for t in self.tensors if t.block_stride > 0}
        plain = sum(t.size for t in self.tensors if t.block_stride == 0)
        return plain + (max(packed) if packed else 0)

    def layer_names(self) -> tuple[str, ...]:
        """This worker's layers, group by group."""
        return tuple(n for g in self.groups for n in g.layer_names)


@dataclass(frozen=True)
class Plan:
    """A complete KV-cache plan (architecture §3). Build one with :meth:`kvrules.Planner.plan`."""

    groups: tuple[KVCacheGroup, ...]
    workers: tuple[WorkerPlan, ...]
    num_blocks: int
    specs: Mapping[str, KVCacheSpec]
    decisions: tuple[Decision, ...]
    max_concurrency: float
    capacity_tokens: int
    max_model_len: int
    config: EngineConfig
    strategy_set: str = "default"
    rules: tuple[str, ...] = ()
    route: str = ""
    waste: WasteReport | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The plan in schema ``kvrules.plan/v1`` (plain JSON values)."""
        return {
            "schema": SCHEMA,
            "strategy_set": self.strategy_set,
            "rules": list(self.rules),
            "route": self.route,
            "max_model_len": self.max_model_len,
            "num_blocks": self.num_blocks,
            "max_concurrency": None if math.isinf(self.max_concurrency) else self.max_concurrency,
            "capacity_tokens": self.capacity_tokens,
            "config": self.config.to_dict(),
            "specs": {name: spec.to_dict() for name, spec in self.specs.items()},
            "groups": [g.to_dict() for g in self.groups],
            "workers": [
                {
                    "num_blocks": w.num_blocks,
                    "own_num_blocks": w.own_num_blocks,
                    "layout": w.layout,
                    "available_memory": w.available_memory,
                    "allocated_bytes": w.allocated_bytes,
                    "groups": [list(g.layer_names) for g in w.groups],
                    "tensors": [t.to_dict() for t in w.tensors],
                }
                for w in self.workers
            ],
            "waste": self.waste.to_dict() if self.waste is not None else None,
            "decisions": [d.to_dict() for d in self.decisions],
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
    ) -> Plan:
        """Rebuild a plan from :meth:`to_dict` output."""
        if data.get("schema") != SCHEMA:
            raise ModelFileError(f"not a kvrules plan: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        specs = {n: spec_from_dict(s, layer=n, spec_types=spec_types) for n, s in data["specs"].items()}
        groups = tuple(
            KVCacheGroup(
                tuple(g["layer_names"]),
                spec_from_dict(g["spec"], spec_types=spec_types),
                bool(g.get("is_eagle_group", False)),
            )
            for g in data["groups"]
        )
        workers = []
        for w in data["workers"]:
            wgroups = tuple(
                project_group(g, set(names)) for g, names in zip(groups, w["groups"], strict=True)
            )
            workers.append(
                WorkerPlan(
                    num_blocks=int(w["num_blocks"]),
                    tensors=tuple(KVCacheTensor.from_dict(t) for t in w["tensors"]),
                    groups=wgroups,
                    layout=w.get("layout", ""),
                    available_memory=int(w.get("available_memory", 0)),
                    own_num_blocks=int(w.get("own_num_blocks", 0)),
                )
            )
        mc = data["max_concurrency"]
        waste = None
        if data.get("waste") is not None:
            w = data["waste"]
            ideal = w["ideal_max_concurrency"]
            waste = WasteReport(
                tuple(
                    WorkerWaste(
                        int(x["block_bytes"]),
                        int(x["allocated_bytes"]),
                        int(x["real_bytes"]),
                        int(x["page_padding_bytes"]),
                        int(x["slot_padding_bytes"]),
                    )
                    for x in w["workers"]
                ),
                int(w["padding_slots"]),
                float("inf") if ideal is None else float(ideal),
                int(w["ideal_capacity_tokens"]),
            )
        return cls(
            groups=groups,
            workers=tuple(workers),
            num_blocks=int(data["num_blocks"]),
            specs=specs,
            decisions=tuple(Decision.from_dict(d) for d in data.get("decisions", ())),
            max_concurrency=float("inf") if mc is None else float(mc),
            capacity_tokens=int(data["capacity_tokens"]),
            max_model_len=int(data["max_model_len"]),
            config=EngineConfig.from_dict(data["config"]),
            strategy_set=data.get("strategy_set", ""),
            rules=tuple(data.get("rules", ())),
            route=data.get("route", ""),
            waste=waste,
            extra=dict(data.get("extra", {})),
        )
