"""Helpers for rules that compare groupings: vLLM's bucketing and group size, and what a grouping
costs one request in a shared pool.

vLLM 0.28 groups a model's (unified) layers in two steps. Layers are bucketed by spec, buckets
whose specs merge joined (:func:`buckets_by_spec`); then one group size is chosen for every
bucket (:func:`vllm_group_size`) and each bucket is cut into ``cdiv(len, size)`` interleaved
groups (:func:`split_bucket`, :func:`split_buckets`). :func:`vllm_grouping` is the whole rule, as
the built-in ``vllm-group-size`` grouper applies it.

The cost model. In a shared pool (vLLM's general layout), worker ``w``'s pool is ``width_w``
slots wide, the most layers any group has on that worker, and one block there costs
``width_w x page`` bytes. One request of ``max_model_len`` holds ``B_g`` blocks of each group
``g``, so on worker ``w`` it reserves ``width_w x page x sum(B_g)`` bytes. The agreed number of
blocks is the smallest over workers, so max concurrency is
``min_w(memory_w / (width_w x page)) / sum(B_g)``; the worker reaching that minimum binds. With
``num_gpu_blocks_override = N`` it is ``N / sum(B_g)``. Of the binding worker's bytes,
``padded_bytes = page x sum((width - layers of g there) x B_g)`` hold nothing. With one worker,
more capacity is exactly fewer padded bytes: what :func:`search` looks for.

A grouper that wants to beat vLLM's rule (the built-in ``beyond-vllm`` rules do) costs vLLM's
grouping and its own with :func:`grouping_cost` on the plan's :class:`Pool` and acts only when
:func:`acceptable` says so. Nothing here records a decision or reads the active rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain, compress, repeat
from operator import and_, is_
from typing import TYPE_CHECKING, Any

from kvrules.config import EngineConfig
from kvrules.errors import GroupingError
from kvrules.plan import KVCacheGroup
from kvrules.specs.asked import blocks_of
from kvrules.specs.base import KVCacheSpec, cdiv, distinct_specs

if TYPE_CHECKING:
    from kvrules.plugin.context import PlanContext

#: one bucket of layers: the spec standing for them and their names, in layer order
Bucket = tuple[KVCacheSpec, list[str]]


# -- vLLM's bucketing and group size ------------------------------------------------------------
def buckets_by_spec(specs: Mapping[str, KVCacheSpec]) -> list[Bucket]:
    """Layers bucketed by identical spec, then buckets whose specs merge joined (layer order kept).

    A bucket's spec is the merge of its members' specs (:meth:`KVCacheSpec.merge`); buckets come
    in the order of their first layer's spec.
    """
    return layer_buckets(specs.keys(), specs.values())


def layer_buckets(names: Collection[str], specs: Collection[KVCacheSpec]) -> list[Bucket]:
    """:func:`buckets_by_spec` of the layers ``names`` whose specs are ``specs`` (in the same
    order), for a caller holding a subset of a model's layers as two sequences rather than a
    new mapping."""
    return _buckets(names, specs)


def buckets_where(specs: Mapping[str, KVCacheSpec], mask: Sequence[bool]) -> list[Bucket]:
    """:func:`buckets_by_spec` of the layers of ``specs`` whose ``mask`` entry (in layer order)
    is true, without listing those layers first: with a few spec objects each bucket is one
    C-level pass over the table (at a million layers, every list of names is a pass that looks
    at each name, and the garbage collector walks it again)."""
    return _buckets(specs.keys(), list(specs.values()), mask)


def _buckets(
    names: Collection[str], specs: Collection[KVCacheSpec], mask: Sequence[bool] | None = None
) -> list[Bucket]:
    """:func:`layer_buckets` of the layers whose ``mask`` entry is true (all, without one)."""
    exact = _by_equal_spec(names, specs, mask)
    lists = list(exact.values())
    order: dict[str, int] = {}
    buckets: list[Bucket] = []
    for spec, members in _joined(list(exact)):
        if len(members) == 1:
            buckets.append((spec, lists[members[0]]))
            continue
        if not order:  # needed only when buckets join, which few models do
            order = {name: i for i, name in enumerate(names)}
        layers = chain.from_iterable(map(lists.__getitem__, members))
        buckets.append((spec, sorted(layers, key=order.__getitem__)))
    return buckets


def bucket_lengths(specs: Mapping[str, KVCacheSpec]) -> list[tuple[KVCacheSpec, int]]:
    """``[(spec, len(names)) for spec, names in buckets_by_spec(specs)]`` without listing the
    names: with a few spec objects each is counted in one C-level pass of identity tests (at a
    million layers, listing names touches every one of them)."""
    distinct = distinct_specs(specs.values())
    values = list(specs.values())
    if len(distinct) <= _FEW_SPECS and len(set(distinct)) == len(distinct):
        counts = [sum(map(is_, values, repeat(spec))) for spec in distinct]
    else:
        exact = Counter(values)  # equal spec objects counted together, in first-seen order
        distinct, counts = list(exact), list(exact.values())
    return [(spec, sum(map(counts.__getitem__, members))) for spec, members in _joined(distinct)]


def _joined(exact: Sequence[KVCacheSpec]) -> list[tuple[KVCacheSpec, list[int]]]:
    """Distinct specs, in order, joined where they merge (:meth:`KVCacheSpec.merge`): each
    bucket's spec and the indices in ``exact`` of the specs it holds, in the order of its first."""
    merged: list[tuple[list[KVCacheSpec], KVCacheSpec, list[int]]] = []
    for index, spec in enumerate(exact):
        for at, (members, _, indices) in enumerate(merged):
            try:
                joined = type(members[0]).merge([*members, spec])
            except ValueError:
                continue
            merged[at] = ([*members, spec], joined, [*indices, index])
            break
        else:
            merged.append(([spec], spec, [index]))
    return [(spec, indices) for _, spec, indices in merged]


