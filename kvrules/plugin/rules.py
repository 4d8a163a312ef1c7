"""Rule bases: what a rule of each kind must provide.

Every rule is a frozen dataclass with a unique ``name`` (lower case, dash-separated), an integer
``priority`` (higher is asked first; ties are broken by name) and a one-line ``description``.
Each kind has a ``check`` method (the guard: does the rule apply, and why) and an action. The
core asks active rules in ``(-priority, name)`` order, records every answer as a
:class:`~kvrules.Decision` and verifies the result of the rule that acts.

``default`` says whether the rule is active in the ``default`` strategy set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvrules.errors import PluginError

if TYPE_CHECKING:
    from kvrules.config import EngineConfig
    from kvrules.plan import KVCacheGroup, KVCacheTensor
    from kvrules.plugin.context import AlignContext, PlanContext
    from kvrules.specs.base import KVCacheSpec

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


@dataclass(frozen=True, slots=True)
class Check:
    """A guard's answer: whether the rule applies, and a sentence saying why.

    :ivar details: figures of the choice for the decision the asker records (JSON values; see
        :class:`~kvrules.Decision`), or ``None``.
    :ivar work: what the guard worked out, handed to the rule's action as ``ctx.check.work``
        when the rule acts (so the action need not work it out again); never recorded.
    """

    applies: bool
    reason: str
    details: Mapping[str, Any] | None = field(default=None, repr=False)
    work: Any = field(default=None, compare=False, repr=False)


def applies(reason: str, *, details: Mapping[str, Any] | None = None, work: Any = None) -> Check:
    """A :class:`Check` that lets the rule act (``details`` and ``work``: see :class:`Check`)."""
    return Check(True, reason, details, work)


def declines(reason: str) -> Check:
    """A :class:`Check` that passes the question on to the next rule."""
    return Check(False, reason)


def name_problem(name: object, what: str = "name") -> str | None:
    """Why ``name`` is not a valid rule or plugin-object name (``None`` when it is)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return f"{what} {name!r} is invalid: use lower-case words separated by dashes"
    return None


