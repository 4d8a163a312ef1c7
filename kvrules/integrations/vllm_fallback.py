"""When kvrules cannot plan an engine's KV cache, vLLM's own planner does (architecture section 8).

A planner plugin must never stop an engine that vLLM alone would start. Every seam function
kvrules answers inside vLLM (on every line) goes through :func:`answer`:

* kvrules answers, unless a call of vLLM's own function is in progress on this thread (vLLM's
  functions call each other through the module attributes kvrules replaced: those nested calls
  are vLLM's too);
* when kvrules raises (a spec field it does not model, an internal fault, a setting it does not
  plan), vLLM's own function answers. When it does, the layers of that call are **handed to
  vLLM**: one warning names the seam, the layers, the error and its text (which names the layer,
  the field or the rule), and a :class:`Decision` (rule ``vllm-fallback``) is recorded
  (:func:`decisions`). When vLLM's function raises too, its error reaches the caller as it is
  (vLLM's own verdict, in vLLM's type) and nothing is recorded. A ``CapacityError`` is not a
  fallback: it is the engine's own "not enough memory" verdict, raised as vLLM's type
  (``ValueError``);
* the choice is made where the layers are grouped (:data:`GROUPING` calls), and every later call
  on those layers (bytes per block, placement) follows it: the layers grouped by vLLM are placed
  by vLLM, and those grouped by kvrules are placed by kvrules, never a mix. A grouping call decides
  again each time (the choice is a function of the specs, so every process reaches the same one);
* ``KVRULES_VLLM_STRICT`` on (``1/true/yes/on``) makes the error reach the engine instead.

The state is per process: each vLLM process (engine core, workers) decides for itself, from the
same specs, the same way. Importing this module never imports vLLM.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from kvrules import logs, switches
from kvrules.decisions import Decision
from kvrules.errors import CapacityError, KVRulesError
from kvrules.integrations import vllm_log as vllm_log_lines

#: the decision's rule and stage
RULE = "vllm-fallback"
STAGE = "route"
#: the switch that turns a fallback into the error
STRICT_ENV = "KVRULES_VLLM_STRICT"
#: how many layer sets a process remembers (a process plans a handful of models)
MEMORY = 64

vllm_log = vllm_log_lines.vllm_log
T = TypeVar("T")
Kind = Literal["grouping", "placement"]
GROUPING: Kind = "grouping"
PLACEMENT: Kind = "placement"

_lock = threading.RLock()
_in_vllm: contextvars.ContextVar[bool] = contextvars.ContextVar("kvrules_in_vllm", default=False)


@dataclass(frozen=True)
class _Route:
    """Who plans a set of layers: kvrules (``decision is None``) or vLLM."""

    layers: frozenset[str]
    decision: Decision | None


_routes: list[_Route] = []
_decisions: list[Decision] = []
_warned: set[str] = set()


class MixedPlanError(KVRulesError, RuntimeError):
    """kvrules grouped these layers, then failed to place them; vLLM cannot place kvrules' groups
    in its stead without mixing two planners' answers (the message names the fault)."""


def strict() -> bool:
    """Whether ``KVRULES_VLLM_STRICT`` is on.

    :raises ConfigError: its value is not a boolean (naming the variable).
    """
    return switches.flag(STRICT_ENV)


def decisions() -> tuple[Decision, ...]:
    """Every fallback decision of this process, oldest first."""
    with _lock:
        return tuple(_decisions)


def reset() -> None:
    """Forget every route and decision (tests; a new set of plugins)."""
    with _lock:
        _routes.clear()
        _decisions.clear()
        _warned.clear()


def in_vllm() -> bool:
    """Whether one of vLLM's own functions is running on this thread through :func:`call_vllm`."""
    return _in_vllm.get()