#: at most this many distinct spec objects are bucketed with one C-level pass each
_FEW_SPECS = 8


def _by_equal_spec(
    names: Collection[str], specs: Collection[KVCacheSpec], mask: Sequence[bool] | None = None
) -> dict[KVCacheSpec, list[str]]:
    """Layer names by equal spec, in order (``names`` and ``specs`` parallel; only the layers
    whose ``mask`` entry is true, when given). With a few spec objects (models share them
    between layers) each bucket is one C-level pass picking the layers of that object;
    otherwise one Python pass, an identity lookup per layer."""
    distinct = distinct_specs(specs if mask is None else compress(specs, mask))
    if len(distinct) <= _FEW_SPECS and len(set(distinct)) == len(distinct):
        if mask is None:
            return {spec: list(compress(names, map(is_, specs, repeat(spec)))) for spec in distinct}
        return {
            spec: list(compress(names, map(and_, mask, map(is_, specs, repeat(spec))))) for spec in distinct
        }
    if mask is not None:
        names, specs = list(compress(names, mask)), list(compress(specs, mask))
    exact: dict[KVCacheSpec, list[str]] = {}
    by_id: dict[int, list[str]] = {}
    for name, spec in zip(names, specs, strict=True):
        bucket = by_id.get(id(spec))
        if bucket is None:
            bucket = by_id[id(spec)] = exact.setdefault(spec, [])
        bucket.append(name)
    return exact


def split_bucket(layers: list[str], group_size: int) -> list[list[str]]:
    """``cdiv(len, group_size)`` groups, group ``i`` = ``layers[i::n]`` (pipeline-friendly)."""
    n = cdiv(len(layers), group_size)
    return [layers[i::n] for i in range(n)]


def split_buckets(buckets: Sequence[Bucket], group_size: int) -> tuple[KVCacheGroup, ...]:
    """Every bucket cut into ``cdiv(len, group_size)`` interleaved groups (vLLM's split)."""
    return tuple(
        KVCacheGroup(tuple(part), spec) for spec, names in buckets for part in split_bucket(names, group_size)
    )


