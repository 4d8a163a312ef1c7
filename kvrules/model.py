"""Model files: per-layer specs, pipeline stages, engine settings and memory (architecture §3).

JSON (or TOML) of the shape::

    {"layers": {NAME: {"type": ..., field: value}},
     "workers": [[NAME, ...], ...],              # optional: pipeline stages
     "engine": {"max_model_len": 32768, ...},    # optional: EngineConfig fields
     "available_memory": [BYTES or "40GiB", ...]} # optional
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.config import check_settings
from kvrules.errors import KVRulesError, ModelFileError, PluginError
from kvrules.jsonfile import as_path, read_document
from kvrules.plugin.manager import default_manager
from kvrules.specs import io
from kvrules.specs.base import KVCacheSpec
from kvrules.units import parse_size
from kvrules.values import as_name, shown

TOP_LEVEL_KEYS = ("layers", "workers", "engine", "available_memory", "description")


def registered_spec_types() -> Mapping[str, type[KVCacheSpec]]:
    """Type name -> class of every spec type :func:`kvrules.default_manager` registered."""
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


def _layer_name(name: Any, source: str) -> str:
    """A layer name: a non-empty string that can be written as UTF-8."""
    try:
        return as_name(name, "layer name", error=ModelFileError)
    except KVRulesError as exc:
        raise ModelFileError(f"{source}: 'layers': {exc}") from None


def _check_members(name: str, spec: KVCacheSpec, source: str) -> None:
    """A group spec with members (``uniform_type``) as one layer's spec must hold exactly that
    layer: the planner makes such group specs itself; a model file lists every layer on its own."""
    members = list(spec.member_specs) if spec.has_members else [name]
    if members != [name]:
        raise ModelFileError(
            f"{source}: layer {name!r} has a {spec.type_name!r} spec with member(s) "
            f"{', '.join(map(repr, members[:4]))}; in a model file such a spec must have exactly one "
            f"member named like its layer ({name!r}); list each layer under 'layers' with its own spec instead"
        )


def _parse_layers(
    layers: Any, source: str, spec_types: Mapping[str, type[KVCacheSpec]]
) -> dict[str, KVCacheSpec]:
    """The ``layers`` section: layer name -> spec."""
    if not isinstance(layers, Mapping):
        raise ModelFileError(f"{source}: 'layers' must map layer names to specs")
    specs: dict[str, KVCacheSpec] = {}
    for raw_name, data in layers.items():
        name = _layer_name(raw_name, source)
        try:
            spec = io.spec_from_dict(data, layer=name, spec_types=spec_types)
        except PluginError as exc:  # a plugin's code failed, not the file: keep the class
            raise PluginError(f"{source}: {exc}") from exc
        except KVRulesError as exc:
            raise ModelFileError(f"{source}: {exc}") from None
        _check_members(name, spec, source)
        specs[name] = spec
    return specs


def _worker_names(index: int, names: Any, source: str) -> list[str]:
    """Worker ``index``'s list of layer names (each a string, none twice)."""
    if not isinstance(names, list):
        raise ModelFileError(f"{source}: 'workers'[{index}] = {shown(names)} must be a list of layer names")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise ModelFileError(
                f"{source}: 'workers'[{index}] holds {shown(name)}; a worker lists layer names (strings)"
            )
        if name in out:
            raise ModelFileError(f"{source}: 'workers'[{index}] lists layer {name!r} twice")
        out.append(name)
    return out


def _parse_workers(workers: Any, source: str, specs: Mapping[str, KVCacheSpec]) -> list[list[str]] | None:
    """The optional ``workers`` section: every layer of ``specs`` on some worker, no other names."""
    if workers is None:
        return None
    if not isinstance(workers, list) or not workers:
        raise ModelFileError(f"{source}: 'workers' must be a non-empty list of lists of layer names")
    stages = [_worker_names(i, names, source) for i, names in enumerate(workers)]
    placed = {n for names in stages for n in names}
    for name in placed:
        if name not in specs:
            raise ModelFileError(f"{source}: 'workers' names layer {name!r}, which is not in 'layers'")
    missing = [n for n in specs if n not in placed]
    if missing:
        raise ModelFileError(f"{source}: layer(s) {', '.join(missing[:3])} are on no worker in 'workers'")
    return stages


def _parse_engine(engine: Any, source: str) -> dict[str, Any]:
    """The optional ``engine`` section: EngineConfig fields, each checked (``max_model_len`` may
    come from the command line instead)."""
    if not isinstance(engine, Mapping):
        raise ModelFileError(f"{source}: 'engine' must be an object of EngineConfig fields")
    try:
        return check_settings(engine)
    except KVRulesError as exc:
        raise ModelFileError(f"{source}: engine: {exc}") from None


def _parse_memory(memory: Any, source: str) -> list[int] | None:
    """The optional ``available_memory``: one size or a list of sizes (bytes or ``"40GiB"``)."""
    if memory is None:
        return None
    items = memory if isinstance(memory, list) else [memory]
    try:
        return [parse_size(m) for m in items]
    except KVRulesError as exc:
        raise ModelFileError(f"{source}: available_memory: {exc}") from None


def _description(value: Any, source: str) -> str:
    if not isinstance(value, str):
        raise ModelFileError(f"{source}: 'description' = {shown(value)} must be a string")
    return value


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
        _description(data.get("description", ""), source),
    )


def load_model_file(path: str | Path, spec_types: Mapping[str, type[KVCacheSpec]] | None = None) -> ModelFile:
    """Read a JSON or TOML model file (``.toml``: TOML; anything else: JSON) with
    :func:`kvrules.jsonfile.read_document`.

    :raises ModelFileError: a missing or unreadable file, text that is not UTF-8, invalid or too
        deeply nested JSON/TOML, a duplicate JSON key, or an invalid field (naming file and field).
    """
    p = as_path(path, "model file")
    data = read_document(p, "model file", "toml" if p.suffix == ".toml" else "json")
    return parse_model(data, str(p), spec_types)
