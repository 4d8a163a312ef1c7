"""The transformers reader: a ``config.json`` read through transformers' own config classes,
offline, so class defaults, renamed keys and nested text configs resolve as vLLM sees them
(vLLM reads ``hf_config.get_text_config()``).

* transformers is imported only when a config is read this way (``import kvrules`` never imports
  it). kvrules never changes the process's environment (no ``HF_HUB_OFFLINE``: huggingface_hub
  reads it once, at import, so setting it would make every later hub access of the host process,
  an engine loading weights say, run offline).
* Offline by construction, per call: the class is looked up by ``model_type`` in transformers' own
  mapping (``CONFIG_MAPPING``) and built from the decoded dict (``from_dict``, which takes no
  ``local_files_only``: it never reaches the hub); nothing else of transformers is called, so
  nothing is downloaded, no weights are loaded, no remote code runs.
  Model types transformers has no class for, and :data:`~kvrules.hf.defaults.REMOTE_CODE_MODEL_TYPES`,
  are left to the built-in reader (:func:`transformers_class` answers ``None``).
* Any exception transformers raises while building the class (its strict-dataclass validation,
  ``ValueError`` for a ``layer_types`` length mismatch, ...) becomes a
  :class:`~kvrules.ModelFileError` naming the file, the field when one can be told, and
  transformers' own words.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kvrules.errors import KVRulesError, ModelFileError
from kvrules.hf.defaults import CACHE_FIELDS, REMOTE_CODE_MODEL_TYPES

_FIELD_ERROR = re.compile(r"Validation error for field '([^']+)'")
_VALIDATOR = re.compile(r"validator '(?:validate_)?([^']+)'")
_NAMED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`|'([A-Za-z_][A-Za-z0-9_]*)'")
_EXPECTED = re.compile(r"expected (\w+)")
_KINDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
}


@functools.cache
def transformers_installed() -> bool:
    """True when ``transformers`` is installed and imports (it is imported on the first call: a
    broken installation reads as absent, so the built-in reader takes over)."""
    if importlib.util.find_spec("transformers") is None:
        return False
    try:
        _transformers()
    except ImportError:
        return False
    return True


def _transformers() -> Any:
    """The ``transformers`` module (imported on first use; the environment is left alone)."""
    return importlib.import_module("transformers")


def transformers_version() -> str:
    """The installed transformers version (imports it)."""
    return str(_transformers().__version__)


def transformers_class(model_type: str) -> Any | None:
    """transformers' config class for ``model_type``, or ``None`` when the built-in reader must
    read it (no such class, or a remote-code type)."""
    if not model_type or model_type in REMOTE_CODE_MODEL_TYPES:
        return None
    mapping = _transformers().CONFIG_MAPPING
    return mapping[model_type] if model_type in mapping else None


@contextmanager
def _quiet() -> Iterator[None]:
    """transformers' warnings (deprecated keys, ...) silenced while a config is built."""
    logging = _transformers().utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


@dataclass(frozen=True)
class TransformersReading:
    """What transformers made of a file: the text config's fields (``values``, every attribute
    of :data:`~kvrules.hf.defaults.CACHE_FIELDS` included, renamed keys readable under both
    names), the class that read it, and the version."""

    values: dict[str, Any]
    class_name: str
    version: str
    aliases: dict[str, str]


def _field_named(text: str, data: Mapping[str, Any]) -> str | None:
    """The field an error message is about: the strict-dataclass field, else the first name in
    quotes or backticks that is a cache field or a key of the file."""
    match = _FIELD_ERROR.search(text)
    if match:
        return match.group(1)
    text_keys = set(data) | {k for v in data.values() if isinstance(v, Mapping) for k in v}
    names = [n for m in _NAMED.finditer(text) if (n := m.group(1) or m.group(2))]
    fields = [n for n in names if n in CACHE_FIELDS or n in text_keys]
    validator = _VALIDATOR.search(text)
    if validator:  # ``validate_layer_type`` is about ``layer_types``
        about = [n for n in fields if n.startswith(validator.group(1))]
        fields = about or fields
    if fields:
        return fields[0]
    return _holding(names, data)


