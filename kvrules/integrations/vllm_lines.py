"""Which vLLM line is installed, told apart by its planning seam, never by a version string.

vLLM's KV-cache planning seam changed twice, and kvrules plugs into each form differently:

==========  ===============================================================================
line        the seam kvrules recognises
==========  ===============================================================================
``0.28``    (0.27-0.28) ``kv_cache_utils.unify_kv_cache_spec_page_size(kv_cache_spec)``,
            ``get_kv_cache_groups(vllm_config, kv_cache_spec)``,
            ``get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory)``;
            ``KVCacheTensor(size, shared_by, ...)``; no builder module
``0.32``    (0.29-0.32) ``kv_cache_utils.get_kv_cache_groups(vllm_config, kv_cache_spec)``,
            ``_pool_bytes_per_block(vllm_config, kv_cache_groups)``,
            ``get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, available_memory)``;
            the strided ``KVCacheTensor(size, layers, layer_stride, block_stride, offset)``;
            no builder module
``0.33``    (0.33+) ``kv_cache_config_builder.KVCacheConfigBuilder`` with
            ``get_kv_cache_groups(self, vllm_config, kv_cache_spec)`` and
            ``get_kv_cache_config_from_groups(self, vllm_config, kv_cache_groups, num_blocks)``;
            the strided ``KVCacheTensor``
==========  ===============================================================================

:func:`detect` imports vLLM's planning modules (never at kvrules' import time) and inspects
their functions' parameter names and the ``KVCacheTensor`` fields. A vLLM that matches none is
refused with :class:`UnknownVllmSeamError`, which says what was looked for and what was found.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kvrules.errors import KVRulesError
from kvrules.integrations.vllm_specs import INTERFACE_MODULE, VllmNotInstalledError, vllm_version

UTILS_MODULE = "vllm.v1.core.kv_cache_utils"
BUILDER_MODULE = "vllm.v1.core.kv_cache_config_builder"
#: the fields of the strided ``KVCacheTensor`` (0.29 and later)
STRIDED_TENSOR_FIELDS = ("size", "layers", "layer_stride", "block_stride", "offset")
#: the fields of 0.28's ``KVCacheTensor``
SHARED_TENSOR_FIELDS = ("size", "shared_by")


class UnknownVllmSeamError(KVRulesError, RuntimeError):
    """The installed vLLM's planning seam is none of the lines kvrules knows (names what it found)."""


@dataclass(frozen=True)
class VllmLine:
    """One vLLM line as kvrules plugs into it.

    :ivar name: ``"0.28"``, ``"0.32"`` or ``"0.33"``.
    :ivar releases: the releases of the line, for messages (``"0.29-0.32"``).
    :ivar preset: the strategy set that reproduces the line (what ``auto`` means there).
    :ivar seam: the functions kvrules answers on this line, in words.
    """

    name: str
    releases: str
    preset: str
    seam: str


LINES: dict[str, VllmLine] = {
    "0.28": VllmLine(
        "0.28",
        "0.27-0.28",
        "vllm-0.28",
        f"{UTILS_MODULE}: unify_kv_cache_spec_page_size, get_kv_cache_groups, get_kv_cache_configs",
    ),
    "0.32": VllmLine(
        "0.32",
        "0.29-0.32",
        "vllm-0.33",
        f"{UTILS_MODULE}: get_kv_cache_groups, _pool_bytes_per_block, get_kv_cache_config_from_groups",
    ),
    "0.33": VllmLine(
        "0.33",
        "0.33+",
        "vllm-0.33",
        f"{BUILDER_MODULE}.KVCacheConfigBuilder, selected through Platform.get_kv_cache_config_builder_cls",
    ),
}


# -- what a seam looks like -------------------------------------------------------------------
def _params(fn: object) -> tuple[str, ...] | None:
    """The parameter names of ``fn`` (``None``: not a function whose signature can be read)."""
    if not callable(fn):
        return None
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Expect:
    """A function the seam must have: ``owner.name`` taking ``params`` first, in order."""

    name: str
    params: tuple[str, ...]

    def found(self, owner: Any) -> str | None:
        """``None`` when ``owner`` has it, else what was found instead (for the message)."""
        params = _params(getattr(owner, self.name, None))
        if params is None:
            return f"no {self.name}"
        if params[: len(self.params)] != self.params:
            return f"{self.name}({', '.join(params)})"
        return None

    def __str__(self) -> str:
        return f"{self.name}({', '.join(self.params)})"


