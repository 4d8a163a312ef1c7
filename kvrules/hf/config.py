"""Reading a Hugging Face ``config.json`` with errors that name the file and the field.

:class:`HFConfig` wraps the decoded document. Multimodal wrappers (Gemma 3, Llama 4, Qwen3.5)
keep the language model's fields under ``text_config`` (or ``llm_config`` / ``language_config``);
:meth:`HFConfig.get` looks there first and falls back to the top level, and every error names
the field as it is spelled in the file (``text_config.num_key_value_heads``).

Values resolve through one of two **readers** (:attr:`HFConfig.reading`), chosen on first use:

* ``built-in``: the class defaults of :mod:`kvrules.hf.defaults` (transformers' own, for every
  model type of :data:`~kvrules.hf.defaults.CLASS_DEFAULTS`; ``tests/hf/test_hf_readers.py``
  holds both readers to the same specs). ``reader="auto"`` (the default) takes it for every
  model type it knows, so the front door never waits for transformers' import (seconds, cold);
* ``transformers`` (:mod:`kvrules.hf.transformers_config`, imported only then): the file is
  built into transformers' own config class offline, so class defaults, renamed keys and the
  text sub-config resolve as vLLM sees them. ``auto`` takes it for the model types the built-in
  reader does not know, when transformers is installed; ``reader="transformers"`` always.

The raw-file limits (:meth:`HFConfig.check_layer_counts`) run on the file itself before either
reader sees it. :meth:`HFConfig.origin` says where a value came from (the file, a class default,
or the class changing the file's value), and :meth:`HFConfig.reading_note` says it in a sentence.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from kvrules.errors import ConfigError, KVRulesError, ModelFileError
from kvrules.hf import transformers_config as tf
from kvrules.hf.defaults import (
    BOOL_FIELDS,
    CACHE_FIELDS,
    CLASS_DEFAULTS,
    DEFAULTS_VERSION,
    LIST_FIELDS,
    NUMBER_FIELDS,
    REMOTE_CODE_MODEL_TYPES,
    TEXT_CONFIG_KEYS,
    TEXT_FIELDS,
    resolve_defaults,
    text_model_type,
)
from kvrules.jsonfile import as_path, read_document
from kvrules.values import MAX_BYTES, MAX_DIMENSION, MAX_TOKENS, as_int, shown

_MISSING: Any = object()

_Accessor = TypeVar("_Accessor", bound=Callable[..., Any])

#: the accessors of :class:`HFConfig` whose first argument names the field (or fields) asked for:
#: on a tracked config (:attr:`HFConfig.reads` a set) each call records them
ACCESSORS = ("get", "has", "integer", "opt_int", "number", "string", "sequence", "flag")


def recorded(method: _Accessor) -> _Accessor:
    """``method`` (an accessor of :data:`ACCESSORS`) adding the field it is asked for to
    ``self.reads`` when that is a set (a tracked config); applied where the class is defined,
    never at run time, so every config pickles as its own class."""
    if getattr(method, "records_reads", False):
        return method

    @functools.wraps(method)
    def accessor(self: HFConfig, key: Any, *args: Any, **kwargs: Any) -> Any:
        asked = self.reads
        if asked is not None:
            asked.update([key] if isinstance(key, str) else key)
        return method(self, key, *args, **kwargs)

    accessor.records_reads = True  # type: ignore[attr-defined]
    return cast(_Accessor, accessor)


#: the most layers one field of a Hugging Face config may count (``num_hidden_layers``, MTP
#: layers): the largest real models have a few hundred; the bound is checked before anything is
#: built (a mutated ``num_hidden_layers: 1000000`` would otherwise build and plan for minutes)
MAX_HF_LAYERS = 100_000

#: fields that count layers (bounded by :data:`MAX_HF_LAYERS`)
LAYER_COUNT_FIELDS = ("num_hidden_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers")

#: fields with one entry per layer (their length is bounded by :data:`MAX_HF_LAYERS` too)
PER_LAYER_FIELDS = ("layer_types", "layers_block_type", "no_rope_layers", "hybrid_override_pattern")

#: fields measured in tokens (bounded by :data:`~kvrules.values.MAX_TOKENS`)
TOKEN_FIELDS = (
    "max_position_embeddings",
    "sliding_window",
    "attention_chunk_size",
    "mamba_chunk_size",
    "chunk_size",
)


def default_maximum(key: str) -> tuple[int, str]:
    """The largest value :meth:`HFConfig.integer` accepts for ``key``, and why: layer counts
    :data:`MAX_HF_LAYERS`, token counts ``MAX_TOKENS``, every other integer (heads, head and
    state dimensions, periods) ``MAX_DIMENSION``."""
    if key in LAYER_COUNT_FIELDS:
        return MAX_HF_LAYERS, "the most layers kvrules builds from a Hugging Face config"
    if key in TOKEN_FIELDS:
        return MAX_TOKENS, "the most tokens kvrules plans for"
    return MAX_DIMENSION, "the largest dimension kvrules accepts"


def config_path(path: str | Path) -> Path:
    """``path`` itself, or ``path/config.json`` when ``path`` is a directory.

    :raises ModelFileError: ``path`` is not a ``str`` or path.
    """
    p = as_path(path, "Hugging Face config")
    return p / "config.json" if p.is_dir() else p


def read_config(path: str | Path) -> tuple[dict[str, Any], str]:
    """Decode the JSON config at ``path`` (a file or a directory holding ``config.json``) with
    :func:`kvrules.jsonfile.read_document` (UTF-8, unique keys, bounded nesting).

    :raises ModelFileError: missing file, unreadable file, not UTF-8, invalid JSON, or a top level
        that is not an object.
    """
    p = config_path(path)
    hint = " (the directory has no config.json)" if Path(path).is_dir() else ""
    data = read_document(
        p, "Hugging Face config", "json", hint=f"{hint}; give a config.json or the directory holding it"
    )
    if not isinstance(data, dict):
        raise ModelFileError(
            f"{p}: the top level of a config.json must be an object, got {type(data).__name__}"
        )
    return data, str(p)


#: ``reader=`` values: ``auto`` (the built-in reader for the model types it knows, else
#: transformers when installed, else the built-in reader), or one of the two
READERS = ("auto", "transformers", "builtin")
TRANSFORMERS = "transformers"
BUILTIN = "built-in"


def check_reader(reader: object) -> None:
    """Refuse a ``reader`` that is not one of :data:`READERS`.

    :raises ConfigError: naming the value and the readers.
    """
    if not isinstance(reader, str) or reader not in READERS:
        raise ConfigError(
            f"reader={shown(reader)} is not a Hugging Face config reader; use one of {', '.join(READERS)}"
        )


#: what :meth:`HFConfig.origin` answers
FILE = "file"
CLASS_DEFAULT = "class default"
CHANGED = "changed by the config class"
ABSENT = "absent"


@dataclass(frozen=True)
class Reading:
    """How a config was read.

    :ivar reader: :data:`TRANSFORMERS` or :data:`BUILTIN`.
    :ivar values: the text-level fields as the reader resolved them (class defaults filled in).
    :ivar seen: the fields the file itself gives at that level (a reader's ``None`` for one of
        them is meant: a null in the file, or a value the class cleared).
    :ivar class_name: the config class whose defaults apply (``None``: kvrules knows none).
    :ivar why: why this reader was used.
    :ivar aliases: the class's renamed keys (a file spelling -> the field it sets).
    """

    reader: str
    values: Mapping[str, Any]
    seen: frozenset[str]
    class_name: str | None
    why: str
    aliases: Mapping[str, str] = field(default_factory=dict)

    def spellings(self, key: str) -> tuple[str, ...]:
        """``key`` and the other names the class reads it under."""
        others = [a for a, n in self.aliases.items() if n == key] + [
            n for a, n in self.aliases.items() if a == key
        ]
        return (key, *others)

    def describe(self) -> str:
        """``transformers (Gemma3TextConfig): transformers 5.20.2 is installed``."""
        cls = f" ({self.class_name})" if self.class_name else ""
        return f"{self.reader} reader{cls}: {self.why}"


class HFConfig:
    """A decoded ``config.json`` with typed, validated field access.

    :param data: the decoded JSON object.
    :param source: where it came from (a path), used in every error message.
    :param reader: ``auto`` (the built-in reader for a model type it knows, else transformers
        when installed), ``transformers`` or ``builtin`` (:data:`READERS`); the reading happens
        on the first value asked for.
    :raises ConfigError: an unknown ``reader``.

    :ivar reads: ``None``, or on a tracked copy (:func:`kvrules.hf.select.tracked`) the set of
        fields an architecture has asked for through :data:`ACCESSORS` (a subclass's own
        accessors record too).
    """

    reads: set[str] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ACCESSORS:
            method = cls.__dict__.get(name)
            if callable(method):
                setattr(cls, name, recorded(method))

    def __init__(self, data: Mapping[str, Any], source: str, *, reader: str = "auto") -> None:
        check_reader(reader)
        self.data = data
        self.source = source
        self.reader = reader
        self.text_key = next((k for k in TEXT_CONFIG_KEYS if isinstance(data.get(k), Mapping)), "text_config")
        text = data.get(self.text_key)
        self.text: Mapping[str, Any] | None = text if isinstance(text, Mapping) else None
        self.used: dict[str, None] = {}
        self._reading: Reading | None = None

    @classmethod
    def load(cls, path: str | Path, *, reader: str = "auto") -> HFConfig:
        """Read ``path`` (a ``config.json`` or a directory holding one)."""
        data, source = read_config(path)
        return cls(data, source, reader=reader)

    # -- identity -----------------------------------------------------------------------
    @property
    def model_type(self) -> str:
        """The top-level ``model_type`` (empty when absent)."""
        value = self.data.get("model_type")
        return value if isinstance(value, str) else ""

    @property
    def text_model_type(self) -> str:
        """``text_config.model_type`` when present, else :attr:`model_type`."""
        if self.text is not None and isinstance(self.text.get("model_type"), str):
            return str(self.text["model_type"])
        return self.model_type

    @property
    def architectures(self) -> tuple[str, ...]:
        """The ``architectures`` list (class names), empty when absent."""
        value = self.data.get("architectures")
        if isinstance(value, list):
            return tuple(v for v in value if isinstance(v, str))
        return ()

    @property
    def title(self) -> str:
        """A short human name: the first architecture class, else the model type."""
        return self.architectures[0] if self.architectures else (self.model_type or "unknown model")

    @property
    def has_text_config(self) -> bool:
        """True for multimodal wrappers whose language model sits under ``text_config``."""
        return self.text is not None

    # -- reading ------------------------------------------------------------------------
    @property
    def reading(self) -> Reading:
        """How the config is read (read on first use, after :meth:`check_layer_counts`).

        :raises ModelFileError: a raw-file limit, or transformers refusing the file.
        """
        if self._reading is None:
            self.check_layer_counts()
            self._reading = self._read()
        return self._reading

    def _text_level(self) -> Mapping[str, Any]:
        return self.text if self.text is not None else self.data

    def _read(self) -> Reading:
        seen = frozenset(self._text_level())
        if self.reader == "builtin":
            return self._builtin(seen, "the built-in reader was asked for")
        if self.reader == "auto" and self.builtin_knows:
            return self._builtin(seen, self._known_reason())
        if not tf.transformers_installed():
            if self.reader == TRANSFORMERS:
                raise ConfigError("reader='transformers' needs transformers; install kvrules[hf]")
            return self._builtin(seen, "transformers is not installed")
        cls = tf.transformers_class(self.model_type)
        if cls is None:
            return self._builtin(seen, self._no_class_reason())
        found = tf.read_with_transformers(cls, self.data, self.source, self.where)
        why = f"transformers {found.version}"
        entry = CLASS_DEFAULTS.get(text_model_type(self.model_type, self.text))
        aliases = {**(entry.renames if entry else {}), **found.aliases}  # the class's older spellings too
        return Reading(TRANSFORMERS, found.values, seen, found.class_name, why, aliases)

    @property
    def builtin_knows(self) -> bool:
        """True when the built-in reader has the class defaults of this config's (text) model
        type (:data:`~kvrules.hf.defaults.CLASS_DEFAULTS`): ``reader="auto"`` then reads it
        without transformers."""
        return text_model_type(self.model_type, self.text) in CLASS_DEFAULTS

    def _known_reason(self) -> str:
        known = text_model_type(self.model_type, self.text)
        return (
            f"model type {known!r} is in its table of transformers {DEFAULTS_VERSION}'s class defaults "
            "(reader='transformers' reads it through transformers)"
        )

    def _no_class_reason(self) -> str:
        if not self.model_type:
            return "the config names no model_type"
        if self.model_type in REMOTE_CODE_MODEL_TYPES:
            return f"model type {self.model_type!r} is remote code in transformers, which kvrules never runs"
        return (
            f"transformers {tf.transformers_version()} has no config class for model type {self.model_type!r}"
        )

    def _builtin(self, seen: frozenset[str], why: str) -> Reading:
        values, entry = resolve_defaults(text_model_type(self.model_type, self.text), self._text_level())
        if entry is None:
            return Reading(BUILTIN, values, seen, None, why)
        return Reading(BUILTIN, values, seen, entry.class_name, why, entry.spellings())

    def spelling(self, key: str) -> str:
        """The name the file gives ``key`` under: ``key``, or the class's other name for it
        (``num_mtp_layers`` for DeepSeek V3's ``num_nextn_predict_layers``) once the config is read."""
        if self._reading is None:
            return key
        level = self._text_level()
        return next((k for k in self._reading.spellings(key) if level.get(k) is not None), key)

    def raw(self, key: str) -> Any:
        """The file's own value of the field spelt ``key`` (``text_config`` first), ``None`` when
        absent or null; no class default, no other spelling."""
        if self.text is not None and self.text.get(key) is not None:
            return self.text[key]
        return self.data.get(key)

    def given(self, key: str) -> Any:
        """What the file gives for ``key`` under any of its names (:meth:`spelling`), ``None``
        when it gives nothing."""
        return self.raw(self.spelling(key))

    def origin(self, key: str) -> str:
        """Where the value of ``key`` comes from: :data:`FILE`, :data:`CLASS_DEFAULT`,
        :data:`CHANGED` (the class replaced the file's value) or :data:`ABSENT`."""
        value = self.get(key)
        if value is None:
            return ABSENT
        raw = self.given(key)
        if raw is None:
            return CLASS_DEFAULT
        return FILE if raw == value else CHANGED

    def describe_value(self, key: str) -> str:
        """``text_config.head_dim = 256 (Gemma3TextConfig class default)``; names the field's
        origin for decisions (``... (from the file)``)."""
        value, origin = self.get(key), self.origin(key)
        cls = self.reading.class_name or "the config class"
        if origin == FILE:
            where = "from the file"
        elif origin == ABSENT:
            where = "absent"
        elif origin == CHANGED:
            where = f"{cls} replaced the file's {shown(self.given(key), 30)}"
        else:
            where = f"{cls} default"
        return f"{self.where(key)} = {shown(value, 40)} ({where})"

    def first_present(self, keys: Sequence[str]) -> str | None:
        """The first of ``keys`` that has a value (from the file or a class default), else ``None``:
        what a decision names when a count may sit under several keys."""
        return next((k for k in keys if self.get(k) is not None), None)

    def defaulted(self) -> tuple[str, ...]:
        """The fields asked for so far whose value is not the file's (class defaults and values
        the class changed), in the order first asked."""
        return tuple(k for k in self.used if self.origin(k) in (CLASS_DEFAULT, CHANGED))

    def reading_note(self) -> str:
        """One sentence for the decisions: the reader, and every value asked for that did not
        come from the file (``read by the transformers reader (Gemma3TextConfig): transformers
        5.20.2; class defaults: text_config.head_dim = 256``)."""
        note = f"read by the {self.reading.describe()}"
        keys = self.defaulted()
        if keys:
            note += "; not from the file: " + ", ".join(self.describe_value(k) for k in keys)
        return note

    # -- lookup -------------------------------------------------------------------------
    def where(self, key: str) -> str:
        """The field's spelling in the file: ``text_config.KEY`` when read from there (the
        class's other name for it when the file uses that one)."""
        key = self.spelling(key)
        if self.text is not None and key in self.text:
            return f"{self.text_key}.{key}"
        if key in self.data or self.text is None:
            return key
        return f"{self.text_key}.{key}"

    @recorded
    def has(self, key: str) -> bool:
        """True when ``key`` has a value (from the file or a class default)."""
        return self.get(key) is not None

    @recorded
    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` as the reader resolved it (the text config's, class defaults
        included), else the file's own (``text_config`` first, then the top level), else
        ``default`` (also for null)."""
        self.used[key] = None
        reading = self.reading
        if key in reading.values:
            value = reading.values[key]
            if value is not None:
                return value
            if key in reading.seen:
                return default
        value = self.given(key)
        return default if value is None else value

    def error(self, key: str, problem: str) -> ModelFileError:
        """A :class:`ModelFileError` naming the file and the field."""
        return ModelFileError(f"{self.source}: field {self.where(key)!r} {problem}")

    def missing(self, key: str, why: str = "") -> ModelFileError:
        """The error for an absent required field."""
        reason = f" ({why})" if why else ""
        return ModelFileError(
            f"{self.source}: required field {self.where(key)!r} is missing{reason}; add it to the config"
        )

    @recorded
    def integer(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        minimum: int = 1,
        maximum: int | None = None,
        why: str = "",
    ) -> int:
        """An integer field in ``[minimum, maximum]``; ``default`` when absent (required when no
        default). ``maximum`` defaults to :func:`default_maximum`; floats (``32.0``), bools,
        strings, NaN and infinity are refused.
        """
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.missing(key, why)
            return int(default)
        return self._checked_int(key, value, minimum, maximum)

    def _checked_int(self, key: str, value: Any, minimum: int, maximum: int | None) -> int:
        try:
            number = as_int(value, key, error=ModelFileError)
        except KVRulesError:
            raise self.error(key, f"is {shown(value)}; it must be an integer") from None
        if number < minimum:
            raise self.error(key, f"is {number}; it must be >= {minimum}")
        limit, reason = (maximum, "") if maximum is not None else default_maximum(key)
        if number > limit:
            because = f" ({reason})" if reason else ""
            raise self.error(key, f"is {shown(number)}; it must be <= {limit:,}{because}")
        return number

    @recorded
    def opt_int(self, key: str, *, minimum: int = 1, maximum: int | None = None) -> int | None:
        """An optional integer field (``None`` when absent or null)."""
        if self.get(key) is None:
            return None
        return self.integer(key, minimum=minimum, maximum=maximum)

    @recorded
    def number(
        self, key: str, default: Any = _MISSING, *, maximum: float = MAX_DIMENSION, why: str = ""
    ) -> float:
        """A positive, finite number (int or float) at most ``maximum``; NaN, infinity, bools and
        strings are refused."""
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.missing(key, why)
            return float(default)
        return self._checked_number(key, value, maximum)

    def _checked_number(self, key: str, value: Any, maximum: float, *, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"is {shown(value)}; it must be a positive number")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"is {value!r}; it must be a finite positive number")
        if (positive and value <= 0) or value > maximum:
            raise self.error(key, f"is {shown(value)}; it must be a positive number <= {maximum:,}")
        return float(value)

    def check_layer_counts(self) -> None:
        """The raw-file limits, checked on the file itself before any reader (transformers
        included) sees it: every layer-count field the file gives (:data:`LAYER_COUNT_FIELDS`, and
        every list or pattern with one entry per layer) is within :data:`MAX_HF_LAYERS`, a
        ``layer_types`` list has one entry per layer, and every cache field
        (:data:`~kvrules.hf.defaults.CACHE_FIELDS`) is of its kind (no NaN, no float count).

        :raises ModelFileError: naming the file and the field.
        """
        for key in LAYER_COUNT_FIELDS:
            value = self.raw(key)
            if value is not None:
                self._checked_int(key, value, 0, None)
        for key in PER_LAYER_FIELDS:
            value = self.raw(key)
            if isinstance(value, (list, str)) and len(value) > MAX_HF_LAYERS:
                raise self.error(
                    key, f"has {len(value):,} entries; it must have at most {MAX_HF_LAYERS:,} (one per layer)"
                )
        value, count = self.raw("layer_types"), self.raw("num_hidden_layers")
        if isinstance(value, list) and isinstance(count, int) and len(value) != count:
            raise self.error(
                "layer_types",
                f"has {len(value)} entries; it needs exactly one per layer "
                f"({self.where('num_hidden_layers')} = {count})",
            )
        for key in CACHE_FIELDS:
            self._check_raw_value(key)

    def _check_raw_value(self, key: str) -> None:
        """The file's value of a cache field is of its kind: an integer (not a float, bool or
        string), a finite number, true/false, and not beyond :data:`~kvrules.values.MAX_BYTES`
        (then its own bound is named); lists and text are checked where they are read, and
        other bounds where a field is read (its accessor's ``minimum`` / ``maximum``)."""
        value = self.raw(key)
        if value is None or key in TEXT_FIELDS or key in LIST_FIELDS:
            return
        if key in BOOL_FIELDS:
            if not isinstance(value, bool):
                raise self.error(key, f"is {shown(value)}; it must be true or false")
        elif key in NUMBER_FIELDS:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > MAX_BYTES:
                self._checked_number(key, value, MAX_DIMENSION)  # too large for any field: its bound says so
            self._checked_number(key, value, math.inf, positive=False)
        else:
            try:
                whole = as_int(value, key, error=ModelFileError)
            except KVRulesError:
                raise self.error(key, f"is {shown(value)}; it must be an integer") from None
            if whole > MAX_BYTES:
                self._checked_int(key, value, whole, None)

    @recorded
    def string(self, key: str, default: Any = _MISSING, *, why: str = "") -> str:
        """A string field."""
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise self.missing(key, why)
            return str(default)
        if not isinstance(value, str):
            raise self.error(key, f"is {shown(value)}; it must be a string")
        return value

    @recorded
    def sequence(
        self, key: str, length: int | None = None, *, counted_by: str = "num_hidden_layers"
    ) -> list[Any] | None:
        """A list field (``None`` when absent); with ``length`` (the value of ``counted_by``), it
        must have exactly that many items (one per layer)."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, f"is {type(value).__name__}; it must be a list")
        if length is not None and len(value) != length:
            raise self.error(
                key,
                f"has {len(value)} entries; it needs exactly one per layer "
                f"({self.where(counted_by)} = {length})",
            )
        return value

    @recorded
    def flag(self, key: str, default: bool) -> bool:
        """A boolean field."""
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"is {shown(value)}; it must be true or false")
        return value
