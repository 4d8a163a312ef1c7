"""Decision records: every rule asked, what it answered and why (architecture §4).

Decisions are data first: the same frozen :class:`Decision` objects are returned in the plan
and emitted through :mod:`kvrules.logs` as ``kvrules.decision`` events (debug level, keys flat
in the event dict): through structlog when the application configured it, else to the stdlib
logger ``kvrules``. They are emitted only when someone listens at debug level (structlog
configured and passing debug, or ``logging.getLogger("kvrules")`` enabled for DEBUG); otherwise
the library stays silent and the per-event cost is one ``is None`` test. A :class:`DecisionLog`
decides once, when it is made (once per plan), so a plan with 100,000 layers does not ask again
per decision.

A decision is light on purpose (a 100,000-layer plan holds about 110,000 of them): its mappings
are kept as given, never copied, and layers that share an answer share the same ``before`` /
``after`` objects. ``to_dict()`` hands those objects out as they are; treat them as read-only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import FrozenInstanceError
from typing import Any

from kvrules import logs
from kvrules.errors import ModelFileError, PluginError
from kvrules.values import MAX_BYTES, as_int, as_name, shown

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


#: a decision's fields other than its layer, in :data:`FIELDS` order (layer left out)
Body = tuple[
    str,
    str,
    str,
    str,
    "Mapping[str, Any] | None",
    "Mapping[str, Any] | None",
    int,
    "Mapping[str, Any] | None",
]

#: a decision's fields, in the order of its constructor's parameters
FIELDS = ("stage", "rule", "outcome", "layer", "reason", "before", "after", "padding_bytes", "details")


class Decision:
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

    A decision holds its layer and one :attr:`body` with every other field; the same answer
    recorded for many layers (:meth:`for_layer`) shares one body, so a plan's 1,000,000
    per-layer records cost two references each.
    """

    __slots__ = ("_body", "layer")
    __match_args__ = (
        "stage",
        "rule",
        "outcome",
        "layer",
        "reason",
        "before",
        "after",
        "padding_bytes",
        "details",
    )
    layer: str | None
    _body: Body

    def __init__(
        self,
        stage: str,
        rule: str,
        outcome: str,
        layer: str | None,
        reason: str,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
        padding_bytes: int = 0,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        _set_layer(self, layer)
        _set_body(self, (stage, rule, outcome, reason, before, after, padding_bytes, details))

    def for_layer(self, layer: str | None) -> Decision:
        """The same answer recorded for ``layer`` (sharing this decision's :attr:`body`)."""
        copy = _new(Decision)
        _set_layer(copy, layer)
        _set_body(copy, self._body)
        return copy

    @property
    def body(self) -> Body:
        """Every field but ``layer``: ``(stage, rule, outcome, reason, before, after,
        padding_bytes, details)``, one object for all the copies :meth:`for_layer` made."""
        return self._body

    @property
    def stage(self) -> str:
        return self._body[0]

    @property
    def rule(self) -> str:
        return self._body[1]

    @property
    def outcome(self) -> str:
        return self._body[2]

    @property
    def reason(self) -> str:
        return self._body[3]

    @property
    def before(self) -> Mapping[str, Any] | None:
        return self._body[4]

    @property
    def after(self) -> Mapping[str, Any] | None:
        return self._body[5]

    @property
    def padding_bytes(self) -> int:
        return self._body[6]

    @property
    def details(self) -> Mapping[str, Any] | None:
        return self._body[7]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: a Decision is immutable")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: a Decision is immutable")

    def _fields(self) -> tuple[Any, ...]:
        b = self._body
        return (b[0], b[1], b[2], self.layer, *b[3:])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision) or other.__class__ is not self.__class__:
            return NotImplemented
        return self.layer == other.layer and (self._body is other._body or self._body == other._body)

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown_fields = ", ".join(f"{n}={v!r}" for n, v in zip(FIELDS, self._fields(), strict=True))
        return f"Decision({shown_fields})"

    def __reduce__(self) -> tuple[type[Decision], tuple[Any, ...]]:
        return (Decision, self._fields())

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

        :raises ModelFileError: a field of the wrong kind (names ``where``, the field and the value).
        """
        if not isinstance(data, Mapping):
            raise ModelFileError(f"{where} = {shown(data)} is not allowed: an object")
        return cls(
            stage=_choice(data.get("stage"), f"{where}.stage", STAGES),
            rule=as_name(data.get("rule"), f"{where}.rule", error=ModelFileError),
            outcome=_choice(data.get("outcome"), f"{where}.outcome", OUTCOMES),
            layer=None
            if data.get("layer") is None
            else as_name(data["layer"], f"{where}.layer", error=ModelFileError),
            reason=_text(data.get("reason"), f"{where}.reason"),
            before=_mapping(data.get("before"), f"{where}.before"),
            after=_mapping(data.get("after"), f"{where}.after"),
            padding_bytes=as_int(
                data.get("padding_bytes", 0),
                f"{where}.padding_bytes",
                minimum=-MAX_BYTES,
                maximum=MAX_BYTES,
                error=ModelFileError,
            ),
            details=_mapping(data.get("details"), f"{where}.details"),
        )


_new = object.__new__
# the slots' own setters, which pass the refusing __setattr__
_set_layer: Callable[[Decision, str | None], None] = Decision.__dict__["layer"].__set__
_set_body: Callable[[Decision, Body], None] = Decision.__dict__["_body"].__set__


#: decisions as columns: decision ``i`` is of layer ``layers[i]`` with body ``bodies[kinds[i]]``
#: (``layers``, ``kinds``, ``bodies``; an entry of ``bodies`` no decision has may be ``None``),
#: and whether every layer is a name (none is ``None``)
Run = tuple["Sequence[str | None]", "Sequence[int]", "Sequence[Body | None]", bool]

#: one entry of a :class:`DecisionLog`
Entry = Decision


class DeferredDecisions:
    """A finished log's decisions, made into :class:`Decision` objects only when read
    (:meth:`made`, once: the tuple is kept); :class:`~kvrules.plan.Plan` holds one, so that its
    JSON is written from the columns (:meth:`runs`) whether or not ``plan.decisions`` was read.
    Pickles as the tuple of decisions."""

    __slots__ = ("_entries", "_made")

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries = tuple(entries)
        self._made: tuple[Decision, ...] | None = None

    def __len__(self) -> int:
        if self._made is not None:
            return len(self._made)
        return len(self._entries)

    def made(self) -> tuple[Decision, ...]:
        """Every decision, in order; the same tuple on every call."""
        if self._made is None:
            self._made = self._entries
        return self._made

    def runs(self) -> Iterator[Run]:
        """The decisions in order, as columns (:data:`Run`)."""
        if self._entries:
            yield _columns(self._entries)

    def __reduce__(self) -> tuple[type[tuple[Decision, ...]], tuple[tuple[Decision, ...]]]:
        return (tuple, (self.made(),))


def decision_runs(decisions: Sequence[Decision] | DeferredDecisions) -> Iterator[Run]:
    """``decisions`` in order as columns (:data:`Run`)."""
    if isinstance(decisions, DeferredDecisions):
        return decisions.runs()
    return iter((_columns(decisions),) if decisions else ())


def _columns(decisions: Sequence[Decision]) -> Run:
    return [d.layer for d in decisions], range(len(decisions)), [d.body for d in decisions], False


def with_body(layer: str | None, body: Body) -> Decision:
    """The decision of ``layer`` whose other fields are ``body`` (:attr:`Decision.body`)."""
    made = _new(Decision)
    _set_layer(made, layer)
    _set_body(made, body)
    return made


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


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ModelFileError(f"{what} = {shown(value)} is not allowed: a string")
    return value


def _choice(value: Any, what: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ModelFileError(f"{what} = {shown(value)} is not allowed: one of {', '.join(allowed)}")
    return value


def _mapping(value: Any, what: str) -> Mapping[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise ModelFileError(f"{what} = {shown(value)} is not allowed: an object or null")
    return value


class DecisionLog:
    """Collects decisions in order and emits each as a ``kvrules.decision`` debug event."""

    def __init__(self) -> None:
        #: the log in order
        self.entries: list[Entry] = []
        # decide once per log where (and whether) decisions go: asking per decision would rebuild a
        # structlog logger, or re-check the stdlib level, 100,000 times in a large plan
        self._emit = logs.emitter(logging.DEBUG)

    @property
    def items(self) -> list[Decision]:
        """Every decision so far, in order (a new list on each read)."""
        return list(self.decisions())

    def decisions(self) -> tuple[Decision, ...]:
        """Every decision so far, in order."""
        return DeferredDecisions(self.entries).made()

    def deferred(self) -> DeferredDecisions:
        """Every decision so far, as a :class:`DeferredDecisions`."""
        return DeferredDecisions(self.entries)

    def mark(self) -> int:
        """A position in the log, for :meth:`since`."""
        return len(self.entries)

    def since(self, mark: int) -> list[Decision]:
        """The decisions added after :meth:`mark` returned ``mark``."""
        return list(DeferredDecisions(self.entries[mark:]).made())

    def add(self, decision: Decision) -> Decision:
        """Append ``decision`` (and emit it as a ``kvrules.decision`` event when someone listens)."""
        self.entries.append(decision)
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
                **({} if d.details is None else {"details": d.details}),
            )
        return decision

    @property
    def listening(self) -> bool:
        """Whether each added decision is also emitted as an event (someone listens at debug)."""
        return self._emit is not None

    def add_for_layer(self, template: list[Decision], layer: str) -> None:
        """Add each of ``template``'s answers again for ``layer`` (:meth:`Decision.for_layer`), in order."""
        if self._emit is not None:
            for decision in template:
                self.add(decision.for_layer(layer))
            return
        append = self.entries.append
        for decision in template:
            copy = _new(Decision)
            _set_layer(copy, layer)
            _set_body(copy, decision._body)
            append(copy)

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
        """Add several decisions in order."""
        for decision in decisions:
            self.add(decision)