def vllm_group_size(sizes: Sequence[int]) -> int:
    """vLLM 0.28's group size for buckets of ``sizes`` layers: the smallest bucket, or the largest
    when it is below 1.5x the smallest. ``sizes`` must not be empty."""
    smallest, largest = min(sizes), max(sizes)
    return largest if largest < 1.5 * smallest else smallest


def vllm_grouping(specs: Mapping[str, KVCacheSpec]) -> tuple[KVCacheGroup, ...]:
    """What vLLM 0.28's group-size rule (``vllm-group-size``) makes of ``specs`` (at least one layer)."""
    buckets = buckets_by_spec(specs)
    return split_buckets(buckets, vllm_group_size([len(names) for _, names in buckets]))


def vllm_grouping_cost(
    specs: Mapping[str, KVCacheSpec], config: EngineConfig, pool: Pool | None = None
) -> GroupingCost:
    """``grouping_cost(vllm_grouping(specs), config, pool)``; with one worker from the buckets'
    lengths alone (:func:`bucket_lengths`), no group made."""
    pool = pool or Pool()
    if len(pool.workers) > 1:
        return grouping_cost(vllm_grouping(specs), config, pool)
    lengths = bucket_lengths(specs)
    return _lengths_cost(lengths, vllm_group_size([n for _, n in lengths]), config, pool)


# -- the shared-pool cost model -----------------------------------------------------------------
@dataclass(frozen=True)
class Pool:
    """Where a grouping runs: each worker's layers and memory (default: one worker, every layer).

    :ivar workers: layer names per worker (empty: one worker holding every layer).
    :ivar memory: bytes per worker, in the order of ``workers`` (empty: equal memory).
    :ivar num_blocks: ``num_gpu_blocks_override``, when set.
    """

    workers: tuple[AbstractSet[str], ...] = ()
    memory: tuple[int, ...] = ()
    num_blocks: int | None = None

    @classmethod
    def of(cls, ctx: PlanContext) -> Pool:
        """The pool of the plan being made (memory only when every worker's is known)."""
        memory = ctx.memory if len(ctx.memory) == len(ctx.workers) else ()
        return cls(ctx.workers, memory, ctx.config.num_gpu_blocks_override)


@dataclass(frozen=True)
class GroupingCost:
    """One grouping's cost for one request of ``max_model_len`` (see the module docstring).

    :ivar group_size: the longest group (the pool width with one worker).
    :ivar groups: the groups with layers.
    :ivar padding_slots: empty slots over all groups at ``group_size`` (as the waste report counts).
    :ivar page_size_bytes: the one page size of the pool.
    :ivar blocks_per_request: ``sum(B_g)`` over the groups.
    :ivar padded_bytes: bytes of the binding worker's share of one request that hold nothing.
    :ivar request_bytes: bytes one request reserves on the binding worker.
    :ivar worker: the binding worker (its index in :attr:`Pool.workers`).
    :ivar capacity: max concurrency before blocks are rounded down (relative when memory is unknown).
    :ivar override_bytes: with ``num_gpu_blocks_override``, the most bytes its blocks take on one
        worker (0 without an override).
    :ivar fits: whether those bytes fit every worker's memory (``True`` without an override, or
        when the memory is not known). An override fixes the block count, not the bytes: a wider
        grouping makes each block larger.
    """

    group_size: int
    groups: int
    padding_slots: int
    page_size_bytes: int
    blocks_per_request: int
    padded_bytes: int
    request_bytes: int
    worker: int
    capacity: Fraction
    override_bytes: int = 0
    fits: bool = True

    def as_dict(self) -> dict[str, int]:
        """The figures as plain ints (decision ``before`` / ``after`` form)."""
        return {
            "group_size": self.group_size,
            "groups": self.groups,
            "padding_slots": self.padding_slots,
            "page_size_bytes": self.page_size_bytes,
            "blocks_per_request": self.blocks_per_request,
            "padded_bytes": self.padded_bytes,
            "request_bytes": self.request_bytes,
            "binding_worker": self.worker,
        }

    def brief(self) -> str:
        """``size 12: 7 groups, 0 padding slots, 0 padded B`` for decision reasons."""
        return (
            f"size {self.group_size}: {self.groups} groups, {self.padding_slots} padding slots, "
            f"{self.padded_bytes:,} padded B"
        )