def priority_problem(priority: object) -> str | None:
    """Why ``priority`` is not a valid priority (``None`` when it is: any non-bool ``int``)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        return f"priority {priority!r} must be an integer"
    return None


@dataclass(frozen=True)
class NamedPlugin:
    """Fields every registered object shares: a ``name``, an integer ``priority`` (higher is
    asked first, ties by name) and a one-line ``description``; validated on construction and
    again when registered."""

    name: str
    priority: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        problem = name_problem(self.name, f"{self.what} name")
        if problem:
            raise PluginError(problem)
        problem = priority_problem(self.priority)
        if problem:
            raise PluginError(f"{self.what} {self.name!r}: {problem}")

    @property
    def what(self) -> str:
        """The kind of object, for messages."""
        return type(self).__name__

    @property
    def sort_key(self) -> tuple[int, str]:
        """The order the core asks in: higher priority first, then by name."""
        return (-self.priority, self.name)


@dataclass(frozen=True)
class Rule(NamedPlugin):
    """Base of every rule kind (see the module docstring)."""

    kind: ClassVar[str] = ""
    stage: ClassVar[str] = ""

    default: bool = True

    @property
    def what(self) -> str:
        """``rule``, for messages."""
        return "rule"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.kind:
            raise PluginError(f"rule {self.name!r} does not derive from a rule kind in kvrules.plugin")


@dataclass(frozen=True)
class LayerStrategy(Rule):
    """Brings one layer's page to the target page size (stage ``unify``).

    ``touches`` names the spec fields the strategy may change; the dispatcher rejects a result
    that changes anything else, changes the spec type, or misses the target page.
    """

    kind: ClassVar[str] = "layer-strategy"
    stage: ClassVar[str] = "unify"
    touches: ClassVar[frozenset[str]] = frozenset()

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        """Whether this strategy can bring ``spec``'s page to ``target`` bytes."""
        raise NotImplementedError

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        """A new spec whose ``page_size_bytes == target``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Converter(Rule):
    """Rewrites the merged specs before routing (stage ``convert``)."""

    kind: ClassVar[str] = "convert"
    stage: ClassVar[str] = "convert"

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        """Whether the conversion applies to ``specs``."""
        raise NotImplementedError

    def convert(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> dict[str, KVCacheSpec]:
        """The converted specs (same layers, same order)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Router(Rule):
    """Chooses how the model's layers become KV-cache groups (stage ``route``)."""

    kind: ClassVar[str] = "router"
    stage: ClassVar[str] = "route"
    #: a router that only chooses the route: when it applies, the pipeline unifies the pages
    #: (layer strategies, fallbacks), partitions and groups (``unified-page``); it has no ``route``
    unifies: ClassVar[bool] = False

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        """Whether this route fits ``specs``."""
        raise NotImplementedError

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        """The groups; every layer of ``specs`` in exactly one group, in final form (not called
        when :attr:`unifies` is set)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Fallback(Rule):
    """Rescues a route whose page unification failed (stage ``route``)."""

    kind: ClassVar[str] = "fallback"
    stage: ClassVar[str] = "route"

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        """Whether the fallback can place ``specs``."""
        raise NotImplementedError

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        """The groups of the fallback layout. A fallback (or router) whose groups change
        layers' specs may define ``explain(layer, before, after, ctx)``: each changed layer then
        gets a decision of its own with that sentence (as an aligner's ``explain``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Partitioner(Rule):
    """Sets layers aside into their own groups before the grouper runs (stage ``group``).

    ``partition`` returns ``(groups made here, specs left for the grouper)``.
    """

    kind: ClassVar[str] = "partition"
    stage: ClassVar[str] = "group"

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        """Whether the partition applies."""
        raise NotImplementedError

    def partition(
        self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext
    ) -> tuple[list[KVCacheGroup], dict[str, KVCacheSpec]]:
        """Groups made by this rule and the specs it leaves for the grouper."""
        raise NotImplementedError


@dataclass(frozen=True)
class Grouper(Rule):
    """Groups layers whose pages are already unified (stage ``group``)."""

    kind: ClassVar[str] = "grouper"
    stage: ClassVar[str] = "group"

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        """Whether this grouper handles ``specs``."""
        raise NotImplementedError

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        """Groups of at most ``group size`` layers, each with one page size."""
        raise NotImplementedError


@dataclass(frozen=True)
class Layout(Rule):
    """Turns one worker's groups into tensors (stage ``layout``).

    ``block_bytes`` is the bytes one block costs across all tensors; ``num_blocks`` is then
    ``memory // block_bytes``. ``request_bytes`` is the memory check: bytes one request of
    ``config.max_model_len`` needs. ``tensors`` lists the buffers for ``num_blocks`` blocks.
    """

    kind: ClassVar[str] = "layout"
    stage: ClassVar[str] = "layout"

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        """Whether this layout can hold ``groups``."""
        raise NotImplementedError

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        """Bytes one block costs on this worker."""
        raise NotImplementedError

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        """Bytes one request of ``config.max_model_len`` tokens needs on this worker."""
        raise NotImplementedError

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        """The worker's buffers for ``num_blocks`` blocks."""
        raise NotImplementedError


@dataclass(frozen=True)
class Aligner(Rule):
    """Chooses cache block sizes (and Mamba page padding) when specs are built from a model config
    (stage ``align``, before planning; see :mod:`kvrules.hf.align`).

    Active aligners are asked in ``(-priority, name)`` order; the first whose ``check`` applies
    acts, the others are recorded as declined. ``align`` returns the same layers in the same
    order with the same spec types; ``touches`` names the fields it may change. The dispatcher
    verifies this and records one decision per changed layer, worded by ``explain``.
    """

    kind: ClassVar[str] = "align"
    stage: ClassVar[str] = "align"
    touches: ClassVar[frozenset[str]] = frozenset({"block_size", "page_size_padded"})

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> Check:
        """Whether this aligner acts on ``specs`` (target and draft layers, see ``ctx.is_draft``)."""
        raise NotImplementedError

    def align(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
        """The aligned specs: every layer of ``specs``, in order, only ``touches`` fields changed."""
        raise NotImplementedError

    def explain(self, layer: str, before: KVCacheSpec, after: KVCacheSpec, ctx: AlignContext) -> str:
        """One sentence for the decision record of ``layer`` (a generic one by default)."""
        changes = []
        if before.block_size != after.block_size:
            changes.append(f"block_size {before.block_size} -> {after.block_size}")
        if before.page_size_bytes != after.page_size_bytes:
            changes.append(f"page {before.page_size_bytes} -> {after.page_size_bytes} bytes")
        return f"{self.name}: {', '.join(changes) or 'unchanged'}."


RULE_KINDS: tuple[str, ...] = (
    "convert",
    "router",
    "fallback",
    "layer-strategy",
    "partition",
    "grouper",
    "layout",
    "align",
)

__all__ = [
    "NamedPlugin",
    "name_problem",
    "priority_problem",
    "Aligner",
    "Check",
    "Converter",
    "Fallback",
    "Grouper",
    "LayerStrategy",
    "Layout",
    "NAME_PATTERN",
    "Partitioner",
    "RULE_KINDS",
    "Router",
    "Rule",
    "applies",
    "declines",
]
