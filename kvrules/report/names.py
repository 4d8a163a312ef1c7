"""Layer and group names shortened for reports, never cut in the middle of a word at the end.

* :func:`elide` keeps a name's head and tail, whole words each (a word ends at ``.``, ``_``,
  ``-``, ``/``, ``,`` or a space), and puts ``…`` where it cut: ``model.layers.0…layers.47.attn``.
* :func:`span` writes several alike names at once, in the shell's brace notation:
  ``model.layers.{0..44..4}.linear_attn`` (layers 0, 4, ..., 44).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import accumulate, pairwise

#: the characters that end a word
SEPARATORS = "._-/, "
#: the mark of an elision
ELLIPSIS = "…"
_SEP = re.escape(SEPARATORS)
#: a word with the separator after it; a ``{...}`` range of :func:`span` is one word
_PIECE = re.compile(rf"(?:\{{[^}}]*\}}|[^{_SEP}])*[{_SEP}]?")


def _pieces(text: str) -> list[str]:
    """``text`` as words, each with the separator that follows it (``["model.", "layers.", "0"]``)."""
    return [piece for piece in _PIECE.findall(text) if piece]


def _joined(pieces: list[str], head: int, tail: int) -> str:
    """The first ``head`` pieces (without their last separator), ``…``, the pieces from ``tail``."""
    start = "".join(pieces[:head])
    if start and start[-1] in SEPARATORS:
        start = start[:-1]
    return start + ELLIPSIS + "".join(pieces[tail:])


def _best_cut(pieces: list[str], limit: int) -> tuple[int, int] | None:
    """The run of pieces ``[head, tail)`` to cut so the rest fits in ``limit`` characters, the
    last piece always kept: the cut keeping the most words with digits (layer numbers), then the
    most characters, then the one nearest the middle; ``None`` when no cut of whole words fits."""
    ends = list(accumulate(map(len, pieces), initial=0))
    digits = list(accumulate((any(c.isdigit() for c in piece) for piece in pieces), initial=0))
    total, count = ends[-1], len(pieces)
    heads = [h for h in range(count) if ends[h] <= limit]
    tails = [t for t in range(1, count) if total - ends[t] <= limit]
    best: tuple[tuple[int, int, int], tuple[int, int]] | None = None
    for head in heads:
        for tail in (t for t in tails if t > head):
            if len(_joined(pieces, head, tail)) > limit:
                continue
            kept = ends[head] + total - ends[tail]
            score = (
                digits[head] + digits[count] - digits[tail],
                kept,
                -abs(ends[head] - (total - ends[tail])),
            )
            if best is None or score > best[0]:
                best = (score, (head, tail))
    return None if best is None else best[1]


def elide(text: str, limit: int = 48) -> str:
    """``text`` when it has at most ``limit`` characters; else whole words of its start and end
    around ``…`` (the cut chosen by :func:`_best_cut`: layer numbers kept where they fit), at
    most ``limit`` characters in all. A name with no cut of whole words that fits keeps its
    first and last characters.

    :raises ValueError: ``limit`` below 3.
    """
    if limit < 3:
        raise ValueError(f"elide(limit={limit}): the limit must be at least 3")
    if len(text) <= limit:
        return text
    pieces = _pieces(text)
    cut = _best_cut(pieces, limit)
    if cut is not None:
        return _joined(pieces, *cut)
    keep = limit - len(ELLIPSIS)
    return text[: keep - keep // 2] + ELLIPSIS + text[len(text) - keep // 2 :]


def _common_prefix(first: str, last: str) -> int:
    """Length of the longest common prefix of whole words (ending with a separator)."""
    size = 0
    for index, (a, b) in enumerate(zip(first, last, strict=False)):
        if a != b:
            break
        if a in SEPARATORS:
            size = index + 1
    return size


def _common_suffix(first: str, last: str) -> int:
    """Length of the longest common suffix of whole words (starting with a separator)."""
    return _common_prefix(first[::-1], last[::-1])


def _middles(names: Sequence[str]) -> tuple[str, list[str], str] | None:
    """The common prefix, each name's middle part and the common suffix (whole words), when
    every name has both and a non-empty middle; else ``None``."""
    first, last = names[0], names[-1]
    prefix = _common_prefix(first, last)
    suffix = _common_suffix(first, last)
    if not (prefix or suffix):
        return None
    head, tail = first[:prefix], first[len(first) - suffix :]
    middles = [name[prefix : len(name) - suffix] for name in names]
    fits = all(n.startswith(head) and n.endswith(tail) and len(n) > prefix + suffix for n in names)
    return (head, middles, tail) if fits else None


def _braces(middles: list[str]) -> str:
    """The middle parts in braces, as the shell writes them: ``{0..11}`` (consecutive numbers),
    ``{0..44..4}`` (numbers a step apart), ``{0,2,7}`` (up to three), else ``{0,…,9}``."""
    numbers = [int(m) for m in middles if m.isascii() and m.isdigit()]
    if len(numbers) == len(middles) > 2:
        step = numbers[1] - numbers[0]
        if step > 0 and all(b - a == step for a, b in pairwise(numbers)):
            return (
                f"{{{numbers[0]}..{numbers[-1]}}}"
                if step == 1
                else f"{{{numbers[0]}..{numbers[-1]}..{step}}}"
            )
    if len(middles) <= 3:
        return "{" + ",".join(middles) + "}"
    return f"{{{middles[0]},{ELLIPSIS},{middles[-1]}}}"


def span(names: Sequence[str], limit: int = 48) -> str:
    """``names`` in one label of at most ``limit`` characters (:func:`elide`): one name as it is;
    names alike but for a middle part as ``prefix{...}suffix`` (:func:`_braces`:
    ``model.layers.{0..44..4}.linear_attn``); else ``first … last``.

    :raises ValueError: ``names`` is empty.
    """
    if not names:
        raise ValueError("span(): no names given")
    if all(name == names[0] for name in names):
        return elide(names[0], limit)
    parts = _middles(names)
    if parts is not None:
        head, middles, tail = parts
        return elide(f"{head}{_braces(middles)}{tail}", limit)
    return elide(f"{names[0]} {ELLIPSIS} {names[-1]}", limit)


__all__ = ["ELLIPSIS", "SEPARATORS", "elide", "span"]
