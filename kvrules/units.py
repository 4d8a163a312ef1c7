"""Byte sizes on the command line: ``1073741824``, ``40GiB``, ``512 MiB``, ``80GB``."""

from __future__ import annotations

import re

from kvrules.errors import ConfigError

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from an integer or a number with KiB/MiB/GiB/TiB (binary) or KB/MB/GB/TB (decimal)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _SIZE.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ConfigError(
            f"size {text!r} is not understood; write bytes (1073741824) or a number with "
            "KiB/MiB/GiB/TiB or KB/MB/GB/TB (e.g. 40GiB)"
        )
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value != int(value):
        raise ConfigError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """Comma-separated sizes, one per worker."""
    return [parse_size(part) for part in text.split(",") if part.strip()]


def format_size(value: int) -> str:
    """A byte count in the largest binary unit that keeps it readable."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= factor:
            return f"{value / factor:.2f} {unit}"
    return f"{value} B"
