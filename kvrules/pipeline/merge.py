"""Stage ``merge``: the planner's inputs checked, and the workers' specs merged into one model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvrules.config import EngineConfig
from kvrules.errors import ConfigError, GroupingError, SpecError
from kvrules.plugin.ask import Asker
from kvrules.specs.base import KVCacheSpec

SpecsInput = Mapping[str, KVCacheSpec] | Sequence[Mapping[str, KVCacheSpec]]
MemoryInput = int | Sequence[int]


def as_workers(specs: SpecsInput) -> list[Mapping[str, KVCacheSpec]]:
    """One spec mapping per worker (pipeline stage) from a mapping or a non-empty list of them.

    :raises SpecError: anything else.
    """
    if isinstance(specs, Mapping):
        return [specs]
    if isinstance(specs, (list, tuple)) and specs and all(isinstance(s, Mapping) for s in specs):
        return list(specs)
    raise SpecError(
        "specs must be a mapping of layer name to spec, or a non-empty list of such mappings (one per worker)"
    )


def as_memories(memory: MemoryInput, workers: int) -> list[int]:
    """Bytes per worker: one value for all, or one per worker; each a non-negative int.

    :raises ConfigError: a wrong count or value.
    """
    values = [memory] if isinstance(memory, int) else list(memory)
    if len(values) == 1 and workers > 1:
        values = values * workers
    if len(values) != workers:
        raise ConfigError(
            f"available_memory has {len(values)} values for {workers} workers; give one per worker"
        )
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"available_memory value {value!r} must be a non-negative number of bytes")
    return values


def check_config(config: object) -> EngineConfig:
    """``config`` when it is an :class:`EngineConfig`; else a :class:`ConfigError` saying what is needed."""
    if config is None:
        raise ConfigError("plan() needs config=EngineConfig(max_model_len=...)")
    if not isinstance(config, EngineConfig):
        raise ConfigError(f"config must be an EngineConfig, got {type(config).__name__}")
    return config


def merge(
    workers: Sequence[Mapping[str, KVCacheSpec]], config: EngineConfig, ask: Asker
) -> Mapping[str, KVCacheSpec]:
    """Every worker's specs checked (each value a spec whose type answers sanely), then merged:
    a layer on two workers must have equal specs there.

    :raises SpecError: a value is not a spec.
    :raises GroupingError: a layer with different specs on two workers.
    :raises PluginError: a spec type answers wrongly about its sizes.
    """
    for index, specs in enumerate(workers):
        ask.specs(specs, config, where=f"worker {index}, " if len(workers) > 1 else "worker 0, ")
    if len(workers) == 1:
        return workers[0]
    merged: dict[str, KVCacheSpec] = {}
    owner: dict[str, int] = {}
    for index, specs in enumerate(workers):
        for name, spec in specs.items():
            seen = merged.get(name)
            if seen is None:
                merged[name] = spec
                owner[name] = index
            elif seen != spec:
                raise GroupingError(
                    f"layer {name!r} has different specs on worker {owner[name]} ({seen.to_dict()}) "
                    f"and worker {index} ({spec.to_dict()}); every worker must report the same spec "
                    "for a layer it shares"
                )
    ask.record(
        "merge", "merge", "applied", f"Merged the specs of {len(workers)} workers into {len(merged)} layers."
    )
    return merged
