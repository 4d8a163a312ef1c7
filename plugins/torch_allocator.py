"""Built-in plugin ``torch-allocator``: the ``torch`` allocator and the built-in view layouts.

The allocator makes one zero-initialised ``torch.int8`` buffer per allocation with
``torch.zeros`` on ``cuda``, ``cuda:N``, ``cpu`` or ``meta`` (a dry run: tensors with shapes
and strides but no memory, for plans of any size). Importing this module imports neither torch
nor CUDA; CUDA availability is checked only when a CUDA device is asked for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvrules import hookimpl
from kvrules.allocation import AllocationRequest, Allocator
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.plugin.rules import Check, applies, declines
from kvrules_plugins.torch_views import BUILTIN_VIEW_LAYOUTS, view_cache

DEVICE_PATTERN = re.compile(r"^(?:(cpu|meta)|cuda(?::(\d+))?)$")

#: phrases of torch's out-of-memory errors that are plain RuntimeErrors (CPU allocator)
OOM_PHRASES = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def host_memory() -> tuple[int, int] | None:
    """``(available, total)`` bytes of host memory (``/proc/meminfo``, else ``sysconf``)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            info = {line.split(":")[0]: line.split()[1] for line in handle}
        return int(info["MemAvailable"]) * 1024, int(info["MemTotal"]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return None


def cuda_index(device: str) -> int | None:
    """The index in ``cuda:N`` (``None`` for plain ``cuda``, the current device)."""
    match = DEVICE_PATTERN.match(device)
    return int(match.group(2)) if match and match.group(2) is not None else None


@dataclass(frozen=True)
class TorchAllocator(Allocator):
    """``torch.zeros(size, dtype=torch.int8, device=...)`` per buffer; see the module docstring."""

    name: str = "torch"
    priority: int = 0
    description: str = (
        "torch.zeros int8 buffers on cuda, cuda:N or cpu; meta for a dry run that allocates nothing."
    )

    def supports(self, device: str) -> Check:
        match = DEVICE_PATTERN.match(device)
        if match is None:
            return declines(f"device {device!r} is not one of cuda, cuda:N, cpu, meta.")
        if match.group(1) == "meta":
            return applies("meta is a dry run: views get shapes and strides, nothing is allocated.")
        if match.group(1) == "cpu":
            return applies("cpu: zero-initialised host memory.")
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            return declines(
                f"CUDA is not available (torch {torch.__version__}, {build}, no visible GPU); "
                "use device='cpu', or 'meta' for a dry run."
            )
        count = torch.cuda.device_count()
        index = cuda_index(device)
        if index is not None and index >= count:
            return declines(f"{device} does not exist: this process sees {count} CUDA device(s).")
        return applies(f"{device}: CUDA device {index if index is not None else 'current'} of {count}.")

    def device_memory(self, device: str) -> tuple[int, int] | None:
        match = DEVICE_PATTERN.match(device)
        if match is None or match.group(1) == "meta":
            return None
        if match.group(1) == "cpu":
            return host_memory()
        import torch

        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)

    def buffer(self, nbytes: int, device: str) -> object:
        import torch

        return torch.zeros(nbytes, dtype=torch.int8, device=device)

    def build_views(self, request: AllocationRequest, buffers: Sequence[Any]) -> dict[str, Any]:
        with view_cache():
            return super().build_views(request, buffers)

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return True
        text = str(error).lower()
        return isinstance(error, RuntimeError) and any(phrase in text for phrase in OOM_PHRASES)


@hookimpl
def kvrules_register_allocators(registry: AllocatorRegistry) -> None:
    registry.add(TorchAllocator())
    for layout in BUILTIN_VIEW_LAYOUTS:
        registry.add_view_layout(layout)


__all__ = ["TorchAllocator", "cuda_index", "host_memory"]
