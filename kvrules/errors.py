"""The exception hierarchy of kvrules.

Every error a user can trigger through the public API derives from :class:`KVRulesError`,
so an integrator can catch one type. Messages name the layer, the values involved and a fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


class KVRulesError(Exception):
    """Base class of every error kvrules raises on purpose."""


class SpecError(KVRulesError, ValueError):
    """A KV-cache spec has an invalid field value (names the field and the value)."""


class ConfigError(KVRulesError, ValueError):
    """An :class:`~kvrules.EngineConfig` field is invalid (names the field and the value)."""


class UnificationError(KVRulesError, NotImplementedError):
    """No page-unification rule could bring a layer's page to the common page size."""


class GroupingError(KVRulesError, ValueError):
    """Layers could not be placed into KV-cache groups (includes a failed hybrid-disabled conversion)."""


@dataclass(frozen=True)
class Fix:
    """One way out of an error, as data each front end words in its own terms: the Python API
    by ``str(fix)`` (``set max_model_len=4096``), the command line by its flags
    (``--max-model-len 4096``).

    :ivar setting: what to change: an :class:`~kvrules.EngineConfig` field (``max_model_len``,
        ``auto_fit_max_model_len``, ...) or ``available_memory`` (the memory given to ``plan()``).
    :ivar value: the value to give it; ``None``: a larger one than now.
    """

    setting: str
    value: int | bool | None = None

    def __str__(self) -> str:
        if self.value is None:
            return f"give a larger {self.setting}"
        return f"set {self.setting}={self.value!r}"


def fix_sentence(fixes: Iterable[Fix], spell: Callable[[Fix], str] = str) -> str:
    """``"To fix it: a, b or c."``: each fix worded by ``spell`` (``""`` when there is none)."""
    words = [spell(fix) for fix in fixes]
    if not words:
        return ""
    joined = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"To fix it: {joined}."


class CapacityError(KVRulesError, ValueError):
    """Not enough memory for one request of ``max_model_len`` (states the largest length that fits).

    :ivar needed_bytes: bytes one request of ``max_model_len`` needs on the failing worker.
    :ivar available_bytes: bytes that worker has for the KV cache.
    :ivar max_fitting_len: the largest ``max_model_len`` that fits on every worker (0 if none).
    :ivar reason: the message without its fixes.
    :ivar fixes: the ways out, as data (:class:`Fix`); the message ends with them in the
        Python API's words, :meth:`explained` words them otherwise (the CLI: in its flags).
    """

    def __init__(
        self,
        message: str,
        *,
        needed_bytes: int = 0,
        available_bytes: int = 0,
        max_fitting_len: int = 0,
        fixes: Iterable[Fix] = (),
    ) -> None:
        self.reason = message
        self.fixes = tuple(fixes)
        super().__init__(self.explained(str))
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        self.max_fitting_len = max_fitting_len

    def explained(self, spell: Callable[[Fix], str]) -> str:
        """The message with its fixes worded by ``spell``."""
        return " ".join(part for part in (self.reason, fix_sentence(self.fixes, spell)) if part)


class AllocationError(KVRulesError, RuntimeError):
    """Buffers for a plan could not be allocated on the requested device."""


class PluginError(KVRulesError):
    """A plugin failed to load, broke a contract, or clashed with another plugin."""


class SpecAnswerError(PluginError):
    """A spec answered wrongly where built-in code used the answer (:mod:`kvrules.specs.asked`).

    :ivar spec: the spec; :ivar problem: what it answered, as a sentence's predicate. The core
    re-raises it as a :class:`PluginError` naming the spec type's plugin.
    """

    def __init__(self, spec: object, problem: str) -> None:
        self.spec = spec
        self.problem = problem
        super().__init__(f"spec type {getattr(type(spec), 'type_name', type(spec).__name__)!r} {problem}")

    def __reduce__(self) -> tuple[type[SpecAnswerError], tuple[object, str]]:
        return (type(self), (self.spec, self.problem))


class ModelFileError(KVRulesError, ValueError):
    """A model file (or Hugging Face config) could not be read; names the file and the field."""


__all__ = [
    "AllocationError",
    "CapacityError",
    "ConfigError",
    "Fix",
    "GroupingError",
    "KVRulesError",
    "ModelFileError",
    "PluginError",
    "SpecAnswerError",
    "SpecError",
    "UnificationError",
    "fix_sentence",
]
