"""Parity of kvrules' vLLM 0.33 builder with vLLM 0.33's own (run inside a venv with vLLM 0.33).

Every shared case with a ``*.vllm-0.33.json`` answer goes through vLLM 0.33's Core functions
(``get_global_kv_cache_groups`` then ``get_kv_cache_configs``) twice: with vLLM's platform hook
(its ``DefaultKVCacheConfigBuilder``) and with the hook set to kvrules' builder through the
public seam (:func:`kvrules.integrations.vllm_platform.set_platform_hook`). Groups (layer names,
page size, block size, ``is_eagle_group``), num_blocks, tensors (size, layers, strides, offset),
``prefix_cache_retention_interval``, ``kv_tp_replicas``, max concurrency and ``max_model_len``
after planning are compared field by field, and vLLM's side with the recorded answer. Output: one
line per case, then the counts.

``vllm_config`` is a real ``VllmConfig`` (``--config real``, the default; built as
``scripts/vllm_parity_config.py`` says, on a config-only model directory), or the stand-in the
recorded answers were made with (``--config stand-in``: a ``SimpleNamespace`` holding the fields
the planner reads, ``prefix_cache_retention_interval=None``).

    python scripts/vllm_parity033.py [--strategies auto] [--config real|stand-in] [--model DIR]
"""

from __future__ import annotations

import argparse
import ast
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import case_loader  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm_parity_config import config_mismatches, model_dir, real_vllm_config  # noqa: E402

from kvrules.integrations import vllm033, vllm_platform  # noqa: E402
from kvrules.integrations.vllm033_specs import to_vllm033_spec  # noqa: E402
from kvrules.integrations.vllm_specs import vllm_classes  # noqa: E402


class Speculative:
    """``speculative_config`` as the 0.33 planner reads it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.method = data.get("method")
        self.num_speculative_tokens = data.get("num_speculative_tokens", 1)
        self._layers = data.get("num_nextn_predict_layers", 1)

    def use_multi_module_mtp(self) -> bool:
        return self.method == "mtp" and min(self._layers, self.num_speculative_tokens) > 1

    def use_eagle_block_drop(self) -> bool:
        return False


def vllm_config(settings: dict[str, Any], layout: str) -> SimpleNamespace:
    """A stand-in ``VllmConfig`` holding every field the 0.33 planner reads (the case's
    ``config_fields_read``)."""
    from vllm.config.cache import CacheConfig  # type: ignore[import-not-found,unused-ignore]

    cache = SimpleNamespace(
        num_gpu_blocks_override=settings.get("num_gpu_blocks_override"),
        mamba_cache_mode=settings.get("mamba_cache_mode", "none"),
        prefix_cache_retention_interval=None,
        kv_cache_layout=layout,
    )
    cache.get_resolved_kv_cache_layout = lambda: CacheConfig.get_resolved_kv_cache_layout(cache)
    spec = settings.get("speculative_config")
    return SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=settings["max_model_len"],
            original_max_model_len=settings["original_max_model_len"],
            supports_kv_cache_grouping=False,
            architectures=["Stand-in"],
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=settings["max_num_batched_tokens"],
            max_num_encoder_input_tokens=settings["max_num_encoder_input_tokens"],
            disable_hybrid_kv_cache_manager=settings["disable_hybrid_kv_cache_manager"],
        ),
        cache_config=cache,
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=settings["decode_context_parallel_size"],
            prefill_context_parallel_size=settings["prefill_context_parallel_size"],
            tensor_parallel_size=settings["tensor_parallel_size"],
        ),
        attention_config=SimpleNamespace(hisparse_config=None),
        device_config=SimpleNamespace(device_type="cpu"),
        speculative_config=None if spec is None else Speculative(spec),
        kv_transfer_config=None,
        max_in_flight_tokens=settings["max_in_flight_tokens"],
        num_prefill_lookahead_tokens=settings.get("num_prefill_lookahead_tokens", 0),
    )


def make_config(settings: dict[str, Any], layout: str, model: Path | None) -> Any:
    """A real ``VllmConfig`` on ``model``, or (``model`` None) the stand-in of :func:`vllm_config`."""
    if model is None:
        return vllm_config(settings, layout)
    cfg = real_vllm_config(settings, layout, model)
    mismatched = config_mismatches(cfg, settings)
    if mismatched:
        raise SystemExit(f"vllm_parity033: the built VllmConfig differs from the case: {mismatched}")
    return cfg


def plan_with_vllm(case: Any, settings: dict[str, Any], layout: str, model: Path | None) -> dict[str, Any]:
    """vLLM 0.33's Core with whatever builder the platform hook names now (``model``: the
    config-only model of a real ``VllmConfig``; None: the stand-in)."""
    from vllm.v1.core import kv_cache_planning as planning  # type: ignore[import-not-found,unused-ignore]
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config  # type: ignore[import-not-found,unused-ignore]

    classes = vllm_classes()
    cfg = make_config(settings, layout, model)
    workers = [
        {n: to_vllm033_spec(_as_033(s), classes=classes, layer=n) for n, s in w.items()} for w in case.workers
    ]
    groups = planning.get_global_kv_cache_groups(cfg, workers)
    configs = planning.get_kv_cache_configs(cfg, workers, list(case.memory), groups)
    return {
        "groups": [
            (
                tuple(g.layer_names),
                g.kv_cache_spec.page_size_bytes,
                g.kv_cache_spec.block_size,
                g.is_eagle_group,
            )
            for g in groups
        ],
        "num_blocks": [c.num_blocks for c in configs],
        "tensors": [
            sorted(
                (t.size, tuple(t.layers), t.layer_stride, t.block_stride, t.offset)
                for t in c.kv_cache_tensors
            )
            for c in configs
        ],
        "prefix_cache_retention_interval": [c.prefix_cache_retention_interval for c in configs],
        "kv_tp_replicas": [c.kv_tp_replicas for c in configs],
        "max_concurrency": round(get_max_concurrency_for_kv_cache_config(cfg, configs[0]), 6),
        "max_model_len": cfg.model_config.max_model_len,
    }


def _as_033(spec: Any) -> Any:
    """The case's spec without ``indexes_kv_by_block_stride`` (gone in 0.33: padding is always on)."""
    if getattr(spec, "indexes_kv_by_block_stride", False):
        return spec.evolve(indexes_kv_by_block_stride=False)
    return spec


