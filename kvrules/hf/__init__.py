"""The model front door: per-layer specs straight from a Hugging Face ``config.json``.

``build_hf_model(config, draft, HFOptions(...))`` selects a registered :class:`Architecture`
(stage ``arch``), builds the target's and the draft's specs, and runs the active aligners (stage
``align``, e.g. ``hybrid-align``). ``model_from_hf`` returns a model file the planner can plan;
``specs_from_hf`` returns ``(specs, decisions)``. See docs/hf.md.
"""

from kvrules.hf import layers, mamba
from kvrules.hf.align import (
    AlignContext,
    HybridAlignment,
    align_specs,
    apply_hybrid_alignment,
    attention_geometry,
    attention_page_per_token,
    hybrid_block_size,
    mamba_page,
    vllm_hybrid_alignment,
)
from kvrules.hf.architecture import Architecture
from kvrules.hf.backends import BACKENDS, AttentionBackend
from kvrules.hf.build import (
    DRAFT_PREFIX,
    MTP,
    BuiltModel,
    HFModel,
    HFModelFile,
    build_hf_model,
    model_from_hf,
    specs_from_hf,
)
from kvrules.hf.config import HFConfig
from kvrules.hf.options import KV_CACHE_DTYPES, HFOptions
from kvrules.hf.settings import BuildSettings, KVCacheDType

__all__ = [
    "BACKENDS",
    "DRAFT_PREFIX",
    "KV_CACHE_DTYPES",
    "MTP",
    "AlignContext",
    "Architecture",
    "AttentionBackend",
    "BuildSettings",
    "BuiltModel",
    "HFConfig",
    "HFModel",
    "HFModelFile",
    "HFOptions",
    "HybridAlignment",
    "KVCacheDType",
    "align_specs",
    "apply_hybrid_alignment",
    "attention_geometry",
    "attention_page_per_token",
    "build_hf_model",
    "hybrid_block_size",
    "layers",
    "mamba",
    "mamba_page",
    "model_from_hf",
    "specs_from_hf",
    "vllm_hybrid_alignment",
]