class Candidate:
    """One group size tried: the groups it makes and their cost (read-only).

    Given ``split=buckets`` instead of its groups (as :func:`search` makes candidates), it makes
    them when :attr:`groups` is first read, ``split_buckets(buckets, requested_size)``: a search
    compares many candidates by cost and keeps one, and making groups copies every layer name.
    """

    __slots__ = ("_groups", "_split", "cost", "requested_size")

    requested_size: int
    cost: GroupingCost
    _groups: tuple[KVCacheGroup, ...] | None
    _split: Sequence[Bucket] | None

    def __init__(
        self,
        requested_size: int,
        groups: Sequence[KVCacheGroup] | None,
        cost: GroupingCost,
        *,
        split: Sequence[Bucket] | None = None,
    ) -> None:
        if (groups is None) == (split is None):
            raise TypeError("Candidate() takes its groups or the buckets to split (split=...), not both")
        set_ = object.__setattr__
        set_(self, "requested_size", requested_size)
        set_(self, "cost", cost)
        set_(self, "_groups", None if groups is None else tuple(groups))
        set_(self, "_split", split)

    @property
    def groups(self) -> tuple[KVCacheGroup, ...]:
        """The groups (made on first read when the candidate was given buckets)."""
        groups: tuple[KVCacheGroup, ...] | None = self._groups
        if groups is None:
            groups = split_buckets(self._split or (), self.requested_size)
            object.__setattr__(self, "_groups", groups)
            object.__setattr__(self, "_split", None)
        return groups

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Candidate is read-only: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return (self.requested_size, self.cost, self.groups) == (
            other.requested_size,
            other.cost,
            other.groups,
        )

    def __hash__(self) -> int:
        return hash((self.requested_size, self.cost, self.groups))

    def __repr__(self) -> str:
        return f"Candidate(requested_size={self.requested_size}, groups=<{self.cost.groups} groups>, cost={self.cost!r})"


def shared_pool_blocker(specs: Mapping[str, KVCacheSpec]) -> str | None:
    """Why ``specs`` cannot share one pool (uniform-type specs, several pages), or ``None``."""
    distinct = distinct_specs(specs.values())
    if any(s.has_members for s in distinct):
        return "uniform-type specs keep one tensor per layer, not a shared pool"
    pages = sorted({s.page_size_bytes for s in distinct})
    if len(pages) > 1:
        return f"a shared pool needs one page size, these layers have {len(pages)}: {pages[:4]}"
    return None


def grouping_cost(
    groups: Sequence[KVCacheGroup], config: EngineConfig, pool: Pool | None = None
) -> GroupingCost:
    """The shared-pool cost of ``groups`` for one request of ``config.max_model_len``.

    Groups without layers are ignored. ``pool`` defaults to one worker holding every layer.

    :raises GroupingError: no group has layers, the groups do not have one page size, or no
        worker of ``pool`` holds a layer of them.
    """
    pool = pool or Pool()
    live = [g for g in groups if g.layer_names]
    lengths = [len(g.layer_names) for g in live]
    if len(pool.workers) <= 1:  # one worker holds every layer of the model: no need to count
        counts = [lengths]
    else:
        counts = [[sum(1 for n in g.layer_names if n in layers) for g in live] for layers in pool.workers]
    return _shape_cost([g.spec for g in live], lengths, counts, config, pool)


def split_cost(
    buckets: Sequence[Bucket], group_size: int, config: EngineConfig, pool: Pool | None = None
) -> GroupingCost:
    """``grouping_cost(split_buckets(buckets, group_size), config, pool)``; with one worker from
    the buckets' lengths alone (group ``i`` of a bucket of ``L`` layers cut into ``n`` holds
    ``cdiv(L - i, n)``), without making the groups."""
    pool = pool or Pool()
    if len(pool.workers) > 1:
        return grouping_cost(split_buckets(buckets, group_size), config, pool)
    return _lengths_cost([(spec, len(names)) for spec, names in buckets], group_size, config, pool)


