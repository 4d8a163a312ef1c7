"""Byte sizes and integers as written in files and on the command line: ``1073741824``, ``40GiB``,
``512 MiB``, ``80GB``, ``1.5GiB``; ``4096``.

Numbers are written in ASCII digits ``0-9`` only (Python's ``int()`` would also read Arabic-Indic
or full-width digits) and read exactly (integers and fractions, never floats), so a size with
more digits than a float holds is an error that names it, never an ``OverflowError``. A size is
at most :data:`~kvrules.values.MAX_BYTES` (torch sizes are int64).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from kvrules.errors import ConfigError, KVRulesError
from kvrules.values import MAX_BYTES, allowed_range, as_int, shown

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
_SIZE = re.compile(r"\s*([0-9]+)(?:\.([0-9]+))?\s*([a-zA-Z]*)\s*", re.ASCII)
_INTEGER = re.compile(r"\s*([+-]?)([0-9]+)\s*", re.ASCII)
#: more digits than this cannot be a size or a bounded count (MAX_BYTES has 19); refused unread
MAX_DIGITS = 40


def _size_error(text: Any) -> ConfigError:
    return ConfigError(
        f"size {shown(text)} is not understood; write bytes (1073741824) or a number with "
        "KiB/MiB/GiB/TiB or KB/MB/GB/TB (e.g. 40GiB), in ASCII digits"
    )


def _bytes_error(text: Any) -> ConfigError:
    return ConfigError(
        f"size {shown(text)} is not allowed: sizes are whole numbers of bytes from 0 to "
        f"{MAX_BYTES} (torch sizes are int64)"
    )


def _checked_bytes(value: Any, text: Any) -> int:
    """An integer byte count in ``[0, MAX_BYTES]``."""
    try:
        return as_int(value, "size", minimum=0, maximum=MAX_BYTES, error=ConfigError)
    except KVRulesError:
        raise _bytes_error(text) from None


def parse_size(text: str | int) -> int:
    """Bytes from an integer or a number with KiB/MiB/GiB/TiB (binary) or KB/MB/GB/TB (decimal).

    :raises ConfigError: anything else (floats and bools included), a fraction of a byte, or more
        than :data:`~kvrules.values.MAX_BYTES`.
    """
    if not isinstance(text, str):
        if isinstance(text, (bool, float)) or text is None:
            raise _size_error(text)
        return _checked_bytes(text, text)
    match = _SIZE.fullmatch(text)
    if not match or match.group(3).lower() not in _UNITS:
        raise _size_error(text)
    whole, fraction, unit = match.groups()
    if len(whole.lstrip("0")) + len(fraction or "") > MAX_DIGITS:
        raise _bytes_error(text)
    value = Fraction(int(whole)) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    value *= _UNITS[unit.lower()]
    if value.denominator != 1:
        raise ConfigError(f"size {shown(text)} is not a whole number of bytes")
    return _checked_bytes(value.numerator, text)


def parse_sizes(text: str) -> list[int]:
    """Comma-separated sizes, one per worker."""
    return [parse_size(part) for part in text.split(",") if part.strip()]


def parse_int(text: str, what: str, *, minimum: int, maximum: int) -> int:
    """The integer ``text`` written in ASCII digits (an optional sign), in ``[minimum, maximum]``.

    :param what: the flag or field, for messages (``--max-model-len``; empty: the value alone).
    :raises ConfigError: not an integer in ASCII digits, or out of range (a 400-digit value is
        refused without being converted).
    """
    allowed = allowed_range("an integer", minimum, maximum)
    subject = f"{what} {shown(text)}" if what else shown(text)
    match = _INTEGER.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"{subject} is not allowed: {allowed}, written in ASCII digits 0-9")
    sign, digits = match.groups()
    if len(digits.lstrip("0")) > MAX_DIGITS:
        raise ConfigError(f"{subject} is not allowed: {allowed}")
    value = -int(digits) if sign == "-" else int(digits)
    if not minimum <= value <= maximum:
        raise ConfigError(f"{subject} is not allowed: {allowed}")
    return value


def format_size(value: int) -> str:
    """A byte count in the largest binary unit that keeps it readable."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= factor:
            return f"{value / factor:.2f} {unit}"
    return f"{value} B"
