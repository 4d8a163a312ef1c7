"""Specs that remember which strategy set aligned their block sizes, and the planner's check.

The model front door (:mod:`kvrules.hf`) chooses block sizes with one strategy set's aligners
(stage ``align``). Its specs come as :class:`AlignedSpecs`: a plain ``dict`` that also carries an
:class:`Alignment` (the set, the aligners it asked and which one acted). :meth:`Planner.plan
<kvrules.pipeline.Planner.plan>` compares that with its own set: when the planner's aligners
could have chosen otherwise (:meth:`Alignment.same_choice`), the plan is not that set's plan, so
it warns (:class:`AlignmentWarning`, naming both sets and the fix) and records the same sentence
as a decision (stage ``merge``, rule ``alignment``, outcome ``failed``). Any other mapping of
specs is planned as given, without a check.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvrules.plugin.ask import Asker
from kvrules.plugin.presets import StrategySet
from kvrules.specs.base import KVCacheSpec

STAGE = "merge"
RULE = "alignment"


class AlignmentWarning(UserWarning):
    """Specs aligned for one strategy set are planned with another whose aligners may choose
    other block sizes (the plan is then not the planner's set's plan)."""


@dataclass(frozen=True)
class Alignment:
    """How a front-door build chose its block sizes.

    :ivar strategy_set: the set whose aligners ran (its canonical name).
    :ivar asked: the aligners asked, in order (the last is :attr:`applied` when one acted).
    :ivar applied: the aligner that chose the block sizes, ``None`` when every one declined.
    """

    strategy_set: str
    asked: tuple[str, ...]
    applied: str | None

    def same_choice(self, aligners: Sequence[str]) -> bool:
        """True when a set asking ``aligners`` (in order) is known to choose as this build did:
        each one before :attr:`applied` declined here, and it reaches :attr:`applied` (or, when
        none acted, every one of them declined here). An aligner this build never asked makes the
        answer ``False`` (its choice is unknown)."""
        declined = {name for name in self.asked if name != self.applied}
        for name in aligners:
            if name == self.applied:
                return True
            if name not in declined:
                return False
        return self.applied is None

    def describe(self) -> str:
        """``'default' (draft-aware-align chose the block sizes)``."""
        if self.applied is None:
            what = f"its aligners {', '.join(self.asked)} declined" if self.asked else "it has no aligner"
        else:
            what = f"{self.applied} chose the block sizes"
        return f"{self.strategy_set!r} ({what})"


class AlignedSpecs(dict[str, KVCacheSpec]):
    """Specs (layer name -> spec) with the :class:`Alignment` that chose their block sizes.

    Equal to, and used as, the plain dict of the same specs; a copy made with ``dict(...)`` drops
    the record (and with it the planner's check)."""

    alignment: Alignment

    def __init__(self, specs: Mapping[str, KVCacheSpec], alignment: Alignment) -> None:
        super().__init__(specs)
        self.alignment = alignment


def mismatch(alignment: Alignment, strategies: StrategySet) -> str | None:
    """The sentence a plan with ``strategies`` of specs aligned by ``alignment`` warns with, or
    ``None`` when ``strategies`` would have chosen the same block sizes."""
    aligners = [rule.name for rule in strategies.rules("align")]
    if alignment.same_choice(aligners):
        return None
    planned = f"aligners {', '.join(aligners)}" if aligners else "no aligner"
    return (
        f"the specs' block sizes were aligned for strategy set {alignment.describe()}, but this plan "
        f"uses {strategies.name!r} ({planned}), which may choose other block sizes: the plan is not "
        f"the one {strategies.name!r} makes; build the specs with strategies={strategies.name!r} "
        "(kvrules.hf.model_from_hf(..., strategies=...), or --strategies on the command line)"
    )


def check_alignment(
    workers: Sequence[Mapping[str, KVCacheSpec]], strategies: StrategySet, ask: Asker
) -> None:
    """Warn (:class:`AlignmentWarning`) and record a decision for the first worker whose specs
    are :class:`AlignedSpecs` aligned for a set that ``strategies`` may not agree with."""
    for specs in workers:
        if not isinstance(specs, AlignedSpecs):
            continue
        sentence = mismatch(specs.alignment, strategies)
        if sentence is None:
            continue
        ask.record(STAGE, RULE, "failed", sentence[0].upper() + sentence[1:] + ".")
        warnings.warn(AlignmentWarning(sentence), stacklevel=3)
        return


__all__ = ["AlignedSpecs", "Alignment", "AlignmentWarning", "check_alignment", "mismatch"]
