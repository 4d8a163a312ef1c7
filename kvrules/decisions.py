"""Decision records: every rule asked, what it answered and why (architecture §4).

Decisions are data first: the same frozen :class:`Decision` objects are returned in the plan
and emitted through :mod:`kvrules.logs` as ``kvrules.decision`` events (debug level, keys flat
in the event dict): through structlog when the application configured it, else to the stdlib
logger ``kvrules``. They are emitted only when someone listens at debug level (structlog
configured and passing debug, or ``logging.getLogger("kvrules")`` enabled for DEBUG); otherwise
the library stays silent and the per-event cost is one ``is None`` test. A :class:`DecisionLog`
decides once, when it is made (once per plan), so a plan with 100,000 layers does not ask again
per decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvrules import logs

STAGES = ("merge", "convert", "route", "unify", "group", "layout", "capacity", "allocate", "arch", "align")
OUTCOMES = ("applied", "declined", "failed")


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer of one rule.

    :ivar stage: pipeline stage (one of :data:`STAGES`).
    :ivar rule: the rule's name.
    :ivar outcome: ``applied``, ``declined`` or ``failed``.
    :ivar layer: the layer name, or ``None`` for a model-level decision.
    :ivar reason: one sentence a person can read.
    :ivar before: ``spec_type``, ``block_size``, ``page_size_bytes``, ``page_size_padded`` before.
    :ivar after: the same keys after the decision (``None`` when nothing changed).
    :ivar padding_bytes: bytes per page this decision added (0 if none).
    """

    stage: str
    rule: str
    outcome: str
    layer: str | None
    reason: str
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    padding_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict with the keys of architecture §4."""
        return {
            "stage": self.stage,
            "rule": self.rule,
            "outcome": self.outcome,
            "layer": self.layer,
            "reason": self.reason,
            "before": dict(self.before) if self.before is not None else None,
            "after": dict(self.after) if self.after is not None else None,
            "padding_bytes": self.padding_bytes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """Inverse of :meth:`to_dict`."""
        return cls(
            stage=data["stage"],
            rule=data["rule"],
            outcome=data["outcome"],
            layer=data.get("layer"),
            reason=data["reason"],
            before=data.get("before"),
            after=data.get("after"),
            padding_bytes=int(data.get("padding_bytes", 0)),
        )


class DecisionLog:
    """Collects decisions in order and emits each as a ``kvrules.decision`` debug event."""

    def __init__(self) -> None:
        self.items: list[Decision] = []
        # decide once per log where (and whether) decisions go: asking per decision would rebuild a
        # structlog logger, or re-check the stdlib level, 100,000 times in a large plan
        self._emit = logs.emitter(logging.DEBUG)

    def add(self, decision: Decision) -> Decision:
        """Append ``decision`` (and emit it as a ``kvrules.decision`` event when someone listens)."""
        self.items.append(decision)
        if self._emit is not None:
            d = decision
            self._emit(
                "kvrules.decision",
                stage=d.stage,
                rule=d.rule,
                outcome=d.outcome,
                layer=d.layer,
                reason=d.reason,
                before=d.before,
                after=d.after,
                padding_bytes=d.padding_bytes,
            )
        return decision

    def record(
        self,
        stage: str,
        rule: str,
        outcome: str,
        reason: str,
        *,
        layer: str | None = None,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
        padding_bytes: int = 0,
    ) -> Decision:
        """Build a :class:`Decision` from the arguments and :meth:`add` it."""
        return self.add(Decision(stage, rule, outcome, layer, reason, before, after, padding_bytes))

    def extend(self, decisions: list[Decision]) -> None:
        """Add several decisions in order."""
        for decision in decisions:
            self.add(decision)
