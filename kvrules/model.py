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
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.io import spec_from_dict
from kvrules.units import parse_size

TOP_LEVEL_KEYS = ("layers", "workers", "engine", "available_memory", "description")


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


def parse_model(
    data: Any, source: str, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
) -> ModelFile:
    """Validate and convert the decoded document ``data`` (from ``source``, for messages)."""
    if not isinstance(data, Mapping):
        raise ModelFileError(f"{source}: the top level must be an object with a 'layers' key")
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise ModelFileError(
            f"{source}: unknown top-level key(s) {', '.join(map(repr, unknown))}; known: {', '.join(TOP_LEVEL_KEYS)}"
        )
    layers = data.get("layers")
    if not isinstance(layers, Mapping):
        raise ModelFileError(f"{source}: 'layers' must map layer names to specs")
    specs: dict[str, KVCacheSpec] = {}
    for name, spec in layers.items():
        try:
            specs[name] = spec_from_dict(spec, layer=name, spec_types=spec_types)
        except KVRulesError as exc:
            raise ModelFileError(f"{source}: {exc}") from None
    workers = data.get("workers")
    if workers is not None:
        if not isinstance(workers, list) or not all(isinstance(w, list) for w in workers) or not workers:
            raise ModelFileError(f"{source}: 'workers' must be a list of lists of layer names")
        placed = [n for w in workers for n in w]
        for name in placed:
            if name not in specs:
                raise ModelFileError(f"{source}: 'workers' names layer {name!r}, which is not in 'layers'")
        missing = [n for n in specs if n not in set(placed)]
        if missing:
            raise ModelFileError(f"{source}: layer(s) {', '.join(missing[:3])} are on no worker in 'workers'")
    engine = data.get("engine", {})
    if not isinstance(engine, Mapping):
        raise ModelFileError(f"{source}: 'engine' must be an object of EngineConfig fields")
    memory = data.get("available_memory")
    parsed_memory = None
    if memory is not None:
        items = memory if isinstance(memory, list) else [memory]
        try:
            parsed_memory = [parse_size(m) for m in items]
        except KVRulesError as exc:
            raise ModelFileError(f"{source}: available_memory: {exc}") from None
    return ModelFile(
        source,
        specs,
        [list(w) for w in workers] if workers else None,
        dict(engine),
        parsed_memory,
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
