"""Hostile values, by profile, and a renderer that writes any generated input as Python source.

``normal`` values are what a careless caller passes (0, negatives, floats, NaN, bools, strings,
numpy scalars, ``None``, containers); ``extreme`` values are beyond every real model (10**400,
2**63, integers too long to print) and non-string layer names.
"""

from __future__ import annotations

import enum
import math
from fractions import Fraction
from typing import Any

import numpy as np

from fuzz.draw import Draw

NAN = float("nan")
INF = float("inf")

NORMAL: tuple[Any, ...] = (
    0,
    -1,
    -16,
    1,
    3,
    1.5,
    16.0,
    -0.0,
    NAN,
    INF,
    -INF,
    True,
    False,
    "16",
    "",
    " ",
    None,
    np.int64(16),
    np.int32(-4),
    np.uint8(7),
    np.float64(16.0),
    np.bool_(True),
    [16],
    {},
    (16,),
    b"16",
    Fraction(1, 2),
    complex(1, 0),
    "bfloat16 ",
)

EXTREME: tuple[Any, ...] = (
    10**400,
    -(10**400),
    2**63,
    2**63 - 1,
    2**64,
    2**62,
    10**18,
    10**30,
    2**53 + 1,
    10**5000,
    1e308,
    5e-324,
    np.int64(2**63 - 1),
    np.int64(-(2**63)),
    np.uint64(2**64 - 1),
    INF,
    NAN,
)

#: layer names a careless caller or a hostile file gives
ODD_NAMES: tuple[Any, ...] = ("", " ", "\ud800", "層.0", "a\nb", "draft.", "x" * 300)
#: non-string layer names (the extreme profile uses them often)
NON_STRING_NAMES: tuple[Any, ...] = (0, 1, None, ("a",), b"a", 1.5, True, np.int64(2))

PROFILES = ("normal", "extreme")


def pool(profile: str) -> tuple[Any, ...]:
    """The hostile values of ``profile`` (``extreme`` includes the normal ones)."""
    return NORMAL if profile == "normal" else EXTREME + NORMAL[:12]


def hostile(draw: Draw, profile: str) -> Any:
    """One hostile value of ``profile``."""
    return draw.choice(pool(profile))


def maybe(draw: Draw, value: Any, profile: str, percent: int) -> Any:
    """``value`` usually; a hostile value of ``profile`` ``percent`` % of the time."""
    return hostile(draw, profile) if draw.chance(percent) else value


# -- rendering --------------------------------------------------------------------------------------


def _int_text(value: int) -> str:
    sign, a = ("-" if value < 0 else ""), abs(value)
    if a < 10**21:
        return repr(value)
    bits = a.bit_length()
    for k in (bits - 1, bits):
        for delta, suffix in ((0, ""), (1, " - 1"), (-1, " + 1")):
            if a + delta == 1 << k:
                text = f"2**{k}{suffix}"
                return f"-({text})" if sign else text
    k = round(bits * math.log10(2))
    for guess in (k - 1, k, k + 1):
        if guess > 0 and a == 10**guess:
            return f"{sign}10**{guess}"
    return f"{sign}{hex(a)}"


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "float('-inf')"
    return repr(value)


def _container(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in value.items()) + "}"
    items = ", ".join(render(v) for v in value)
    if isinstance(value, tuple):
        return f"({items},)" if len(value) == 1 else f"({items})"
    return f"[{items}]"


def render(value: Any) -> str:
    """``value`` as Python source (numpy scalars as ``np.int64(...)``, NaN as ``float('nan')``,
    huge integers as ``10**400`` / ``2**63 - 1`` / hex, never as thousands of digits)."""
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({render(value.item())})"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (dict, list, tuple)):
        return _container(value)
    if isinstance(value, enum.Enum):
        return f"kvrules.{type(value).__name__}.{value.name}"
    if isinstance(value, Fraction):
        return f"Fraction({value.numerator}, {value.denominator})"
    return repr(value)


__all__ = [
    "EXTREME",
    "NON_STRING_NAMES",
    "NORMAL",
    "ODD_NAMES",
    "PROFILES",
    "hostile",
    "maybe",
    "pool",
    "render",
]