def _holding(values: list[str], data: Mapping[str, Any]) -> str | None:
    """The field whose value holds one of the quoted ``values`` (``'X'`` in a pattern ``"MX"``)."""
    levels = [data, *(v for v in data.values() if isinstance(v, Mapping))]
    for value in values:
        for level in levels:
            for key, given in level.items():
                if isinstance(given, (str, list)) and value in given:
                    return str(key)
    return None


def _problem(text: str, field: str | None) -> str:
    """The refusal in kvrules' words: what the field must be, when transformers says it."""
    expected = _EXPECTED.search(text) if field else None
    kind = _KINDS.get(expected.group(1)) if expected else None
    return f"; it must be {kind}" if kind else ""


def as_model_file_error(
    exc: BaseException, source: str, class_name: str, data: Mapping[str, Any], where: Any
) -> ModelFileError:
    """``exc`` (raised by transformers' ``class_name``) as a :class:`ModelFileError` naming the
    file and the field; ``where`` maps a field to its spelling in the file."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    field = _field_named(text, data)
    said = text if len(text) <= 1200 else text[:1197] + "..."
    if field is None:
        return ModelFileError(f"{source}: transformers' {class_name} cannot read the config: {said}")
    entry = _odd_entry(_given(data, field), text)
    return ModelFileError(
        f"{source}: field {where(field)!r}{entry} is refused by transformers' {class_name}"
        f"{_problem(text, field)} ({said})"
    )


def _given(data: Mapping[str, Any], key: str) -> Any:
    """The file's value of ``key`` (a sub-config's first)."""
    for value in data.values():
        if isinstance(value, Mapping) and key in value:
            return value[key]
    return data.get(key)


def _odd_entry(value: Any, text: str) -> str:
    """`` (entry 7 is 'mystery')`` when ``value`` is a list of names of which exactly some are not
    in transformers' message (which then lists what is allowed), else ``""``."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return ""
    allowed = re.split(r"\bbut got\b", text)[0]  # the part that names what is allowed
    odd = [(i, v) for i, v in enumerate(value) if v not in allowed]
    if not odd or len(odd) == len(value):
        return ""
    index, entry = odd[0]
    return f" (entry {index} is {entry!r})"


def _attribute(config: Any, key: str) -> tuple[bool, Any]:
    try:
        return True, getattr(config, key)
    except Exception:  # a property of the class that cannot answer for this file
        return False, None


def _values(text_config: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(text_config.to_dict())
    for key in CACHE_FIELDS:
        known, value = _attribute(text_config, key)
        if known:
            values[key] = value
    for alias, name in type(text_config).attribute_map.items():
        if name in values:
            values[alias] = values[name]
    return values


#: how transformers writes a float JSON cannot hold (``{"__float__": "Infinity"}``), and its value
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def special_floats(value: Any) -> Any:
    """``value`` with every ``{"__float__": "Infinity"}`` object (how transformers 5 saves a
    non-finite float, e.g. Mamba2's ``time_step_limit`` ``(0.0, inf)``) turned back into the float,
    as transformers does when it reads its own files; anything else unchanged."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get("__float__") in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[value["__float__"]]
        return {key: special_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [special_floats(item) for item in value]
    return value


def read_with_transformers(cls: Any, data: Mapping[str, Any], source: str, where: Any) -> TransformersReading:
    """Build ``cls`` (from :func:`transformers_class`) from ``data`` and read its text config.

    :raises ModelFileError: transformers refused the file (naming the field when it can be told).
    """
    try:
        with _quiet():
            config = cls.from_dict(special_floats(copy.deepcopy(dict(data))))
            text_config = config.get_text_config()
            values = _values(text_config)
    except KVRulesError:
        raise
    except Exception as exc:  # transformers' own refusal, whatever its class
        raise as_model_file_error(exc, source, cls.__name__, data, where) from None
    aliases = {str(a): str(n) for a, n in type(text_config).attribute_map.items()}
    return TransformersReading(values, type(text_config).__name__, transformers_version(), aliases)


__all__ = [
    "TransformersReading",
    "as_model_file_error",
    "read_with_transformers",
    "transformers_class",
    "transformers_installed",
    "transformers_version",
]
