"""Planning across ranks: every rank of a ``torch.distributed`` group computes and holds one plan.

Each rank knows only its own layers (a pipeline stage, a tensor-parallel shard) and its own free
memory. :func:`plan_across_ranks` gathers every rank's specs and memory, plans once on every
rank with worker ``i`` = rank ``i`` of the group, checks with one all-reduce that all ranks hold
the identical plan, and returns this rank's :class:`~kvrules.WorkerPlan`.

Protocol (every rank makes the same collective calls in the same order, whatever fails, so a
failure on one rank is reported on all ranks instead of leaving the others waiting):

1. ``all_gather_object``: each rank's payload: its specs in model-file form (each distinct spec
   once), its memory, its engine settings, its active rules and their providers; or the error
   that building the payload raised;
2. on every rank: check the payloads agree (same settings, same rules), decode the specs with
   this rank's spec types, plan, and hash the plan (:func:`plan_digest`);
3. ``all_reduce`` (MAX) of ``[failed, -failed, digest, -digest]``: no failure and one digest
   means every rank holds the same plan; every rank failing with the same error means every
   rank raises it;
4. otherwise one more ``all_gather_object`` of each rank's outcome, and every rank raises the
   same :class:`DistributedPlanError` describing it.

Collectives use the group's timeout (``init_process_group(timeout=...)``); a collective that
fails or times out (a rank crashed, or never called this function) raises
:class:`DistributedPlanError` naming the step. ``torch`` is imported only when called; torch's
object collectives need numpy (a dependency of kvrules), and without it every rank raises
:class:`~kvrules.ConfigError` saying so before the first collective.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import time
from collections.abc import Mapping
from typing import Any, NoReturn

import msgspec

from kvrules import errors, logs
from kvrules.config import EngineConfig
from kvrules.errors import ConfigError, KVRulesError, PluginError
from kvrules.pipeline import Planner
from kvrules.plan import Plan, WorkerPlan
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.plugin.presets import StrategySpec
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.io import spec_from_dict, spec_to_dict

#: digests are compared as non-negative int64 values: the first 15 hex digits of the SHA-256
DIGEST_HEX = 15


class DistributedPlanError(KVRulesError):
    """Ranks could not agree on one plan (a rank failed, the plans differ, or a collective failed).

    Raised with the same message on every rank that reaches the end of the protocol.
    """


# -- payloads --------------------------------------------------------------------------------


def encode_specs(specs: Mapping[str, KVCacheSpec]) -> dict[str, Any]:
    """``{"names", "index", "table"}``: layer names, and for each the index of its spec's
    model-file form in ``table`` (each distinct spec encoded once).

    :raises ConfigError: ``specs`` is not a mapping of layer name to spec.
    """
    if not isinstance(specs, Mapping):
        raise ConfigError(
            f"local_specs must map layer names to specs, got {type(specs).__name__}; pass this rank's "
            "layers only ({} for a rank without KV-cache layers)"
        )
    seen: dict[KVCacheSpec, int] = {}
    table: list[dict[str, Any]] = []
    index: list[int] = []
    for name, spec in specs.items():
        if not isinstance(spec, KVCacheSpec):
            raise ConfigError(f"local_specs[{name!r}] is {spec!r}, not a KV-cache spec")
        at = seen.get(spec)
        if at is None:
            at = seen[spec] = len(table)
            table.append(spec_to_dict(spec))
        index.append(at)
    return {"names": list(specs), "index": index, "table": table}


def decode_specs(
    payload: Mapping[str, Any],
    spec_types: Mapping[str, type[KVCacheSpec]],
    cache: dict[str, KVCacheSpec],
) -> dict[str, KVCacheSpec]:
    """Inverse of :func:`encode_specs`; ``cache`` (canonical JSON -> spec) is shared across ranks.

    :raises SpecError: a spec this rank cannot build (for example, an unknown spec type).
    """
    built: list[KVCacheSpec] = []
    names = payload["names"]
    for position, data in enumerate(payload["table"]):
        key = json.dumps(data, sort_keys=True)
        spec = cache.get(key)
        if spec is None:
            layer = names[payload["index"].index(position)]
            spec = cache[key] = spec_from_dict(data, layer=layer, spec_types=spec_types)
        built.append(spec)
    return {name: built[i] for name, i in zip(names, payload["index"], strict=True)}


def _payload(
    specs: Mapping[str, KVCacheSpec], memory: int, config: EngineConfig, planner: Planner
) -> dict[str, Any]:
    if not isinstance(config, EngineConfig):
        raise ConfigError(f"config must be an EngineConfig, got {type(config).__name__}")
    rules = planner.registries.rules
    return {
        "specs": encode_specs(specs),
        "memory": memory,
        "config": config.to_dict(),
        "strategy_set": planner.strategies.name,
        "rules": [[name, rules.providers.get(name, "?")] for name in planner.strategies.names()],
    }


# -- digest ----------------------------------------------------------------------------------


class _Table:
    """Distinct values, each stored once; ``index(key, make)`` returns a value's position."""

    def __init__(self) -> None:
        self.positions: dict[Any, int] = {}
        self.values: list[Any] = []

    def index(self, key: Any, make: Any) -> int:
        at = self.positions.get(key)
        if at is None:
            at = self.positions[key] = len(self.values)
            self.values.append(make())
        return at


