"""What the reports say about each KV-cache group, computed once for all of them.

:func:`group_facts` turns a plan's groups into :class:`GroupFacts` rows; the plan table
(:mod:`kvrules.report.tables`), the summary (:mod:`kvrules.report.summary`) and the layout
picture (:mod:`kvrules.report.picture`) read these rows instead of asking the specs again, so
the three reports cannot disagree about a group's kind, role or padding.

Every figure comes from the spec's own answers (``label``, ``padding_bytes``,
``blocks_per_request``, ``members``): a report never tests for a concrete spec class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvrules.config import EngineConfig
from kvrules.plan import KVCacheGroup, Plan


@dataclass(frozen=True)
class LayerFacts:
    """One layer of a group as the picture draws it, from the layer's own spec.

    :ivar name: the layer name.
    :ivar kind: the layer spec's type name (a member's own type inside a uniform-type group).
    :ivar draft: whether the layer belongs to the draft model (``EngineConfig.is_draft_layer``).
    :ivar page_bytes: bytes the layer's page takes in one block, padding included.
    :ivar padding_bytes: bytes of padding in that page (quantisation scales are real state).
    """

    name: str
    kind: str
    draft: bool
    page_bytes: int
    padding_bytes: int

    @property
    def real_bytes(self) -> int:
        """Bytes of the page that hold state (KV values and any quantisation scales)."""
        return self.page_bytes - self.padding_bytes


@dataclass(frozen=True)
class GroupFacts:
    """One KV-cache group as the reports show it.

    :ivar index: the group's position in the plan (``#`` in the plan table).
    :ivar layer_names: the group's layers, in group order.
    :ivar kind: ``spec.label``: the type name, ``uniform_type[a,b]`` for a uniform-type group.
    :ivar role: ``target``, ``draft`` or ``mixed`` (from ``EngineConfig.draft_layer_prefixes``).
    :ivar block_size: tokens per block of the group.
    :ivar page_bytes: bytes one block of the group takes, padding included.
    :ivar padding_bytes: bytes of padding in one block (``spec.padding_bytes``).
    :ivar blocks_per_request: blocks one request of ``max_model_len`` tokens needs.
    :ivar layers: each layer's own facts, in group order.
    """

    index: int
    layer_names: tuple[str, ...]
    kind: str
    role: str
    block_size: int
    page_bytes: int
    padding_bytes: int
    blocks_per_request: int
    layers: tuple[LayerFacts, ...]

    @property
    def layer_count(self) -> int:
        """How many layers the group holds."""
        return len(self.layer_names)

    def first_layers(self, limit: int = 2) -> str:
        """The first ``limit`` layer names, then ``... (+n)`` for the rest."""
        return first_names(self.layer_names, limit)


def first_names(names: Sequence[str], limit: int = 3) -> str:
    """``a, b, ... (+n)``: the first ``limit`` of ``names`` and how many more there are."""
    shown = ", ".join(names[:limit])
    return shown + (f", ... (+{len(names) - limit})" if len(names) > limit else "")


def role_of(drafts: Sequence[bool]) -> str:
    """``draft`` when every layer is a draft layer, ``mixed`` when some are, else ``target``."""
    if drafts and all(drafts):
        return "draft"
    return "mixed" if any(drafts) else "target"


def facts_of(group: KVCacheGroup, index: int, config: EngineConfig) -> GroupFacts:
    """The facts of one group, the ``index``-th of its plan."""
    spec = group.spec
    layers = tuple(
        LayerFacts(
            name=name,
            kind=own.type_name,
            draft=config.is_draft_layer(name),
            page_bytes=own.page_size_bytes,
            padding_bytes=own.padding_bytes,
        )
        for name, own in spec.members(group.layer_names).items()
    )
    return GroupFacts(
        index=index,
        layer_names=tuple(group.layer_names),
        kind=spec.label,
        role=role_of([layer.draft for layer in layers]),
        block_size=spec.block_size,
        page_bytes=spec.page_size_bytes,
        padding_bytes=spec.padding_bytes,
        blocks_per_request=spec.blocks_per_request(config),
        layers=layers,
    )


def group_facts(plan: Plan, worker: int | None = None) -> tuple[GroupFacts, ...]:
    """One :class:`GroupFacts` per group of ``plan``, in plan order.

    With ``worker``, the groups are that worker's share (the same groups, restricted to its
    layers; ``index`` still numbers them as in the plan).
    """
    groups = plan.groups if worker is None else plan.workers[worker].groups
    return tuple(facts_of(group, index, plan.config) for index, group in enumerate(groups))