def _lengths_cost(
    buckets: Sequence[tuple[KVCacheSpec, int]], group_size: int, config: EngineConfig, pool: Pool
) -> GroupingCost:
    """:func:`split_cost` with one worker, of buckets given as ``(spec, number of layers)``."""
    specs: list[KVCacheSpec] = []
    lengths: list[int] = []
    for spec, length in buckets:
        n = cdiv(length, group_size)
        specs += [spec] * n
        lengths += [cdiv(length - i, n) for i in range(n)]
    return _shape_cost(specs, lengths, [lengths], config, pool)


def _shape_cost(
    specs: Sequence[KVCacheSpec],
    lengths: Sequence[int],
    counts_by_worker: Sequence[Sequence[int]],
    config: EngineConfig,
    pool: Pool,
) -> GroupingCost:
    """:func:`grouping_cost` of groups with layers given by their ``specs``, their ``lengths`` and
    their layers on each worker of ``pool`` (``counts_by_worker``, one list for one worker)."""
    if not lengths:
        raise GroupingError("a shared-pool cost needs at least one group with layers")
    pages = sorted({spec.page_size_bytes for spec in specs})
    if len(pages) != 1:
        raise GroupingError(
            f"a shared-pool cost needs one page size across groups, got {pages}; unify pages first"
        )
    page = pages[0]
    width = max(lengths)
    blocks = [blocks_of(spec, config) for spec in specs]
    total = sum(blocks)
    best: tuple[Fraction, int, Sequence[int]] | None = None
    for index, counts in enumerate(counts_by_worker):
        here = max(counts)
        if here == 0:
            continue
        memory = pool.memory[index] if pool.memory else 1
        if pool.num_blocks is not None:
            capacity = Fraction(pool.num_blocks, max(total, 1))
        else:
            capacity = Fraction(memory, here * page * max(total, 1))
        if best is None or capacity < best[0]:
            best = (capacity, index, counts)
    if best is None:
        raise GroupingError("no worker holds a layer of these groups; check the workers' layer names")
    capacity, worker, counts = best
    here = max(counts)
    override_bytes, fits = _override_bytes([max(c) for c in counts_by_worker], pool, page)
    return GroupingCost(
        group_size=width,
        groups=len(lengths),
        padding_slots=sum(width - length for length in lengths),
        page_size_bytes=page,
        blocks_per_request=total,
        padded_bytes=page * sum((here - c) * b for c, b in zip(counts, blocks, strict=True)),
        request_bytes=here * page * total,
        worker=worker,
        capacity=capacity,
        override_bytes=override_bytes,
        fits=fits,
    )


def _override_bytes(widths: Sequence[int], pool: Pool, page: int) -> tuple[int, bool]:
    """With an override: the most bytes its blocks take on one worker (``widths``: the most
    layers a group has on each), and whether every worker's share fits its memory (when
    known); ``(0, True)`` without one."""
    if pool.num_blocks is None:
        return 0, True
    needs = [pool.num_blocks * width * page for width in widths]
    fits = not pool.memory or all(need <= memory for need, memory in zip(needs, pool.memory, strict=True))
    return max(needs), fits


def _choice_key(candidate: Candidate) -> tuple[bool, int, Fraction, int, int, int]:
    cost = candidate.cost
    unfit_bytes = 0 if cost.fits else cost.override_bytes  # fitting first, then the least overcommitted
    return (not cost.fits, unfit_bytes, -cost.capacity, cost.groups, cost.padding_slots, -cost.group_size)