def call_vllm(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (vLLM's own function) with every nested seam call answered by vLLM too."""
    token = _in_vllm.set(True)
    try:
        return fn(*args)
    finally:
        _in_vllm.reset(token)


def route_of(layers: Collection[str]) -> Decision | Literal[False] | None:
    """The latest grouping choice for any of ``layers``: its fallback decision (vLLM plans
    them), ``None`` (kvrules plans them), or ``False`` (no grouping seen for them)."""
    names = layers if isinstance(layers, (set, frozenset)) else set(layers)
    with _lock:
        for route in reversed(_routes):
            if not route.layers.isdisjoint(names):
                return route.decision
    return False


def _remember(layers: frozenset[str], decision: Decision | None) -> None:
    with _lock:
        _routes[:] = [r for r in _routes if r.layers.isdisjoint(layers)][-(MEMORY - 1) :]
        _routes.append(_Route(layers, decision))
        if decision is not None and decision not in _decisions:
            _decisions.append(decision)


def _is_fallback(exc: Exception) -> bool:
    """Whether kvrules' ``exc`` hands the call to vLLM: everything but the engine's own verdicts,
    not enough memory (``CapacityError``, vLLM's ``ValueError``) and workers that disagree about a
    layer (kvrules' ``AssertionError``, where vLLM asserts)."""
    engine_verdict = isinstance(exc, CapacityError) or (
        isinstance(exc, AssertionError) and isinstance(exc, KVRulesError)
    )
    return not engine_verdict


def fallback_decision(seam: str, line: str, layers: Collection[str], exc: BaseException) -> Decision:
    """The ``vllm-fallback`` decision for ``exc`` raised by kvrules on ``seam``."""
    count = len(layers)
    return Decision(
        STAGE,
        RULE,
        "applied",
        None,
        f"kvrules cannot plan this engine's KV cache ({type(exc).__name__} in {seam} on {count} "
        f"layer{'s' if count != 1 else ''}: {exc}); vLLM's own planner plans these layers in this "
        f"process. Set {STRICT_ENV}=1 to make this an error instead.",
        details={"seam": seam, "vllm_line": line, "layers": count, "error": type(exc).__name__},
    )


def _warn(decision: Decision) -> None:
    with _lock:
        if decision.reason in _warned:
            return
        _warned.add(decision.reason)
    logs.warning("kvrules.vllm.fallback", **decision.to_dict())
    vllm_log.warning("kvrules %s: %s", RULE, decision.reason)


def answer(
    kind: Kind,
    seam: str,
    line: str,
    layers: Iterable[str],
    ours: Callable[[], T],
    theirs: Callable[[], T],
) -> T:
    """``ours()`` (kvrules' answer to ``seam``), or ``theirs()`` (vLLM's) as the module docstring says.

    :param kind: ``grouping`` (decides the route of ``layers``) or ``placement`` (follows it).
    :param layers: the layer names the call is about.
    :raises: what ``ours()`` raises under ``KVRULES_VLLM_STRICT``; a ``CapacityError``; a
        :class:`MixedPlanError` when kvrules fails to place layers it grouped; what ``theirs()`` raises.
    """
    if in_vllm():
        return theirs()
    names = frozenset(layers)
    route = route_of(names) if kind == PLACEMENT else False
    if route is not None and route is not False:
        return call_vllm(theirs)
    try:
        answered = ours()
    except Exception as exc:
        failure = exc
    else:
        if kind == GROUPING:
            _remember(names, None)
        return answered
    if not _is_fallback(failure) or strict():
        raise failure
    if route is None:
        raise MixedPlanError(
            f"kvrules grouped these {len(names)} layers but cannot place them ({type(failure).__name__} "
            f"in {seam}: {failure}); vLLM cannot place kvrules' groups in its stead. Unset "
            "KVRULES_VLLM_STRATEGIES to plan with vLLM alone, and report this as a kvrules bug"
        ) from failure
    by_vllm = call_vllm(theirs)  # vLLM's own error, if it has one, reaches the caller as it is
    decision = fallback_decision(seam, line, names, failure)
    _remember(names, decision)
    _warn(decision)
    return by_vllm


__all__ = [
    "GROUPING",
    "MixedPlanError",
    "PLACEMENT",
    "RULE",
    "STAGE",
    "STRICT_ENV",
    "answer",
    "call_vllm",
    "decisions",
    "fallback_decision",
    "in_vllm",
    "reset",
    "route_of",
    "strict",
]