SEAM_028 = (
    Expect("unify_kv_cache_spec_page_size", ("kv_cache_spec",)),
    Expect("get_kv_cache_groups", ("vllm_config", "kv_cache_spec")),
    Expect("get_kv_cache_configs", ("vllm_config", "kv_cache_specs", "available_memory")),
)
SEAM_032 = (
    Expect("get_kv_cache_groups", ("vllm_config", "kv_cache_spec")),
    Expect("_pool_bytes_per_block", ("vllm_config", "kv_cache_groups")),
    Expect("get_kv_cache_config_from_groups", ("vllm_config", "kv_cache_groups", "available_memory")),
)
SEAM_033 = (
    Expect("get_kv_cache_groups", ("self", "vllm_config", "kv_cache_spec")),
    Expect("get_kv_cache_config_from_groups", ("self", "vllm_config", "kv_cache_groups", "num_blocks")),
)

#: each line's functions and ``KVCacheTensor`` fields
_SEAMS: dict[str, tuple[tuple[Expect, ...], tuple[str, ...]]] = {
    "0.28": (SEAM_028, SHARED_TENSOR_FIELDS),
    "0.32": (SEAM_032, STRIDED_TENSOR_FIELDS),
    "0.33": (SEAM_033, STRIDED_TENSOR_FIELDS),
}


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _tensor_fields(interface: ModuleType | None) -> tuple[str, ...]:
    cls = getattr(interface, "KVCacheTensor", None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return ()
    return tuple(f.name for f in dataclasses.fields(cls))


def _tensor_note(fields: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """Nothing when ``KVCacheTensor`` has every ``wanted`` field, else what it has (for the message)."""
    return [] if all(name in fields for name in wanted) else [f"KVCacheTensor fields {list(fields)}"]


def _missing(owner: Any, expects: Sequence[Expect]) -> list[str]:
    return [m for m in (e.found(owner) for e in expects) if m is not None]


@dataclass(frozen=True)
class SeamReport:
    """What :func:`detect` found: the line, or ``None`` and the mismatches of each line."""

    line: VllmLine | None
    mismatches: dict[str, list[str]]


def inspect_seam(import_module: Callable[[str], ModuleType | None] = _import) -> SeamReport:
    """Read the installed vLLM's seam (``import_module`` is injectable for tests).

    :raises VllmNotInstalledError: ``vllm.v1.core.kv_cache_utils`` is not importable.
    """
    utils = import_module(UTILS_MODULE)
    if utils is None:
        raise VllmNotInstalledError(
            f"vLLM is not importable ({UTILS_MODULE}); install it with `pip install 'kvrules[vllm]'`"
        )
    fields = _tensor_fields(import_module(INTERFACE_MODULE))
    builder = import_module(BUILDER_MODULE)
    mismatches: dict[str, list[str]] = {}
    if builder is not None:
        base = getattr(builder, "KVCacheConfigBuilder", None)
        found = ["no KVCacheConfigBuilder"] if base is None else _missing(base, SEAM_033)
        found += _tensor_note(fields, STRIDED_TENSOR_FIELDS)
        if not found:
            return SeamReport(LINES["0.33"], {})
        mismatches["0.33"] = found
    else:
        mismatches["0.33"] = [f"no {BUILDER_MODULE}"]
        for name in ("0.32", "0.28"):
            seam, tensor = _SEAMS[name]
            found = _missing(utils, seam) + _tensor_note(fields, tensor)
            if not found:
                return SeamReport(LINES[name], {})
            mismatches[name] = found
    return SeamReport(None, mismatches)


def looked_for() -> str:
    """Every line's seam in words (for error messages)."""
    return "; ".join(
        f"{LINES[name].releases}: {', '.join(map(str, seam))} with KVCacheTensor({', '.join(tensor)})"
        for name, (seam, tensor) in _SEAMS.items()
    )


def detect(import_module: Callable[[str], ModuleType | None] = _import) -> VllmLine:
    """The installed vLLM's line, by its seam.

    :raises VllmNotInstalledError: vLLM is not importable.
    :raises UnknownVllmSeamError: the seam matches no line (the message names what was looked
        for and what differs).
    """
    report = inspect_seam(import_module)
    if report.line is not None:
        return report.line
    found = "; ".join(f"as {name}: {', '.join(why)}" for name, why in report.mismatches.items())
    raise UnknownVllmSeamError(
        f"the installed vLLM (vllm {vllm_version()}) has a KV-cache planning seam kvrules does not know. "
        f"Looked for {looked_for()}. Found {found}. kvrules leaves vLLM's own planner in place; use "
        "a vLLM of a supported line, or a kvrules release that supports this one"
    )


__all__ = [
    "BUILDER_MODULE",
    "LINES",
    "SeamReport",
    "UTILS_MODULE",
    "UnknownVllmSeamError",
    "VllmLine",
    "detect",
    "inspect_seam",
    "looked_for",
]
