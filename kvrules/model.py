"""Model files: per-layer specs, pipeline stages, engine settings and memory (architecture §3).

JSON (or TOML) of the shape::

    {"layers": {NAME: {"type": ..., field: value}},
     "workers": [[NAME, ...], ...],              # optional: pipeline stages
     "engine": {"max_model_len": 32768, ...},    # optional: EngineConfig fields
     "available_memory": [BYTES or "40GiB", ...]} # optional
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.errors import KVRulesError, ModelFileError
from kvrules.plugin.manager import default_manager
from kvrules.specs import io
from kvrules.specs.base import KVCacheSpec
from kvrules.units import parse_size

TOP_LEVEL_KEYS = ("layers", "workers", "engine", "available_memory", "description")


def registered_spec_types() -> Mapping[str, type[KVCacheSpec]]:
    """Type name -> class of every spec type :func:`kvrules.plugin.default_manager` registered."""
    return default_manager().registries.spec_types.classes


def spec_from_dict(
    data: Mapping[str, Any],
    *,
    layer: str | None = None,
    spec_types: Mapping[str, type[KVCacheSpec]] | None = None,
) -> KVCacheSpec:
    """Build a spec from its model-file form (:func:`kvrules.specs.spec_from_dict`), knowing every
    spec type registered with the default plugin manager unless ``spec_types`` is given.

    :raises SpecError: unknown type or key, a missing field, or an invalid value (naming the layer).
    """
    return io.spec_from_dict(data, layer=layer, spec_types=spec_types or registered_spec_types())


@dataclass
class ModelFile:
    """A parsed model file."""

    source: str
    specs: dict[str, KVCacheSpec]
    workers: list[list[str]] | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    available_memory: list[int] | None = None
    description: str = ""

    def worker_specs(self) -> list[dict[str, KVCacheSpec]]:
        """One spec mapping per worker (all layers on one worker when no stages are given)."""
        if not self.workers:
            return [self.specs]
        return [{name: self.specs[name] for name in names} for names in self.workers]


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    """Every top-level key of ``data`` is one of :data:`TOP_LEVEL_KEYS`."""
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise ModelFileError(
            f"{source}: unknown top-level key(s) {', '.join(map(repr, unknown))}; known: {', '.join(TOP_LEVEL_KEYS)}"
        )


def _parse_layers(
    layers: Any, source: str, spec_types: Mapping[str, type[KVCacheSpec]]
) -> dict[str, KVCacheSpec]:
    """The ``layers`` section: layer name -> spec."""
    if not isinstance(layers, Mapping):
        raise ModelFileError(f"{source}: 'layers' must map layer names to specs")
    specs: dict[str, KVCacheSpec] = {}
    for name, spec in layers.items():
        try:
            specs[name] = io.spec_from_dict(spec, layer=name, spec_types=spec_types)
        except KVRulesError as exc:
            raise ModelFileError(f"{source}: {exc}") from None
    return specs


def _parse_workers(workers: Any, source: str, specs: Mapping[str, KVCacheSpec]) -> list[list[str]] | None:
    """The optional ``workers`` section: every layer of ``specs`` on some worker, no other names."""
    if workers is None:
        return None
    if not isinstance(workers, list) or not all(isinstance(w, list) for w in workers) or not workers:
        raise ModelFileError(f"{source}: 'workers' must be a list of lists of layer names")
    placed = [n for w in workers for n in w]
    for name in placed:
        if name not in specs:
            raise ModelFileError(f"{source}: 'workers' names layer {name!r}, which is not in 'layers'")
    missing = [n for n in specs if n not in set(placed)]
    if missing:
        raise ModelFileError(f"{source}: layer(s) {', '.join(missing[:3])} are on no worker in 'workers'")
    return [list(w) for w in workers]


def _parse_engine(engine: Any, source: str) -> dict[str, Any]:
    """The optional ``engine`` section (checked to be an object; its fields are EngineConfig's)."""
    if not isinstance(engine, Mapping):
        raise ModelFileError(f"{source}: 'engine' must be an object of EngineConfig fields")
    return dict(engine)


def _parse_memory(memory: Any, source: str) -> list[int] | None:
    """The optional ``available_memory``: one size or a list of sizes (bytes or ``"40GiB"``)."""
    if memory is None:
        return None
    items = memory if isinstance(memory, list) else [memory]
    try:
        return [parse_size(m) for m in items]
    except KVRulesError as exc:
        raise ModelFileError(f"{source}: available_memory: {exc}") from None


def parse_model(
    data: Any, source: str, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
) -> ModelFile:
    """Validate and convert the decoded document ``data`` (from ``source``, for messages)."""
    if not isinstance(data, Mapping):
        raise ModelFileError(f"{source}: the top level must be an object with a 'layers' key")
    if spec_types is None:
        spec_types = registered_spec_types()
    _check_keys(data, source)
    specs = _parse_layers(data.get("layers"), source, spec_types)
    return ModelFile(
        source,
        specs,
        _parse_workers(data.get("workers"), source, specs),
        _parse_engine(data.get("engine", {}), source),
        _parse_memory(data.get("available_memory"), source),
        str(data.get("description", "")),
    )


def load_model_file(path: str | Path, spec_types: Mapping[str, type[KVCacheSpec]] | None = None) -> ModelFile:
    """Read a JSON or TOML model file.

    :raises ModelFileError: missing file, invalid JSON/TOML, or an invalid field (naming file and field).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelFileError(f"{p}: cannot read the model file ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ModelFileError(f"{p}: invalid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from None
    return parse_model(data, str(p), spec_types)