def _spec_ref(spec: KVCacheSpec, table: _Table) -> int:
    def form() -> Any:
        if spec.has_members:
            members = {n: _spec_ref(s, table) for n, s in spec.member_specs.items()}
            return {"type": spec.type_name, "block_size": spec.block_size, "members": members}
        return spec_to_dict(spec)

    return table.index(spec, form)


def plan_digest(plan: Plan) -> str:
    """SHA-256 (hex) of everything :meth:`Plan.to_dict` holds except ``extra``.

    Specs and decisions that repeat across layers are hashed once and referred to by position,
    so the digest of a 1,000-layer plan costs a few milliseconds. Equal plans give equal digests
    on every rank and every run (no addresses, no timings).
    """
    specs = _Table()
    body = msgspec.structs.replace(plan, specs={}, groups=(), decisions=(), extra={}).to_dict()
    body["specs"] = [list(plan.specs), [_spec_ref(s, specs) for s in plan.specs.values()]]
    body["groups"] = [[list(g.layer_names), _spec_ref(g.spec, specs), g.is_eagle_group] for g in plan.groups]
    decisions = _Table()
    rows = []
    for d in plan.decisions:
        key = repr((d.stage, d.rule, d.outcome, d.reason, d.before, d.after, d.padding_bytes, d.details))
        rows.append((d.layer, decisions.index(key, lambda key=key: key)))
    digest = hashlib.sha256()
    for part in (body, specs.values, rows):
        digest.update(json.dumps(part, sort_keys=True, separators=(",", ":"), default=str).encode())
    for key in decisions.values:
        digest.update(key.encode())
    return digest.hexdigest()


def _as_int(hexdigest: str) -> int:
    return int(hexdigest[:DIGEST_HEX], 16)


def _error_digest(error: BaseException) -> str:
    return hashlib.sha256(f"{type(error).__name__}: {error}".encode()).hexdigest()


# -- agreement checks ------------------------------------------------------------------------


def _differences(payloads: list[dict[str, Any]], key: str) -> list[int]:
    first = payloads[0][key]
    return [rank for rank, p in enumerate(payloads) if p[key] != first]


def _check_agreement(payloads: list[dict[str, Any]]) -> None:
    """Every rank must plan with the same settings and the same rules (same error on every rank)."""
    for rank in _differences(payloads, "config"):
        theirs, ours = payloads[rank]["config"], payloads[0]["config"]
        fields = [
            f"{k}: rank 0 has {ours.get(k)!r}, rank {rank} has {theirs.get(k)!r}"
            for k in ours
            if ours.get(k) != theirs.get(k)
        ]
        raise ConfigError(
            f"ranks plan with different engine settings ({'; '.join(fields)}); pass the same "
            "EngineConfig on every rank"
        )
    for key in ("strategy_set", "rules"):
        for rank in _differences(payloads, key):
            ours = {tuple(r) for r in payloads[0]["rules"]}
            theirs = {tuple(r) for r in payloads[rank]["rules"]}
            only0 = sorted(f"{n} ({p})" for n, p in ours - theirs)
            only_r = sorted(f"{n} ({p})" for n, p in theirs - ours)
            raise PluginError(
                f"ranks plan with different rules: strategy set {payloads[0]['strategy_set']!r} on rank 0, "
                f"{payloads[rank]['strategy_set']!r} on rank {rank}; only on rank 0: "
                f"{', '.join(only0) or 'none'}; only on rank {rank}: {', '.join(only_r) or 'none'}. "
                "Install the same plugins (same versions) on every rank and pass the same strategies"
            )


