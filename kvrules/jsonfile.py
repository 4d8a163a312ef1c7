"""Reading the documents kvrules is given (model files, Hugging Face ``config.json``): one reader
whose every refusal is a :class:`~kvrules.ModelFileError` naming the file.

What a readable document is:

* A **regular file** (a symbolic link to one is followed) of at most :data:`MAX_DOCUMENT_BYTES`
  bytes. A FIFO, a device (``/dev/zero``), a socket or a directory is refused before a byte is
  read, and opened without blocking, so a FIFO swapped in between the check and the open cannot
  hang the reader; the file is read with a bound, so one that grows while it is read is refused
  too.
* **UTF-8** text (a UTF-8 byte order mark is skipped). Anything else is refused naming the byte
  offset: invalid UTF-8, a UTF-16/UTF-32 byte order mark, or a NUL byte (UTF-16/32 text).
* **JSON** (``fmt="json"``) with **unique keys** in every object (the later value of a duplicate
  would silently win), or **TOML** (``fmt="toml"``; TOML refuses duplicate keys itself).
* Nested at most :data:`MAX_NESTING` levels (objects, arrays, inline tables, dotted keys). The
  text is scanned for its bracket depth *before* it is decoded, so the decoder never recurses
  deeply; a ``RecursionError`` can therefore not escape (and would be reported the same way).
* Every string (keys included) is valid Unicode: a lone surrogate escape (``"\\ud800"``) is refused,
  so whatever a document names can be printed and written as UTF-8.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
import tomllib
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any, Literal

from kvrules.errors import ModelFileError
from kvrules.values import shown

#: the deepest nesting a document may have; real model files and configs stay below 10
MAX_NESTING = 64

#: the largest document :func:`read_bytes` reads, in bytes (256 MiB). A Hugging Face
#: ``config.json`` is a few KiB; a model file lists one spec per layer (about 200 bytes each), so
#: even 100,000 layers with a spec of their own stay below 64 MiB. A larger file is refused before
#: it is read: it is not a model file, or not the one meant.
MAX_DOCUMENT_BYTES = 256 * 2**20

#: what a file that is not a regular file is, by the ``S_IS*`` test of its mode
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
#: ``os.open`` flags where the platform has them: never block on a FIFO, never become the
#: controlling terminal, never leak into a child process, no newline translation (Windows)
_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS: int = (
    os.O_RDONLY
    | _NONBLOCK
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)

Format = Literal["json", "toml"]

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
#: what hides brackets from the depth scan of TOML: strings and comments
_TOML_SKIPPED = re.compile(
    r"'''[\s\S]*?'''"
    r'|"""(?:[^"\\]|\\[\s\S]|"(?!""))*"""'
    r"|'[^'\n]*'"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|#[^\n]*"
)
_NOT_BRACKETS = {code: None for code in range(128) if chr(code) not in "[]{}"}
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
#: a JSON escape that may decode to a surrogate (only then is the decoded document walked)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _DuplicateKey(Exception):
    """Raised inside the JSON decoder by :func:`_unique_keys`."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _Constant(Exception):
    """Raised inside the JSON decoder by :func:`_refuse_constant`."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words, when it is not a regular file (else ``""``)."""
    if stat.S_ISREG(mode):
        return ""
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def _check_file(path: Path, what: str, hint: str, info: os.stat_result, limit: int) -> None:
    """Refuse what is not a regular file of at most ``limit`` bytes (``info``: its ``stat``)."""
    kind = _kind(info.st_mode)
    if kind == "a directory":
        raise ModelFileError(f"{path}: cannot read the {what}: it is a directory{hint}")
    if kind:
        raise ModelFileError(
            f"{path}: cannot read the {what}: it is {kind}, not a regular file; kvrules reads only "
            "regular files: save the document to a file and give its path"
        )
    if info.st_size > limit:
        over = info.st_size - limit
        unit = "byte" if over == 1 else "bytes"
        raise _too_large(path, what, f"it is {info.st_size:,} bytes, {over:,} {unit} over", limit)


def _too_large(path: Path, what: str, size: str, limit: int) -> ModelFileError:
    named = (
        f" ({limit // 2**20} MiB, kvrules.jsonfile.MAX_DOCUMENT_BYTES)" if limit == MAX_DOCUMENT_BYTES else ""
    )
    return ModelFileError(
        f"{path}: cannot read the {what}: {size} the limit of {limit:,} bytes{named}; a real "
        f"{what} is far smaller: check that this is the right file"
    )


def _read_bounded(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes from ``fd`` (``None``: there are more)."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return None if left <= 0 else b"".join(chunks)


def read_bytes(path: Path, what: str, *, hint: str = "", limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (:data:`MAX_DOCUMENT_BYTES`) of
    them; ``what`` (``"model file"``) and ``hint`` word the error.

    The file is checked with ``stat`` before it is opened (a FIFO or a device is never opened),
    opened without blocking and checked again with ``fstat`` (so a FIFO swapped in between cannot
    block), and read with a bound (so a file that grows while it is read cannot exhaust memory).

    :raises ModelFileError: the file is missing, a directory, a FIFO, a device or a socket, larger
        than ``limit``, or unreadable; naming the file, what it is and the fix.
    """
    try:
        _check_file(path, what, hint, os.stat(path), limit)
        fd = os.open(path, _OPEN_FLAGS)
        try:
            _check_file(path, what, hint, os.fstat(fd), limit)
            if _NONBLOCK:
                os.set_blocking(fd, True)  # a regular file: ordinary reads from here on
            data = _read_bounded(fd, limit)
        finally:
            os.close(fd)
    except ModelFileError:  # from _check_file (a ValueError)
        raise
    except FileNotFoundError:
        raise ModelFileError(f"{path}: cannot read the {what}: file not found{hint}") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path}: cannot read the {what}: it is a directory{hint}") from None
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    except ValueError as exc:  # an embedded NUL in the path
        raise ModelFileError(f"{shown(str(path))}: cannot read the {what} ({exc})") from None
    if data is None:
        raise _too_large(path, what, "reading it gave more bytes than", limit)
    return data


def decode_utf8(raw: bytes, source: str) -> str:
    """``raw`` as text (see the module docstring).

    :raises ModelFileError: not UTF-8, naming the byte offset.
    """
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise ModelFileError(
                f"{source}: the file is {name} (byte order mark at byte offset 0); kvrules reads "
                "UTF-8 only: save it as UTF-8"
            )
    start = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        text = raw[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        raise ModelFileError(
            f"{source}: not valid UTF-8 at byte offset {offset} (byte 0x{raw[offset]:02x}); "
            "save the file as UTF-8"
        ) from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ModelFileError(
            f"{source}: NUL byte at byte offset {nul}; the file looks like UTF-16 or UTF-32: save it as UTF-8"
        )
    return text


def _outside_json_strings(text: str) -> str:
    """``text`` without its JSON strings: once the escapes ``\\\\`` and ``\\"`` are gone, every
    ``"`` opens or closes a string (a backslash outside a string is a syntax error the decoder
    reports where it stands, before any bracket after it)."""
    return "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[0::2])


def nesting_depth(text: str, fmt: Format) -> int:
    """The deepest bracket nesting of ``text``, outside strings (and TOML comments)."""
    outside = _outside_json_strings(text) if fmt == "json" else _TOML_SKIPPED.sub("", text)
    marks = outside.translate(_NOT_BRACKETS)  # what is left besides brackets counts 0
    return max(accumulate(map(_STEP.get, marks, repeat(0))), default=0)


def _too_deep(source: str, depth: int | str) -> ModelFileError:
    return ModelFileError(
        f"{source}: nested {depth} levels deep; a document may nest at most {MAX_NESTING} levels"
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` that refuses a key given twice in one object."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _refuse_constant(name: str) -> Any:
    """A ``parse_constant`` hook that refuses ``NaN``, ``Infinity`` and ``-Infinity``."""
    raise _Constant(name)


def _decode_json(text: str, source: str, finite: bool) -> Any:
    try:
        return json.loads(
            text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant if finite else None
        )
    except json.JSONDecodeError as exc:
        raise ModelFileError(
            f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except _DuplicateKey as exc:
        raise ModelFileError(
            f"{source}: key {shown(exc.key)} appears twice in one JSON object; keys must be unique "
            "(the later value would silently replace the earlier)"
        ) from None
    except _Constant as exc:
        raise ModelFileError(f"{source}: {exc.name} is not allowed: JSON numbers are finite") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ModelFileError(f"{source}: invalid JSON: {exc}") from None


def _decode_toml(text: str, source: str) -> Any:
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ModelFileError(f"{source}: invalid TOML: {exc}") from None


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(f".{key}", item) for key, item in value.items()]
    if isinstance(value, list):
        return [(f"[{index}]", item) for index, item in enumerate(value)]
    return []


def _bad_string(source: str, where: str, text: str) -> ModelFileError:
    return ModelFileError(
        f"{source}: {where or 'the document'} holds the string {shown(text)}, which is not valid Unicode "
        "(a lone surrogate escape such as \\ud800); write the character itself or a surrogate pair"
    )


def _check_string(text: str, source: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad_string(source, where, text) from None


def check_document(data: Any, source: str) -> None:
    """Every string of the decoded ``data`` (keys included) is valid Unicode, and ``data`` nests at
    most :data:`MAX_NESTING` levels (walked without recursion).

    :raises ModelFileError: naming the place (``layers.a.type``) in ``source``.
    """
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, str):
            _check_string(value, source, where.lstrip("."))
            continue
        children = _children(value)
        if children and depth >= MAX_NESTING:
            raise _too_deep(source, f"more than {MAX_NESTING}")
        for step, item in children:
            if step.startswith("."):
                _check_string(step[1:], source, f"a key of {where.lstrip('.') or 'the top level'}")
            stack.append((where + step, item, depth + 1))


def loads(text: str, source: str, fmt: Format, *, finite: bool = False) -> Any:
    """Decode ``text`` (from ``source``, for messages) as ``fmt`` (see the module docstring);
    ``finite``: refuse JSON's non-standard ``NaN``, ``Infinity`` and ``-Infinity`` too.

    :raises ModelFileError: invalid syntax, a duplicate key, too deep, a lone surrogate, or
        (``finite``) one of those constants.
    """
    depth = nesting_depth(text, fmt)
    if depth > MAX_NESTING:
        raise _too_deep(source, depth)
    try:
        data = _decode_json(text, source, finite) if fmt == "json" else _decode_toml(text, source)
    except RecursionError:
        raise _too_deep(source, f"more than {MAX_NESTING}") from None
    # JSON depth is its bracket depth; TOML's dotted keys nest without brackets
    if fmt == "toml" or _SURROGATE_ESCAPE.search(text):
        check_document(data, source)
    return data


def as_path(path: Any, what: str) -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a :class:`~pathlib.Path`.

    :raises ModelFileError: anything else, naming ``what``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ModelFileError(f"the {what} must be given as a path, got {type(path).__name__} {shown(path)}")
    return Path(path)


def read_document(path: str | Path, what: str, fmt: Format, *, hint: str = "") -> Any:
    """Read and decode the ``fmt`` document at ``path`` (``what``: ``"model file"``, for messages).

    :raises ModelFileError: see :func:`as_path`, :func:`read_bytes`, :func:`decode_utf8` and
        :func:`loads`.
    """
    p = as_path(path, what)
    text = decode_utf8(read_bytes(p, what, hint=hint), str(p))
    return loads(text, str(p), fmt)


__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING",
    "as_path",
    "check_document",
    "decode_utf8",
    "loads",
    "nesting_depth",
    "read_bytes",
    "read_document",
]
