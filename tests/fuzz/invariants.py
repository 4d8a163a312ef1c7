"""The invariants every successful plan keeps, checked in one function.

:func:`check_plan_invariants` raises :class:`InvariantBroken` naming the first invariant that
does not hold (its :attr:`~InvariantBroken.invariant` is a short key such as ``"layers"``), for
any plan kvrules returns from the inputs it was given.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import jsonschema

from kvrules import KVCacheSpec, Plan
from kvrules.plan import plan_json_schema


class InvariantBroken(AssertionError):
    """A plan that breaks an invariant; ``invariant`` names which one."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant


def _require(condition: bool, invariant: str, message: str) -> None:
    if not condition:
        raise InvariantBroken(invariant, message)


def _workers(specs: Any) -> list[Mapping[Any, Any]]:
    return [specs] if isinstance(specs, Mapping) else list(specs)


def _memories(memory: Any, workers: int) -> list[Any]:
    values = list(memory) if isinstance(memory, (list, tuple)) else [memory]
    return values * workers if len(values) == 1 else values


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _once(names: Sequence[Any], expected: set[Any], invariant: str, where: str) -> None:
    counts = Counter(names)
    twice = [n for n, c in counts.items() if c > 1]
    _require(not twice, invariant, f"{where}: layer(s) {twice[:3]!r} more than once")
    unknown = [n for n in counts if n not in expected]
    _require(not unknown, "unknown-layers", f"{where}: unknown layer(s) {unknown[:3]!r}")
    missing = [n for n in expected if n not in counts]
    _require(not missing, invariant, f"{where}: layer(s) {missing[:3]!r} in none")


def check_layers(plan: Plan, workers: list[Mapping[Any, Any]]) -> None:
    """Every layer in exactly one group, and on its worker in one group and one tensor; no
    layer kvrules was not given."""
    given = {name for w in workers for name in w}
    _require(set(plan.specs) == given, "layers", f"plan.specs has {sorted(map(repr, plan.specs))[:5]}")
    _once([n for g in plan.groups for n in g.layer_names], given, "layers", "groups")
    _require(len(plan.workers) == len(workers), "layers", f"{len(plan.workers)} worker plans")
    for index, (worker, specs) in enumerate(zip(plan.workers, workers, strict=True)):
        own = set(specs)
        _once([n for g in worker.groups for n in g.layer_names], own, "layers", f"worker {index} groups")
        names = [n for t in worker.tensors for n in t.shared_by]
        _once(names, own, "layers", f"worker {index} tensors")


def check_blocks(plan: Plan) -> None:
    """``num_blocks`` is an int >= 0, equal on every worker."""
    _require(_is_int(plan.num_blocks) and plan.num_blocks >= 0, "num-blocks", f"{plan.num_blocks!r}")
    counts = {w.num_blocks for w in plan.workers}
    _require(counts <= {plan.num_blocks}, "num-blocks", f"workers have {sorted(counts)}")


def check_memory(plan: Plan, memories: list[Any]) -> None:
    """No negative tensor; each worker's allocated bytes within its memory (the caller's, or
    ``num_gpu_blocks_override`` blocks when that is set)."""
    override = plan.config.num_gpu_blocks_override is not None
    for index, worker in enumerate(plan.workers):
        for t in worker.tensors:
            fields = (t.size, t.offset, t.block_stride)
            _require(all(_is_int(v) and v >= 0 for v in fields), "negative", f"worker {index}: {t!r}")
        allocated = worker.allocated_bytes
        _require(
            allocated <= worker.available_memory,
            "memory",
            f"worker {index} allocates {allocated} of {worker.available_memory} bytes",
        )
        if not override:
            _require(
                worker.available_memory == memories[index],
                "memory",
                f"worker {index} planned against {worker.available_memory}, given {memories[index]!r}",
            )


def _group_pages(plan: Plan) -> None:
    for index, group in enumerate(plan.groups):
        if group.spec.has_members:
            members = group.spec.member_specs
            _require(
                set(members) == set(group.layer_names),
                "pool",
                f"group {index} members {sorted(members)[:3]} vs layers {list(group.layer_names)[:3]}",
            )
            for name in group.layer_names:
                _require(members[name] == plan.specs[name], "pool", f"group {index} member {name!r}")
            continue
        for name in group.layer_names:
            spec = plan.specs[name]
            _require(
                spec.page_size_bytes == group.spec.page_size_bytes
                and spec.block_size == group.spec.block_size,
                "pool",
                f"layer {name!r} page {spec.page_size_bytes} block {spec.block_size}, group {index} page "
                f"{group.spec.page_size_bytes} block {group.spec.block_size}",
            )


def check_pool(plan: Plan) -> None:
    """A shared pool has one page size per worker; every member's page and block size equal its
    group's (a group with members lists exactly its layers)."""
    _group_pages(plan)
    for index, worker in enumerate(plan.workers):
        if worker.layout != "shared-pool":
            continue
        pages = {g.spec.page_size_bytes for g in worker.groups if g.layer_names}
        _require(len(pages) <= 1, "pool", f"worker {index}'s shared pool has pages {sorted(pages)}")