def shape_changes(lengths: Sequence[int]) -> list[int]:
    """The group sizes from 1 to ``max(lengths)`` at which some bucket's group count
    ``cdiv(length, size)`` changes, ascending: the first size of every distinct shape.

    ``cdiv(L, s)`` takes about ``2 sqrt(L)`` values as ``s`` runs from 1 to ``L``; after a size with
    count ``v`` the count next drops at ``cdiv(L, v - 1)``. So the search asks
    ``O(buckets x sqrt(layers))`` sizes instead of one per layer of the longest bucket.
    """
    sizes: set[int] = set()
    for length in lengths:
        size = 1
        while size <= length:
            sizes.add(size)
            count = cdiv(length, size)
            size = cdiv(length, count - 1) if count > 1 else length + 1
    return sorted(sizes)


def search(
    buckets: Sequence[Bucket], config: EngineConfig, max_groups: int, pool: Pool | None = None
) -> tuple[Candidate | None, list[Candidate], int]:
    """Try every group size from 1 to the largest bucket.

    Returns ``(best, considered, over_cap)``: among the candidates whose override blocks fit the
    memory (all, without an override; if none fits, the one taking the fewest bytes), the one with
    the most capacity (with one worker: the fewest padded bytes), then fewer groups, fewer padding slots, larger size, among
    those with at most ``max_groups`` groups; every distinct candidate within the cap in order of
    size; and how many distinct candidates the cap excluded. ``best`` is ``None`` when the cap
    excludes all.
    """
    seen: set[tuple[int, ...]] = set()
    considered: list[Candidate] = []
    over_cap = 0
    lengths = [len(names) for _, names in buckets]
    for size in shape_changes(lengths):
        # the groups per bucket decide the whole shape; count before building anything (only
        # shapes within the cap are materialised)
        counts = tuple(cdiv(length, size) for length in lengths)
        if counts in seen:
            continue
        seen.add(counts)
        if sum(counts) > max_groups:
            over_cap += 1
            continue
        considered.append(Candidate(size, None, split_cost(buckets, size, config, pool), split=buckets))
    best = min(considered, key=_choice_key) if considered else None
    return best, considered, over_cap


def acceptable(rule: GroupingCost, vllm: GroupingCost, max_capacity_loss: Fraction = Fraction(0)) -> bool:
    """Whether ``rule`` may replace vLLM's grouping.

    Never one whose ``num_gpu_blocks_override`` blocks do not fit the memory and take more
    bytes than vLLM's. With no allowed loss: max concurrency not lower, then not more groups, then
    not more padding slots. A loss up to ``max_capacity_loss`` (a fraction of vLLM's max concurrency) is accepted
    only in exchange for fewer groups.
    """
    if not rule.fits and rule.override_bytes > vllm.override_bytes:
        return False  # the override's blocks would take more memory than given, and more than vLLM's
    if rule.capacity > vllm.capacity:
        return True
    if rule.capacity == vllm.capacity:
        return (rule.groups, rule.padding_slots) <= (vllm.groups, vllm.padding_slots)
    return rule.capacity >= (1 - max_capacity_loss) * vllm.capacity and rule.groups < vllm.groups


def ratio(vllm: GroupingCost, rule: GroupingCost) -> float:
    """Max concurrency of ``rule`` over vLLM's for the same memory (ignoring block rounding)."""
    if vllm.capacity == 0:
        return 1.0 if rule.capacity == 0 else float("inf")
    return float(rule.capacity / vllm.capacity)


def alternatives(considered: Sequence[Candidate], chosen: Candidate) -> list[dict[str, Any]]:
    """The other candidates' figures, for the decision record."""
    return [{"requested_size": c.requested_size, **c.cost.as_dict()} for c in considered if c is not chosen]


__all__ = [
    "Bucket",
    "Candidate",
    "GroupingCost",
    "Pool",
    "acceptable",
    "alternatives",
    "bucket_lengths",
    "buckets_by_spec",
    "buckets_where",
    "layer_buckets",
    "grouping_cost",
    "ratio",
    "search",
    "shared_pool_blocker",
    "split_bucket",
    "split_buckets",
    "split_cost",
    "vllm_group_size",
    "vllm_grouping",
    "vllm_grouping_cost",
]
