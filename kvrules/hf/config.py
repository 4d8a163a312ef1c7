"""Reading a Hugging Face ``config.json`` with errors that name the file and the field.

:class:`HFConfig` wraps the decoded document. Multimodal wrappers (Gemma 3, Llama 4, Qwen3.5)
keep the language model's fields under ``text_config``; :meth:`HFConfig.get` looks there first
and falls back to the top level, and every error names the field as it is spelled in the file
(``text_config.num_key_value_heads``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvrules.errors import KVRulesError, ModelFileError
from kvrules.jsonfile import as_path, read_document
from kvrules.values import MAX_DIMENSION, MAX_TOKENS, as_int, shown

_MISSING: Any = object()

#: the most layers one field of a Hugging Face config may count (``num_hidden_layers``, MTP
#: layers): the largest real models have a few hundred; the bound is checked before anything is
#: built (a mutated ``num_hidden_layers: 1000000`` would otherwise build and plan for minutes)
MAX_HF_LAYERS = 100_000

#: fields that count layers (bounded by :data:`MAX_HF_LAYERS`)
LAYER_COUNT_FIELDS = ("num_hidden_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers")

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


class HFConfig:
    """A decoded ``config.json`` with typed, validated field access.

    :param data: the decoded JSON object.
    :param source: where it came from (a path), used in every error message.
    """

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data = data
        self.source = source
        text = data.get("text_config")
        self.text: Mapping[str, Any] | None = text if isinstance(text, Mapping) else None

    @classmethod
    def load(cls, path: str | Path) -> HFConfig:
        """Read ``path`` (a ``config.json`` or a directory holding one)."""
        data, source = read_config(path)
        return cls(data, source)

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

    # -- lookup -------------------------------------------------------------------------
    def where(self, key: str) -> str:
        """The field's spelling in the file: ``text_config.KEY`` when read from there."""
        if self.text is not None and key in self.text:
            return f"text_config.{key}"
        if key in self.data or self.text is None:
            return key
        return f"text_config.{key}"

    def has(self, key: str) -> bool:
        """True when ``key`` is present and not null (in ``text_config`` or at the top)."""
        return self.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value of ``key`` (``text_config`` first), or ``default`` when absent or null."""
        if self.text is not None and self.text.get(key) is not None:
            return self.text[key]
        value = self.data.get(key)
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

    def opt_int(self, key: str, *, minimum: int = 1, maximum: int | None = None) -> int | None:
        """An optional integer field (``None`` when absent or null)."""
        if self.get(key) is None:
            return None
        return self.integer(key, minimum=minimum, maximum=maximum)

    def first_int(
        self,
        keys: Sequence[str],
        default: Any = _MISSING,
        *,
        minimum: int = 1,
        maximum: int | None = None,
        why: str = "",
    ) -> int:
        """The first of ``keys`` that is present, as an integer (the error names the first key)."""
        for key in keys:
            if self.get(key) is not None:
                return self.integer(key, minimum=minimum, maximum=maximum)
        if default is _MISSING:
            raise self.missing(keys[0], why or f"or any of {', '.join(keys[1:])}")
        return int(default)

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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"is {shown(value)}; it must be a positive number")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"is {value!r}; it must be a finite positive number")
        if value <= 0 or value > maximum:
            raise self.error(key, f"is {shown(value)}; it must be a positive number <= {maximum:,}")
        return float(value)

    def check_layer_counts(self) -> None:
        """Every layer-count field present (:data:`LAYER_COUNT_FIELDS`) is an integer from 0 to
        :data:`MAX_HF_LAYERS`; called before anything is built.

        :raises ModelFileError: naming the file and the field.
        """
        for key in LAYER_COUNT_FIELDS:
            self.opt_int(key, minimum=0)

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

    def flag(self, key: str, default: bool) -> bool:
        """A boolean field."""
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"is {shown(value)}; it must be true or false")
        return value
