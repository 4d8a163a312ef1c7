"""A spec's answers, checked where built-in code uses them.

The core checks every spec's answers once, when it enters the planner; a spec type may still
answer wrongly on a later call. Built-in rules and stages ask through these functions, so such
an answer is a :class:`~kvrules.errors.SpecAnswerError` naming the spec type (the core adds its
plugin), not a crash blamed on the rule that used the answer. Third-party rules may use them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvrules.errors import SpecAnswerError
from kvrules.values import shown

if TYPE_CHECKING:
    from kvrules.config import EngineConfig
    from kvrules.specs.base import KVCacheSpec


def count_problem(label: str, value: object) -> str:
    """What is wrong with ``value`` as the spec's ``label`` answer, a count (``""``: nothing)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return ""
    return f"answers {label} = {value!r}; it must be an int >= 0"


def blocks_of(spec: KVCacheSpec, config: EngineConfig) -> int:
    """``spec.blocks_per_request(config)``, an int >= 0.

    :raises SpecAnswerError: any other answer.
    """
    return _counted(spec, "blocks_per_request", spec.blocks_per_request(config))


def memory_of(spec: KVCacheSpec, config: EngineConfig) -> int:
    """``spec.max_memory_usage_bytes(config)``, an int >= 0.

    :raises SpecAnswerError: any other answer.
    """
    return _counted(spec, "max_memory_usage_bytes", spec.max_memory_usage_bytes(config))


def _counted(spec: KVCacheSpec, label: str, value: int) -> int:
    problem = count_problem(label, value)
    if problem:
        raise SpecAnswerError(spec, problem)
    return value


def evolved(spec: KVCacheSpec, **changes: Any) -> KVCacheSpec:
    """``spec.evolve(**changes)``: a spec of the same type, with the ``block_size`` asked for
    (other fields may be derived: a padding given as ``None``, for one).

    :raises SpecAnswerError: an answer that is not such a spec.
    """
    new = spec.evolve(**changes)
    if type(new) is not type(spec):
        raise SpecAnswerError(spec, f"returned {shown(new)} from evolve(), not a {type(spec).__name__}")
    if "block_size" in changes and new.block_size != changes["block_size"]:
        raise SpecAnswerError(
            spec,
            f"returned a spec of block_size {shown(new.block_size)} from "
            f"evolve(block_size={shown(changes['block_size'])})",
        )
    return new
