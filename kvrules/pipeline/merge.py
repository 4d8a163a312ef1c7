"""Stage ``merge``: the planner's inputs checked, and the workers' specs merged into one model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvrules.config import EngineConfig
from kvrules.errors import ConfigError, GroupingError, SpecError
from kvrules.plugin.ask import Asker
from kvrules.specs.base import KVCacheSpec
from kvrules.values import MAX_LAYERS, as_bytes, as_name, shown

SpecsInput = Mapping[str, KVCacheSpec] | Sequence[Mapping[str, KVCacheSpec]]
MemoryInput = int | Sequence[int]


WANTED_SPECS = "a mapping of layer name to spec, or a non-empty list of such mappings (one per worker)"


def as_workers(specs: SpecsInput) -> list[Mapping[str, KVCacheSpec]]:
    """One spec mapping per worker (pipeline stage) from a mapping or a non-empty list of them.

    :raises SpecError: anything else, naming what was given (a string, an empty list, the
        first list entry that is not a mapping).
    """
    if isinstance(specs, Mapping):
        return [specs]
    if isinstance(specs, (str, bytes)):
        raise SpecError(
            f"specs = {shown(specs)} is a string; specs must be {WANTED_SPECS} "
            "(kvrules.model.load_model_file(path) reads a model file)"
        )
    if not isinstance(specs, (list, tuple)):
        raise SpecError(
            f"specs = {shown(specs)} ({type(specs).__name__}) is not allowed: specs must be {WANTED_SPECS}"
        )
    if not specs:
        raise SpecError(f"specs is an empty {type(specs).__name__}; specs must be {WANTED_SPECS}")
    for index, worker in enumerate(specs):
        if not isinstance(worker, Mapping):
            raise SpecError(
                f"specs[{index}] = {shown(worker)} is not a mapping of layer name to spec; specs must be "
                f"{WANTED_SPECS}"
            )
    return list(specs)


def as_memories(memory: MemoryInput, workers: int) -> list[int]:
    """Bytes per worker: one value for all, or one per worker; each an integer (numpy and torch
    integers become ``int``) from 0 to :data:`~kvrules.values.MAX_BYTES`.

    :raises ConfigError: a wrong count, a value that is not a whole number of bytes in range,
        or a size string (which :func:`kvrules.units.parse_size` reads).
    """
    values = _memory_values(memory)
    if len(values) == 1 and workers > 1:
        values = values * workers
    if len(values) != workers:
        raise ConfigError(
            f"available_memory has {len(values)} values for {workers} workers; give one per worker"
        )
    if len(values) == 1:
        return [_memory_value(values[0], "available_memory")]
    return [_memory_value(value, f"available_memory[{index}]") for index, value in enumerate(values)]


def _memory_values(memory: Any) -> list[Any]:
    """``memory`` as a list: a lone value (anything but a list or tuple) is one value."""
    if isinstance(memory, (list, tuple)):
        return list(memory)
    if isinstance(memory, (Mapping, set, frozenset)):
        raise ConfigError(
            f"available_memory = {shown(memory)} is not allowed: one number of bytes, or a list with "
            "one per worker"
        )
    return [memory]


def _memory_value(value: Any, what: str) -> int:
    """One worker's bytes (see :func:`as_memories`)."""
    if isinstance(value, (str, bytes)):
        raise ConfigError(
            f"{what} = {shown(value)} is a string; pass bytes as an int, e.g. "
            f"kvrules.units.parse_size({shown(value)})"
        )
    return as_bytes(value, what, error=ConfigError)


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
    checked = []
    for index, specs in enumerate(workers):
        where = f"worker {index}, " if len(workers) > 1 else "worker 0, "
        check_names(specs, where)
        checked.append(ask.specs(specs, config, where=where))
    if len(workers) == 1:
        return checked[0]
    merged: dict[str, KVCacheSpec] = {}
    owner: dict[str, int] = {}
    for index, specs in enumerate(checked):
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
    check_layer_count(merged)
    ask.record(
        "merge", "merge", "applied", f"Merged the specs of {len(workers)} workers into {len(merged)} layers."
    )
    return merged


def check_names(specs: Mapping[Any, Any], where: str) -> None:
    """Every layer name a non-empty ``str`` that can be written as UTF-8, and at most
    :data:`~kvrules.values.MAX_LAYERS` layers, so the plan, its JSON and every plugin only ever
    see such names.

    :raises SpecError: naming the first layer whose name is not one.
    """
    check_layer_count(specs, where)
    try:
        joined = "".join(specs)  # every name at once, at C speed (a name that is no str raises)
    except TypeError:
        joined = None
    if joined is not None and "" not in specs and _utf8(joined):
        return
    for name in specs:  # find the first bad one
        as_name(name, f"{where}layer name")


def _utf8(text: str) -> bool:
    """True when ``text`` can be written as UTF-8 (it has no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_layer_count(specs: Mapping[Any, Any], where: str = "") -> None:
    """:raises SpecError: more than :data:`~kvrules.values.MAX_LAYERS` layers."""
    if len(specs) > MAX_LAYERS:
        raise SpecError(
            f"{where}the model has {len(specs)} layers; kvrules plans at most {MAX_LAYERS} layers "
            "(no real model approaches that)"
        )