def check_tensor_sizes(plan: Plan) -> None:
    """Every tensor is page x num_blocks (packed: block stride x num_blocks, pages inside it)."""
    for index, worker in enumerate(plan.workers):
        blocks = worker.num_blocks
        for t in worker.tensors:
            pages = {plan.specs[n].page_size_bytes for n in t.shared_by}
            if t.block_stride > 0:
                _require(t.size == t.block_stride * blocks, "tensor-size", f"worker {index}: {t!r}")
                _require(
                    t.offset + max(pages, default=0) <= t.block_stride,
                    "tensor-size",
                    f"worker {index}: {t!r} overruns its stride",
                )
                continue
            _require(len(pages) == 1, "tensor-size", f"worker {index}: {t!r} holds pages {sorted(pages)}")
            _require(
                t.size == pages.pop() * blocks, "tensor-size", f"worker {index}: {t!r} for {blocks} blocks"
            )


def check_capacity(plan: Plan) -> None:
    """``max_concurrency == num_blocks / blocks per request`` and ``capacity_tokens ==
    floor(max_concurrency * max_model_len)`` (0 when nothing is needed per request)."""
    _require(plan.max_model_len == plan.config.max_model_len, "capacity", "max_model_len differs from config")
    needed = sum(g.spec.blocks_per_request(plan.config) for g in plan.groups)
    try:
        expected = math.inf if needed == 0 else plan.num_blocks / needed
        tokens = 0 if math.isinf(expected) else math.floor(expected * plan.max_model_len)
    except (OverflowError, ValueError) as exc:
        raise InvariantBroken("capacity", f"{plan.num_blocks} blocks / {needed}: {exc}") from None
    _require(
        plan.max_concurrency == expected,
        "capacity",
        f"max_concurrency {plan.max_concurrency!r}, num_blocks / blocks per request = {expected!r}",
    )
    _require(
        plan.capacity_tokens == tokens,
        "capacity",
        f"capacity_tokens {plan.capacity_tokens}, expected {tokens}",
    )


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


@cache
def _validator() -> Any:
    schema = plan_json_schema()
    return jsonschema.Draft202012Validator(schema)


def check_json(plan: Plan, spec_types: Mapping[str, type[KVCacheSpec]] | None = None) -> None:
    """``to_json()`` is strict JSON equal to ``to_dict()``, valid against the shipped schema,
    and ``Plan.from_dict`` of it gives the same plan back."""
    data = plan.to_dict()
    text = plan.to_json()
    try:
        parsed = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise InvariantBroken("json", f"to_json() does not parse: {exc}") from None
    _require(parsed == data, "json", "json.loads(to_json()) != to_dict()")
    error = next(iter(_validator().iter_errors(parsed)), None)
    if error is not None:
        at = "/".join(map(str, error.absolute_path))
        raise InvariantBroken("schema", f"{error.message[:200]} at {at}")
    try:
        again = Plan.from_dict(parsed, spec_types=spec_types).to_dict()
    except Exception as exc:
        raise InvariantBroken("round-trip", f"Plan.from_dict raised {type(exc).__name__}: {exc}") from None
    _require(again == parsed, "round-trip", "Plan.from_dict(...).to_dict() differs")


def check_plan_invariants(
    plan: Plan,
    specs: Any,
    memory: Any,
    *,
    spec_types: Mapping[str, type[KVCacheSpec]] | None = None,
) -> None:
    """Check every invariant of a plan kvrules returned for ``specs`` (a mapping, or one per
    worker) and ``memory`` (bytes, or one value per worker), as they were passed to it.

    :param spec_types: the spec types the plan's JSON is read back with (plugins' own types).
    :raises InvariantBroken: naming the first invariant that does not hold.
    """
    workers = _workers(specs)
    checks: list[tuple[str, Callable[[], None]]] = [
        ("layers", lambda: check_layers(plan, workers)),
        ("num-blocks", lambda: check_blocks(plan)),
        ("memory", lambda: check_memory(plan, _memories(memory, len(workers)))),
        ("pool", lambda: check_pool(plan)),
        ("tensor-size", lambda: check_tensor_sizes(plan)),
        ("capacity", lambda: check_capacity(plan)),
        ("json", lambda: check_json(plan, spec_types)),
    ]
    for invariant, check in checks:
        try:
            check()
        except InvariantBroken:
            raise
        except Exception as exc:  # the plan's own methods fail on what it holds
            raise InvariantBroken(invariant, f"checking it raised {type(exc).__name__}: {exc}") from None


def warm_up() -> None:
    """Build the schema validator now (forked children then share it)."""
    _validator()


__all__ = ["InvariantBroken", "check_plan_invariants", "warm_up"]
