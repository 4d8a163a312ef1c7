"""Decision records: every rule asked, what it answered and why (architecture §4).

Decisions are data first: the same frozen :class:`Decision` records are returned in the plan
and emitted through :mod:`kvrules.logs` as ``kvrules.decision`` events (debug level, keys flat
in the event dict): through structlog when the application configured it, else to the stdlib
logger ``kvrules``. They are emitted only when someone listens at debug level; a
:class:`DecisionLog` decides that once, when it is made (once per plan).

A decision's mappings are kept as given, never copied, and layers that share an answer share
the same ``before`` / ``after`` objects: treat them as read-only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from kvrules import logs
from kvrules.errors import PluginError
from kvrules.typed import UTF8_PATTERN, typed
from kvrules.values import MAX_BYTES, shown

STAGES = (
    "load",
    "merge",
    "convert",
    "route",
    "unify",
    "group",
    "layout",
    "capacity",
    "allocate",
    "arch",
    "align",
)
OUTCOMES = ("applied", "declined", "failed")

#: a name read from a document: non-empty, writable as UTF-8 (no lone surrogate)
Name = Annotated[str, msgspec.Meta(min_length=1, pattern=UTF8_PATTERN)]
#: a JSON object read from a document
Figures = Mapping[str, Any]


def _one_of(names: tuple[str, ...]) -> msgspec.Meta:
    return msgspec.Meta(pattern="^(" + "|".join(map(re.escape, names)) + ")$")


class Decision(msgspec.Struct, frozen=True, gc=False):
    """One answer of one rule (immutable; two decisions are equal when all their fields are).

    :ivar stage: pipeline stage (one of :data:`STAGES`).
    :ivar rule: the rule's name.
    :ivar outcome: ``applied``, ``declined`` or ``failed``.
    :ivar layer: the layer name, or ``None`` for a model-level decision.
    :ivar reason: one sentence a person can read.
    :ivar before: ``spec_type``, ``block_size``, ``page_size_bytes``, ``page_size_padded`` before
        (a spec summary, :meth:`KVCacheSpec.summary`) or ``None``.
    :ivar after: the same keys after the decision (``None`` when nothing changed).
    :ivar padding_bytes: bytes per page this decision added (0 if none).
    :ivar details: figures of a model-level choice that are not a spec summary (a grouping's cost,
        the alternatives tried), JSON values only; ``None`` for most decisions. Each rule's
        shape is documented in docs/plan-schema.md.
    """

    stage: Annotated[str, _one_of(STAGES)]
    rule: Name
    outcome: Annotated[str, _one_of(OUTCOMES)]
    layer: Name | None
    reason: str
    before: Figures | None = None
    after: Figures | None = None
    padding_bytes: Annotated[int, msgspec.Meta(ge=-MAX_BYTES, le=MAX_BYTES)] = 0
    details: Figures | None = None

    def for_layer(self, layer: str | None) -> Decision:
        """The same answer recorded for ``layer`` (sharing this decision's mappings)."""
        return msgspec.structs.replace(self, layer=layer)

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict with the keys of architecture §4; ``details`` only when set.

        ``before``, ``after`` and ``details`` are the record's own mappings (not copies) when they
        are dicts: read them, do not change them.
        """
        out = {
            "stage": self.stage,
            "rule": self.rule,
            "outcome": self.outcome,
            "layer": self.layer,
            "reason": self.reason,
            "before": _plain(self.before),
            "after": _plain(self.after),
            "padding_bytes": self.padding_bytes,
        }
        if self.details is not None:
            out["details"] = _plain(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "decision") -> Decision:
        """Inverse of :meth:`to_dict`.

        :raises ModelFileError: a field of the wrong type (names ``where``, the field and the value).
        """
        return typed(data, cls, where, where + ".")


#: the keys of a spec summary (a decision's ``before`` / ``after``) and the types of their values
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "spec_type": (str,),
    "block_size": (int,),
    "page_size_bytes": (int,),
    "page_size_padded": (int, type(None)),
}


def summary_problem(value: Any) -> str:
    """What keeps ``value`` from being a decision's ``before`` / ``after`` (``""``: it is ``None``
    or a spec summary: :data:`SUMMARY_TYPES`' keys with values of those types, bools refused)."""
    if value is None:
        return ""
    if not isinstance(value, Mapping):
        return "is not a mapping"
    for key, types in SUMMARY_TYPES.items():
        if key not in value:
            return f"has no key {key!r}"
        if isinstance(value[key], bool) or not isinstance(value[key], types):
            return f"has {key} = {shown(value[key])}"
    return ""


def _plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``value`` itself when it is a dict or ``None``, else a dict copy (JSON needs a dict)."""
    if value is None or type(value) is dict:
        return value
    return dict(value)


class DecisionLog:
    """Collects decisions in order and emits each as a ``kvrules.decision`` debug event."""

    def __init__(self) -> None:
        #: the log in order
        self.entries: list[Decision] = []
        # decide once per log where (and whether) decisions go: asking per decision would rebuild a
        # structlog logger, or re-check the stdlib level, 100,000 times in a large plan
        self._emit = logs.emitter(logging.DEBUG)

    @property
    def items(self) -> list[Decision]:
        """Every decision so far, in order (a new list on each read)."""
        return list(self.entries)

    def decisions(self) -> tuple[Decision, ...]:
        """Every decision so far, in order."""
        return tuple(self.entries)

    def add(self, decision: Decision) -> Decision:
        """Append ``decision`` (and emit it as a ``kvrules.decision`` event when someone listens)."""
        self.entries.append(decision)
        if self._emit is not None:
            self._emit("kvrules.decision", **decision.to_dict())
        return decision

    def add_for_layer(self, template: list[Decision], layer: str) -> None:
        """Add each of ``template``'s answers again for ``layer`` (:meth:`Decision.for_layer`), in order."""
        self.extend([decision.for_layer(layer) for decision in template])

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
        details: Mapping[str, Any] | None = None,
    ) -> Decision:
        """Build a :class:`Decision` from the arguments and :meth:`add` it.

        :raises PluginError: ``before`` / ``after`` is not a spec summary
            (:meth:`KVCacheSpec.summary`), or ``details`` is not a mapping; figures of a
            model-level choice go into ``details`` (see :class:`Decision`).
        """
        for which, value in (("before", before), ("after", after)):
            problem = summary_problem(value)
            if problem:
                raise PluginError(
                    f"rule {rule!r} recorded a {stage} decision whose {which} = {shown(value)} {problem}; "
                    "before/after hold a spec summary (KVCacheSpec.summary()): record other figures as details="
                )
        if details is not None and not isinstance(details, Mapping):
            raise PluginError(
                f"rule {rule!r} recorded a {stage} decision whose details = {shown(details)} is not allowed: "
                "a mapping of JSON values, or None"
            )
        return self.add(Decision(stage, rule, outcome, layer, reason, before, after, padding_bytes, details))

    def extend(self, decisions: list[Decision]) -> None:
        """Add several decisions in order (as :meth:`add` adds each)."""
        self.entries.extend(decisions)
        if self._emit is not None:
            for decision in decisions:
                self._emit("kvrules.decision", **decision.to_dict())