def _raise_gathered(outcomes: list[dict[str, Any]], world: int) -> NoReturn:
    """Build the one error every rank raises from all ranks' outcomes."""
    failed = [o for o in outcomes if o["error"] is not None]
    if failed:
        first = failed[0]
        ok = [str(o["rank"]) for o in outcomes if o["error"] is None]
        lines = [f"rank {o['rank']}: {o['error'][0]}: {o['error'][1]}" for o in failed]
        raise DistributedPlanError(
            f"{len(failed)} of {world} ranks could not plan"
            + (f" (ranks {', '.join(ok)} could)" if ok else "")
            + ":\n  "
            + "\n  ".join(lines)
            + f"\nFix rank {first['rank']}'s error first; every rank must be able to build every rank's specs."
        )
    digests: dict[str, list[int]] = {}
    for o in outcomes:
        digests.setdefault(o["digest"], []).append(o["rank"])
    groups = "; ".join(f"ranks {', '.join(map(str, r))}: {d[:12]}" for d, r in digests.items())
    raise DistributedPlanError(
        f"ranks computed different plans from the same inputs ({groups}); install the same kvrules "
        "version and plugin versions on every rank"
    )


def _rebuild(kind: str, message: str, rank: int) -> KVRulesError:
    """Rank ``rank``'s error, as the same kvrules error class when it is one."""
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, KVRulesError):
        return cls(f"rank {rank}: {message}")
    return DistributedPlanError(f"rank {rank}: {kind}: {message}")


# -- collectives -----------------------------------------------------------------------------


class _Group:
    """The collectives this module uses, each failure turned into a DistributedPlanError."""

    def __init__(self, group: Any) -> None:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(
                "torch.distributed is not initialised: call torch.distributed.init_process_group(...) "
                "on every rank first (or use kvrules.Planner in a single process)"
            )
        if importlib.util.find_spec("numpy") is None:  # torch's object collectives need it
            raise ConfigError(
                "kvrules.distributed needs numpy (torch.distributed.all_gather_object decodes every "
                "rank's payload through it, and torch does not depend on it): pip install numpy, "
                "which kvrules itself depends on, on every rank"
            )
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        backend = str(dist.get_backend(group))
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None

    def _fail(self, step: str, exc: Exception) -> DistributedPlanError:
        return DistributedPlanError(
            f"plan_across_ranks: {step} failed on rank {self.rank} of {self.world} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). A rank did not call "
            "plan_across_ranks (it crashed or took another path) or the group's timeout expired; "
            "set it with init_process_group(timeout=...)"
        )

    def gather(self, obj: Any, step: str) -> list[Any]:
        out: list[Any] = [None] * self.world
        try:
            self.dist.all_gather_object(out, obj, group=self.group)
        except RuntimeError as exc:
            raise self._fail(step, exc) from exc
        return out

    def max(self, values: list[int], step: str) -> list[int]:
        tensor = self.torch.tensor(values, dtype=self.torch.int64, device=self.device)
        try:
            self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX, group=self.group)
        except RuntimeError as exc:
            raise self._fail(step, exc) from exc
        return [int(v) for v in tensor.tolist()]


# -- the API ---------------------------------------------------------------------------------


