"""The GPU catalog (``gpus.json``, package data): memory per GPU by name.

Each entry holds the vendor's nominal capacity (GB, 10^9 bytes), where a published reading was
found the total the driver reports (MiB), and the compute architecture (``sm90``, ``gfx942``:
what decides vLLM's mxfp4 MoE backend); each with its source. :func:`gpu_memory`
answers the driver's figure when known, else the nominal one (lower, so a borderline answer errs
towards "does not fit"), and says which it used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvrules.errors import ConfigError

_MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One catalog entry.

    :ivar name: the catalog name; :ivar aliases: other names it answers to.
    :ivar nominal_bytes: the vendor's capacity; :ivar nominal_source: where it is published.
    :ivar driver_bytes: the driver's reported total, or ``None``; :ivar driver_source: its source.
    :ivar arch: the compute architecture (NVIDIA ``smXY`` for compute capability X.Y, AMD's
        ``gfx`` target); :ivar arch_source: where it is published.
    """

    name: str
    aliases: tuple[str, ...]
    nominal_bytes: int
    nominal_source: str
    driver_bytes: int | None
    driver_source: str | None
    arch: str
    arch_source: str

    @property
    def memory_bytes(self) -> int:
        """The figure the estimate uses: the driver's when known, else the nominal one."""
        return self.driver_bytes if self.driver_bytes is not None else self.nominal_bytes

    @property
    def memory_kind(self) -> str:
        """``driver`` or ``nominal``: which figure :attr:`memory_bytes` is."""
        return "driver" if self.driver_bytes is not None else "nominal"


@cache
def catalog() -> tuple[GPU, ...]:
    """Every GPU of the packaged catalog, in its order."""
    text = resources.files("kvrules.sizing").joinpath("gpus.json").read_text(encoding="utf-8")
    return tuple(
        GPU(
            name=e["name"],
            aliases=tuple(e["aliases"]),
            nominal_bytes=int(e["nominal_gb"] * 10**9),
            nominal_source=e["nominal_source"],
            driver_bytes=None if e["driver_mib"] is None else int(e["driver_mib"]) * _MIB,
            driver_source=e["driver_source"],
            arch=e["arch"],
            arch_source=e["arch_source"],
        )
        for e in json.loads(text)["gpus"]
    )


def _key(name: str) -> str:
    return name.strip().upper().replace("_", "-").replace(" ", "-")


def find_gpu(name: str) -> GPU:
    """The catalog entry called ``name`` (or one of its aliases; case, spaces and ``_`` ignored).

    :raises ConfigError: no entry has that name; the message lists the names there are.
    """
    wanted = _key(name)
    for gpu in catalog():
        if wanted in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            return gpu
    names = ", ".join(g.name for g in catalog())
    raise ConfigError(
        f"fit: GPU {name!r} is not in kvrules' catalog ({names}); give its memory with --gpu-memory SIZE"
    )
