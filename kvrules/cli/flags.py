"""Integer flags of the command line: one parser with bounds for every ``N`` a command takes.

Values are written in ASCII digits only (``int()`` would read Arabic-Indic digits too) and checked
against a bound from :mod:`kvrules.values` while the arguments are parsed, so a 400-digit value is
a usage error naming the flag (exit code 2), never an ``OverflowError`` later.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence

from kvrules.errors import ConfigError
from kvrules.units import parse_int
from kvrules.values import MAX_BLOCKS, MAX_DIMENSION, MAX_LAYERS, MAX_TOKENS

AUTO = "auto"


def integer(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type=``: the flag's value as an ``int`` in ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        try:
            return parse_int(text, "", minimum=minimum, maximum=maximum)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "integer"
    return parse


def integer_list(text: str, flag: str, *, minimum: int, maximum: int) -> list[int]:
    """Comma-separated integers (``--tp 1,2,4,8``), each in ``[minimum, maximum]``.

    :raises ConfigError: an empty list or a bad entry, naming ``flag``.
    """
    values = [
        parse_int(part, flag, minimum=minimum, maximum=maximum) for part in text.split(",") if part.strip()
    ]
    if not values:
        raise ConfigError(f"{flag} is empty; give comma-separated integers, e.g. 1,2,4,8")
    return values


#: a token count that is at least 1 (``--max-model-len``, ``--block-size``)
TOKENS = integer(1, MAX_TOKENS)
#: a token count that may be 0 (``--max-num-batched-tokens``, ``--num-speculative-tokens``)
TOKENS_OR_ZERO = integer(0, MAX_TOKENS)
#: ``--num-gpu-blocks-override``
BLOCKS = integer(1, MAX_BLOCKS)
#: a parallel size (``--tp``)
PARALLEL = integer(1, MAX_DIMENSION)
#: a number of pipeline stages (``--workers``): at most one per layer
WORKERS = integer(1, MAX_LAYERS)
#: a worker index (``--worker``)
WORKER_INDEX = integer(0, MAX_LAYERS - 1)


def dash_value_hint(message: str, argv: Sequence[str]) -> str:
    """A hint for argparse's ``expected one argument`` when the flag's value in ``argv`` starts
    with ``-`` (``--strategies -stride-pad``): join it with ``=``. ``""`` otherwise."""
    match = re.match(r"argument ([^:]+): expected one argument", message)
    if match is None:
        return ""
    spellings = match.group(1).split("/")
    for index, token in enumerate(argv[:-1]):
        value = argv[index + 1]
        if token in spellings and value.startswith("-"):
            return f"; a value starting with '-' must be joined to its flag: {spellings[-1]}={value}"
    return ""


def length_or_auto(text: str) -> int | str:
    """``--max-model-len N|auto``: ``"auto"`` or a token count."""
    return AUTO if text.strip() == AUTO else TOKENS(text)


length_or_auto.__name__ = "length"


__all__ = [
    "AUTO",
    "BLOCKS",
    "PARALLEL",
    "TOKENS",
    "TOKENS_OR_ZERO",
    "WORKERS",
    "WORKER_INDEX",
    "dash_value_hint",
    "integer",
    "integer_list",
    "length_or_auto",
]