def agree_plan(
    local_specs: Mapping[str, KVCacheSpec],
    local_available_memory: int,
    config: EngineConfig,
    group: Any = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
) -> Plan:
    """The global plan, computed on every rank and verified identical; see :func:`plan_across_ranks`.

    The plan's ``extra["distributed"]`` holds ``ranks`` and ``digest`` (:func:`plan_digest`).
    """
    started = time.perf_counter()
    comm = _Group(group)
    planner: Planner | None = None
    try:  # nothing may escape before the first collective, or the other ranks would wait
        planner = Planner(strategies, plugin_manager=plugin_manager)
        mine: dict[str, Any] = {"ok": _payload(local_specs, local_available_memory, config, planner)}
    except Exception as exc:
        mine = {"error": [type(exc).__name__, str(exc)]}
    payloads = comm.gather(mine, "gathering every rank's specs")
    plan: Plan | None = None
    digest = ""
    error: KVRulesError | None = None
    try:
        plan = _plan_gathered(payloads, planner)
        digest = plan_digest(plan)
    except KVRulesError as exc:
        error = exc
    except Exception as exc:  # a plugin bug: still reported on every rank, never a hang
        error = PluginError(f"planning raised {type(exc).__name__}: {exc}")
    value = _as_int(_error_digest(error) if error is not None else digest)
    failed = 1 if error is not None else 0
    top = comm.max([failed, -failed, value, -value], "comparing plan digests")
    any_failed, all_failed, same = top[0] == 1, -top[1] == 1, top[2] == -top[3]
    if same and not any_failed and plan is not None:
        extra = {**plan.extra, "distributed": {"ranks": comm.world, "digest": digest}}
        logs.debug(
            "kvrules.distributed.agreed",
            rank=comm.rank,
            ranks=comm.world,
            digest=digest,
            seconds=round(time.perf_counter() - started, 6),
        )
        return msgspec.structs.replace(plan, extra=extra)
    if same and all_failed and error is not None:
        raise error  # the same error on every rank
    outcome = {
        "rank": comm.rank,
        "digest": digest,
        "error": [type(error).__name__, str(error)] if error is not None else None,
    }
    _raise_gathered(comm.gather(outcome, "gathering every rank's outcome"), comm.world)


def _plan_gathered(payloads: list[dict[str, Any]], planner: Planner | None) -> Plan:
    for rank, payload in enumerate(payloads):
        if "error" in payload:
            raise _rebuild(payload["error"][0], payload["error"][1], rank)
    if planner is None:  # pragma: no cover - its error is in this rank's payload
        raise DistributedPlanError("no planner on this rank")
    data = [p["ok"] for p in payloads]
    _check_agreement(data)
    spec_types = planner.registries.spec_types.classes
    cache: dict[str, KVCacheSpec] = {}
    workers = [decode_specs(d["specs"], spec_types, cache) for d in data]
    config = EngineConfig.from_dict(data[0]["config"])
    try:
        return planner.plan(workers, [d["memory"] for d in data], config)
    except KVRulesError as exc:
        named = copy.copy(exc)  # same class and fields (CapacityError's figures), ranks named
        named.args = (f"planning across {len(data)} ranks (worker i is rank i): {exc}",)
        raise named from exc


def plan_across_ranks(
    local_specs: Mapping[str, KVCacheSpec],
    local_available_memory: int,
    config: EngineConfig,
    group: Any = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
) -> WorkerPlan:
    """This rank's share of the one plan every rank of ``group`` agrees on.

    Call it on every rank of ``group`` (default: the default process group), with that rank's
    layers and the bytes it has for the KV cache. Worker ``i`` of the plan is rank ``i``; every
    rank gets the same ``num_blocks`` (the smallest any rank's memory allows).

    :param local_specs: this rank's layers (layer name -> spec); ``{}`` if it holds none.
    :param local_available_memory: bytes this rank has for the KV cache.
    :param config: the engine settings (must be equal on every rank).
    :param group: a ``torch.distributed`` process group of any backend.
    :param strategies: the strategy set (as for :class:`~kvrules.Planner`; equal on every rank).
    :raises KVRulesError: the same error on every rank: a rank's layer contradicts another's
        (:class:`~kvrules.GroupingError`), the settings or rules differ, planning fails, or the
        ranks disagree (:class:`DistributedPlanError`).
    """
    plan = agree_plan(
        local_specs,
        local_available_memory,
        config,
        group,
        strategies=strategies,
        plugin_manager=plugin_manager,
    )
    import torch.distributed as dist

    return plan.workers[dist.get_rank(group)]


__all__ = [
    "DistributedPlanError",
    "agree_plan",
    "decode_specs",
    "encode_specs",
    "plan_across_ranks",
    "plan_digest",
]
