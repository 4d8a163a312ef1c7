"""Data-type names and sizes, without importing torch.

Specs store dtypes by their canonical torch name (``"bfloat16"``, ``"float8_e4m3fn"``) so that
planning never needs torch; :func:`to_torch` converts when buffers are really made.
"""

from __future__ import annotations

from typing import Any

from kvrules.errors import SpecError
from kvrules.values import shown

#: canonical name -> size in bytes
DTYPE_SIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

#: accepted aliases -> canonical name
DTYPE_ALIASES: dict[str, str] = {
    "float": "float32",
    "fp32": "float32",
    "double": "float64",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}


def dtype_name(value: Any, *, field: str = "dtype") -> str:
    """Return the canonical dtype name of ``value`` (a ``torch.dtype`` or a name).

    :raises SpecError: for an unknown dtype, naming ``field`` and listing the known names.
    """
    if isinstance(value, str):
        text = value
    elif type(value).__name__ == "dtype" and type(value).__module__.startswith("torch"):
        text = str(value)
    else:
        raise SpecError(
            f"{field}={shown(value)} is not a dtype; give a torch.dtype or one of {', '.join(sorted(DTYPE_SIZES))}"
        )
    if text.startswith("torch."):
        text = text[len("torch.") :]
    text = DTYPE_ALIASES.get(text, text)
    if text not in DTYPE_SIZES:
        raise SpecError(
            f"{field}={shown(value)} is not a known dtype; use one of {', '.join(sorted(DTYPE_SIZES))}"
        )
    return text


def dtype_size(name: str) -> int:
    """Bytes per element of the canonical dtype ``name``."""
    return DTYPE_SIZES[name]


def to_torch(name: str) -> Any:
    """The ``torch.dtype`` for a canonical name (imports torch lazily)."""
    import torch

    return getattr(torch, name)