def recorded(answer: dict[str, Any]) -> dict[str, Any]:
    """The recorded vLLM 0.33 answer in the same form."""
    configs = _lit(answer["kv_cache_configs"])
    groups = _lit(answer["kv_cache_groups"])
    return {
        "groups": [
            (
                tuple(g["layer_names"]),
                g["spec"]["page_size_bytes"],
                g["spec"]["block_size"],
                g["is_eagle_group"],
            )
            for g in groups
        ],
        "num_blocks": [c["num_blocks"] for c in configs],
        "tensors": [
            sorted(
                (t["size"], tuple(t["layers"]), t["layer_stride"], t["block_stride"], t["offset"])
                for t in c["kv_cache_tensors"]
            )
            for c in configs
        ],
        "kv_tp_replicas": [c.get("kv_tp_replicas", 1) for c in configs],
        "max_concurrency": round(answer["max_concurrency"], 6),
        "max_model_len": answer["max_model_len_after"],
    }


def _lit(value: Any) -> Any:
    return ast.literal_eval(value) if isinstance(value, str) else value


def attempt(fn: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = fn()
        return result
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Field names where ``a`` and ``b`` differ (an error on either side counts as one field)."""
    if "error" in a or "error" in b:
        same = type(a.get("error", "")).__name__ == type(b.get("error", "")).__name__ and ("error" in a) == (
            "error" in b
        )
        return [] if same else [f"error: {a.get('error', '-')} | {b.get('error', '-')}"]
    return [k for k in a if a[k] != b.get(k)]


def run(strategies: str, model: Path | None = None) -> int:
    """Every case twice (``model``: with real ``VllmConfig`` s on it; None: the stand-in);
    returns the number of cases where kvrules differs from vLLM."""
    from vllm.platforms import current_platform  # type: ignore[import-not-found,unused-ignore]

    platform = type(current_platform)
    counts = {"identical": 0, "differ": 0}
    for name in case_loader.case_names("vllm-0.33"):
        case = case_loader.load_case(name, "vllm-0.33")
        settings = _lit(case.answer["settings"])
        layout = case.answer.get("kv_cache_layout", {}).get("name") or "LBNHC"
        theirs = attempt(lambda c=case, s=settings, la=layout: plan_with_vllm(c, s, la, model))
        vllm_platform.set_platform_hook(
            platform, strategies=vllm033.parse_strategies(strategies, "vllm-0.33")
        )
        try:
            ours = attempt(lambda c=case, s=settings, la=layout: plan_with_vllm(c, s, la, model))
        finally:
            vllm_platform.restore_platform_hook(platform)
        want = attempt(lambda c=case: recorded(c.answer))
        diff = differences(theirs, ours)
        vs_answer = differences(want, theirs)
        counts["identical" if not diff else "differ"] += 1
        tag = "identical" if not diff else "DIFFERS " + ", ".join(diff)
        print(f"{name:52s} kvrules vs vLLM: {tag}; vLLM vs recorded: {', '.join(vs_answer) or 'same'}")
    config = "stand-in VllmConfig" if model is None else "real VllmConfig"
    print(f"\n{counts['identical']} identical, {counts['differ']} differ (strategies={strategies}, {config})")
    return counts["differ"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="auto")
    parser.add_argument("--config", choices=("real", "stand-in"), default="real")
    parser.add_argument("--model", type=Path, default=None, help="the config-only model of --config real")
    args = parser.parse_args(argv)
    # vLLM's warnings (the long max_model_len, a disabled hybrid manager) follow its log level
    logging.getLogger("vllm").setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper())
    model = None if args.config == "stand-in" else (args.model or model_dir())
    return 1 if run(args.strategies, model) else 0


if __name__ == "__main__":
    sys.exit(main())
