"""The exception hierarchy of kvrules.

Every error a user can trigger through the public API derives from :class:`KVRulesError`,
so an integrator can catch one type. Messages name the layer, the values involved and a fix.
"""

from __future__ import annotations


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


class CapacityError(KVRulesError, ValueError):
    """Not enough memory for one request of ``max_model_len`` (states the largest length that fits).

    :ivar needed_bytes: bytes one request of ``max_model_len`` needs on the failing worker.
    :ivar available_bytes: bytes that worker has for the KV cache.
    :ivar max_fitting_len: the largest ``max_model_len`` that fits on every worker (0 if none).
    """

    def __init__(
        self,
        message: str,
        *,
        needed_bytes: int = 0,
        available_bytes: int = 0,
        max_fitting_len: int = 0,
    ) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        self.max_fitting_len = max_fitting_len


class AllocationError(KVRulesError, RuntimeError):
    """Buffers for a plan could not be allocated on the requested device."""


class PluginError(KVRulesError):
    """A plugin failed to load, broke a contract, or clashed with another plugin."""


class ModelFileError(KVRulesError, ValueError):
    """A model file (or Hugging Face config) could not be read; names the file and the field."""


__all__ = [
    "AllocationError",
    "CapacityError",
    "ConfigError",
    "GroupingError",
    "KVRulesError",
    "ModelFileError",
    "PluginError",
    "SpecError",
    "UnificationError",
]
