"""Typed reading of JSON values into msgspec records, every refusal a ``ModelFileError``."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from kvrules.errors import ModelFileError
from kvrules.values import shown

T = TypeVar("T")

_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
#: the pattern of a name (:data:`kvrules.decisions.Name`)
UTF8_PATTERN = r"^[^\ud800-\udfff]*$"
_CHOICE = re.compile(r"`str` matching regex '\^\((.*)\)\$'")


def typed(data: Any, kind: type[T], where: str, prefix: str = "") -> T:
    """``data`` (JSON values) as a ``kind`` (:func:`msgspec.convert`, strict: no bool for an
    integer, no float for an integer, no string for a number).

    :raises ModelFileError: naming the field (``where`` for ``data`` itself, else ``prefix``
        and the path inside), its value and what msgspec expected there.
    """
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as e:
        raise ModelFileError(_explained(data, str(e), where, prefix)) from None


def _explained(data: Any, message: str, where: str, prefix: str) -> str:
    """``message`` of msgspec (``Expected `int` >= 0 - at `$.a[0].b```) as kvrules says it."""
    expected, _, path = message.partition(" - at `")
    place, value, found = prefix, data, True
    for key, index in (m.groups() for m in _STEP.finditer(path.rstrip("`").removeprefix("$"))):
        dot = "." if place and place != prefix else ""
        place += f"{dot}{key}" if key else f"[{index}]" if index else "[...]"
        if found and key is not None and isinstance(value, dict) and key in value:
            value = value[key]
        elif found and index is not None and isinstance(value, list | tuple) and int(index) < len(value):
            value = value[int(index)]
        else:
            found = False
    place = where if place == prefix else place
    expected = _CHOICE.sub(lambda m: "one of " + m.group(1).replace("|", ", "), expected)
    expected = expected.replace(f" matching regex {UTF8_PATTERN!r}", " writable as UTF-8 (no lone surrogate)")
    missing = re.match(r"Object missing required field `(.*)`", expected)
    if missing:
        return f"{place}: the key {missing.group(1)!r} is missing"
    shown_value = f" = {shown(value)}" if found else ""
    return f"{place}{shown_value} is not allowed: {expected[:1].lower()}{expected[1:]}"
