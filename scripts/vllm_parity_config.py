"""A real ``VllmConfig`` for a shared case, as the parity drivers of vLLM 0.32 and 0.33 plan with
(``scripts/vllm_parity032.py``, ``scripts/vllm_parity033.py``; run inside their vLLM venvs).

The config is built as vLLM's own tests build one, ``VllmConfig(model_config=ModelConfig(...))``,
on a config-only model directory (:data:`MODEL`: a ``config.json`` and nothing else, so nothing is
downloaded). Only the attributes the case's ``settings`` name are set on it; every other field
keeps the real config's default (``cache_config.prefix_cache_retention_interval`` is 0, for
instance). ``speculative_config`` is the one stand-in (:class:`Speculative`), for the cases that
have one: a real ``SpeculativeConfig`` needs a draft model. :func:`config_mismatches` checks what
vLLM derives (``max_in_flight_tokens``, ``num_prefill_lookahead_tokens``) against the case.

Importing this module sets ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (unless set): the model declares
4,096 positions and the cases ask for up to 131,072; vLLM then only warns. It imports vLLM only
when a config is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")

REPO = Path(__file__).resolve().parent.parent
#: the config-only model every VllmConfig is built on (a directory holding only config.json)
MODEL = REPO / "tests" / "engine" / "models" / "llama"
#: the case settings vLLM derives from the others, checked on the built config
DERIVED = ("max_in_flight_tokens", "num_prefill_lookahead_tokens", "max_concurrent_batches")
#: the parallel sizes a case may name
PARALLEL = (
    "decode_context_parallel_size",
    "prefill_context_parallel_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
)


class Speculative:
    """``speculative_config`` for the cases that have one: ``SpeculativeConfig``'s answers for its
    method, with its defaults (``disable_eagle_block_drop=False``; an MTP draft's
    ``num_nextn_predict_layers`` on ``draft_model_config.hf_config``)."""

    EAGLE = ("eagle", "eagle3", "mtp", "dflash", "dspark")

    def __init__(self, data: dict[str, Any]) -> None:
        self.method = data.get("method")
        self.num_speculative_tokens = data.get("num_speculative_tokens", 1)
        self.disable_eagle_block_drop = False
        hf = SimpleNamespace(num_nextn_predict_layers=data.get("num_nextn_predict_layers", 1))
        self.draft_model_config = SimpleNamespace(hf_config=hf)

    def use_eagle(self) -> bool:
        return self.method in self.EAGLE

    def use_eagle_block_drop(self) -> bool:
        return self.use_eagle() and not self.disable_eagle_block_drop

    def use_dflash(self) -> bool:
        return self.method == "dflash"

    def use_dspark(self) -> bool:
        return self.method == "dspark"

    def uses_draft_model(self) -> bool:
        return self.method == "draft_model"

    def uses_extract_hidden_states(self) -> bool:
        return self.method == "extract_hidden_states"

    def use_multi_module_mtp(self) -> bool:
        layers = self.draft_model_config.hf_config.num_nextn_predict_layers
        return self.method == "mtp" and min(layers, self.num_speculative_tokens) > 1


def model_dir() -> Path:
    """:data:`MODEL` (committed with the real-engine tests)."""
    if not (MODEL / "config.json").is_file():
        raise SystemExit(f"vllm-parity: {MODEL}/config.json is missing; run from a complete checkout")
    return MODEL


def real_vllm_config(settings: dict[str, Any], layout: str, model: Path) -> Any:
    """A real ``VllmConfig`` with the case's ``settings`` and ``layout`` (a resolved
    ``kv_cache_layout`` name); every other field at its default.

    :raises SystemExit: a setting that cannot be expressed here (a ``kv_transfer_config``).
    """
    from vllm.config import ModelConfig, VllmConfig  # type: ignore[import-not-found,unused-ignore]

    if settings.get("kv_transfer_config") is not None:
        raise SystemExit("vllm_parity_config: a case with a kv_transfer_config is not supported")
    cfg = VllmConfig(model_config=ModelConfig(model=str(model), max_model_len=settings["max_model_len"]))
    if settings["original_max_model_len"] == -1:
        cfg.model_config.original_max_model_len = -1
    sched = cfg.scheduler_config
    sched.max_num_batched_tokens = settings["max_num_batched_tokens"]
    sched.max_num_encoder_input_tokens = settings["max_num_encoder_input_tokens"]
    sched.disable_hybrid_kv_cache_manager = settings["disable_hybrid_kv_cache_manager"]
    sched.async_scheduling = settings.get("async_scheduling", False)
    cache = cfg.cache_config
    cache.num_gpu_blocks_override = settings.get("num_gpu_blocks_override")
    cache.mamba_cache_mode = settings.get("mamba_cache_mode", "none")
    cache.kv_cache_layout = layout
    for name in PARALLEL:
        if name in settings and getattr(cfg.parallel_config, name) != settings[name]:
            setattr(cfg.parallel_config, name, settings[name])
    spec = settings.get("speculative_config")
    if spec is not None:
        cfg.speculative_config = Speculative(spec)
    return cfg


def config_mismatches(cfg: Any, settings: dict[str, Any]) -> list[str]:
    """The derived settings (:data:`DERIVED`) where the built config disagrees with the case."""
    return [
        f"{name}: config {getattr(cfg, name)}, case {settings[name]}"
        for name in DERIVED
        if name in settings and getattr(cfg, name) != settings[name]
    ]


__all__ = ["MODEL", "Speculative", "config_mismatches", "model_dir", "real_vllm_config"]
