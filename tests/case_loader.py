"""Loads the vLLM 0.28.0 cases (``tests/data/cases``, copied from the project's shared cases) into kvrules inputs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kvrules
from kvrules import EngineConfig, KVCacheSpec, KVQuantMode

CASES_DIR = Path(os.environ.get("KVRULES_CASES_DIR", Path(__file__).resolve().parent / "data" / "cases"))


def case_names(answer: str = "vllm") -> list[str]:
    """Names of every case (sub-folders included, e.g. ``quantized/c10a_...``) that has an
    ``NAME.<answer>.json`` answer: ``vllm`` (vLLM 0.28.0) or ``vllm-0.33`` (vLLM 0.33.0)."""
    suffix = f".{answer}.json"
    return sorted(p.relative_to(CASES_DIR).as_posix()[: -len(suffix)] for p in CASES_DIR.rglob(f"*{suffix}"))


@dataclass
class Case:
    name: str
    workers: list[dict[str, KVCacheSpec]]
    all_specs: dict[str, KVCacheSpec]
    memory: list[int]
    config: EngineConfig
    answer: dict[str, Any]


def _layer_spec(name: str, data: dict[str, Any], mamba_mode: str | None) -> KVCacheSpec:
    data = dict(data)
    cache_dtype = data.pop("kv_cache_dtype", None)
    if cache_dtype is not None:
        data["kv_quant_mode"] = KVQuantMode.from_cache_dtype(cache_dtype).name
    if data.get("type") == "mamba" and mamba_mode is not None:
        data.setdefault("mamba_cache_mode", mamba_mode)
    return kvrules.spec_from_dict(data, layer=name)


def load_case(name: str, answer_kind: str = "vllm", *, published: bool = True) -> Case:
    """Case ``name`` with its ``<answer_kind>`` answer; ``published=False`` drops the attention
    fields ``state_content_bytes`` / ``num_head_slots`` (kvrules' ``kv_quant_mode`` formula then
    gives the page)."""
    raw = json.loads((CASES_DIR / f"{name}.json").read_text())
    answer = json.loads((CASES_DIR / f"{name}.{answer_kind}.json").read_text())
    if not published:
        for data in raw["layers"].values():
            data.pop("state_content_bytes", None)
            data.pop("num_head_slots", None)
    specs = {n: _layer_spec(n, d, raw.get("mamba_cache_mode")) for n, d in raw["layers"].items()}
    if raw.get("workers"):
        workers = [{n: specs[n] for n in names} for names in raw["workers"]]
    else:
        workers = [specs]
    memory = raw["available_memory"]
    memory = list(memory) if isinstance(memory, list) else [memory]
    length = raw["max_model_len"]
    auto = length == -1
    if auto:
        length = raw["derived_max_model_len"]
    extra = 0
    spec_cfg = raw.get("speculative_config")
    if spec_cfg and spec_cfg.get("method") == "mtp":
        k = spec_cfg["num_speculative_tokens"]
        if min(spec_cfg.get("num_nextn_predict_layers", 1), k) > 1:
            extra = k - 1
    config = EngineConfig(
        max_model_len=length,
        max_num_batched_tokens=raw.get("max_num_batched_tokens", 2048),
        disable_hybrid_kv_cache_manager=raw.get("disable_hybrid_kv_cache_manager", False),
        num_gpu_blocks_override=raw.get("num_gpu_blocks_override"),
        extra_retained_tokens=extra,
        auto_fit_max_model_len=auto,
        kv_cache_layout=answer.get("kv_cache_layout", {}).get("name"),
    )
    return Case(name, workers, specs, memory, config, answer)


def spec_triple(spec: dict[str, Any]) -> tuple[int, int, int | None]:
    return (spec["block_size"], spec["page_size_bytes"], spec["page_size_padded"])


def kv_triple(spec: KVCacheSpec) -> tuple[int, int, int | None]:
    return (spec.block_size, spec.page_size_bytes, getattr(spec, "page_size_padded", None))


def expected_layer_specs(answer: dict[str, Any]) -> dict[str, tuple[int, int, int | None]]:
    """Per-layer (block_size, page, padded) as placed in vLLM's groups."""
    out = {}
    for group in answer["kv_cache_groups"]:
        spec = group["spec"]
        members = spec.get("kv_cache_specs") or spec.get("layers")
        for layer in group["layer_names"]:
            out[layer] = spec_triple(members[layer] if members else spec)
    return out


def backing_multiset(tensors: list[Any]) -> list[tuple[int, tuple[str, ...], int, int, int]]:
    """vLLM 0.33's tensors (answer dicts or :class:`kvrules.plan.BackingTensor`) as a sorted list
    of ``(size, layers in order, layer_stride, block_stride, offset)``."""
    rows = []
    for t in tensors:
        if isinstance(t, dict):
            rows.append((t["size"], tuple(t["layers"]), t["layer_stride"], t["block_stride"], t["offset"]))
        else:
            rows.append((t.size, t.layers, t.layer_stride, t.block_stride, t.offset))
    return sorted(rows)


def tensors_as_028(answer_tensors: list[dict[str, Any]]) -> list[tuple[int, frozenset[str], int, int]]:
    """A 0.33 answer's ``tensors_as_028`` in :func:`tensor_multiset`'s form (a layer-outermost
    entry's ``start`` is where its region lies in the backing; kvrules' tensor is that region)."""
    return tensor_multiset(
        [
            {"size": t["size"], "shared_by": t["shared_by"], "offset": t.get("offset", 0),
             "block_stride": t.get("block_stride", 0)}
            for t in answer_tensors
        ]
    )  # fmt: skip


def tensor_multiset(tensors: list[Any]) -> list[tuple[int, frozenset[str], int, int]]:
    rows = []
    for t in tensors:
        if isinstance(t, dict):
            rows.append((t["size"], frozenset(t["shared_by"]), t["offset"], t["block_stride"]))
        else:
            rows.append((t.size, frozenset(t.shared_by), t.offset, t.block_stride))
    return sorted(rows, key=lambda r: (r[2], r[0], sorted(r[1])))
