"""The #43626 pair at vLLM engine start: max concurrency with vLLM alone vs ``KVRULES_VLLM_STRATEGIES``.

**Not an engine start.** No vLLM engine can start on this machine (the wheel is a CUDA build, and
there are no weights). This script builds a ``VllmConfig`` by hand (a ``SimpleNamespace`` holding
every attribute the functions below read) with stub attention and Mamba backends and layers, and
calls, in the order vLLM's worker and engine core do:

1. the platform's ``update_block_size_for_backend`` (vLLM's generic ``Platform`` method, which
   CUDA uses; wrapped by kvrules when the general plugin ran);
2. the layers' KV-cache specs, built from the resulting ``cache_config`` as vLLM's ``Attention``
   and ``MambaBase`` layers build them;
3. vLLM's planning: ``kv_cache_utils.get_kv_cache_configs`` (0.28; kvrules' drop-ins once
   installed), or Core's ``get_global_kv_cache_groups`` + ``get_kv_cache_configs`` (0.33;
   kvrules' builder through the platform hook);
4. ``get_max_concurrency_for_kv_cache_config``.

The pair is kvrules/examples/hf/qwen3-coder-next/ (Qwen3-Coder-Next, 12 full-attention + 36
gated-delta-net layers, with a 36-layer Qwen3-4B-class draft), fp8 KV, 4 speculative tokens,
``mamba_cache_mode`` align (prefix caching), TP1. The stubs: one attention backend with kernel
blocks ``MultipleOf(16)`` (FlashAttention's), an SSM backend for the GDN layers, and a model
class whose Mamba state shapes follow the GDN formula (conv ``(kernel - 1 + k, 2 x keys + values)``,
recurrent ``(value heads, key dim, value dim)``, the model dtype).

Run it in a throwaway venv with vLLM (0.28 or 0.33) and kvrules::

    /tmp/venv-vllm033/bin/python benchmarks/vllm_engine_start.py [--memory 40GiB] [--max-model-len 4096]

It prints the three cache values, ``num_blocks``, the page and the max concurrency of each side,
kvrules' engine-start decision, the ratio, and the offline ``kvrules compare`` figures for the
same pair. Exit status 2 with a message when vLLM is not importable.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

EXAMPLE = Path(__file__).resolve().parent.parent / "kvrules" / "examples" / "hf" / "qwen3-coder-next"
STRATEGIES_ENV = "KVRULES_VLLM_STRATEGIES"


def require_vllm() -> str:
    """The vLLM line (``0.28`` / ``0.33``), or exit 2 saying how to run this."""
    try:
        importlib.import_module("vllm.platforms.interface")
        importlib.import_module("vllm.v1.core.kv_cache_utils")
    except ImportError as exc:
        print(
            f"vllm_engine_start: vLLM is not importable here ({exc}); run this script in a throwaway "
            "venv with vLLM 0.28 or 0.33 and kvrules installed (e.g. /tmp/venv-vllm033/bin/python)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    from kvrules.integrations import vllm_platform

    return vllm_platform.vllm_line()


# -- stubs -------------------------------------------------------------------------------------
def stub_backend(name: str, *, kernel: int = 16, ssm: bool = False) -> type:
    """An ``AttentionBackend`` subclass declaring ``MultipleOf(kernel)``; every abstract method raises."""
    from vllm.v1.attention.backend import AttentionBackend, MultipleOf  # type: ignore[import-not-found,unused-ignore]

    def unused(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is a stub backend")

    body: dict[str, Any] = {m: staticmethod(unused) for m in AttentionBackend.__abstractmethods__}
    body["get_name"] = staticmethod(lambda: name)
    body["get_supported_kernel_block_sizes"] = staticmethod(lambda *a: [MultipleOf(kernel)])
    body["is_ssm"] = classmethod(lambda cls: ssm)
    return type(name, (AttentionBackend,), body)


def stub_layer(backend: type, spec: Any) -> Any:
    """An ``AttentionLayerBase`` whose backend is ``backend`` and whose spec is ``spec(vllm_config)``."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase  # type: ignore[import-not-found,unused-ignore]

    cls = type(
        "StubLayer",
        (AttentionLayerBase,),
        {
            "get_attn_backend": lambda self: backend,
            "get_kv_cache_spec": lambda self, cfg: spec(cfg),
        },
    )
    return cls()


def gdn_shapes(hf: dict[str, Any], k: int, tp: int) -> tuple[tuple[int, ...], ...]:
    """The GDN layer's states: conv ``(kernel - 1 + k, (2 x key heads x key dim + value heads x value dim) / tp)``
    and recurrent ``(value heads / tp, key dim, value dim)``."""
    keys = hf["linear_num_key_heads"] * hf["linear_key_head_dim"]
    values = hf["linear_num_value_heads"] * hf["linear_value_head_dim"]
    conv = (hf["linear_conv_kernel_dim"] - 1 + k, (2 * keys + values) // tp)
    return conv, (hf["linear_num_value_heads"] // tp, hf["linear_key_head_dim"], hf["linear_value_head_dim"])


class StubModel:
    """What ``ModelRegistry.resolve_model_cls`` returns for the target: the Mamba state shapes."""

    hf: ClassVar[dict[str, Any]] = {}

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: Any) -> tuple[tuple[int, ...], ...]:
        k = vllm_config.speculative_config.num_speculative_tokens
        return gdn_shapes(cls.hf, k, vllm_config.parallel_config.tensor_parallel_size)

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: Any) -> tuple[Any, ...]:
        dtype = vllm_config.model_config.dtype
        return dtype, dtype


@contextlib.contextmanager
def stub_registry(checkpoint_alignment: int | None) -> Iterator[None]:
    """``ModelRegistry.resolve_model_cls`` answering :class:`StubModel` (the real class needs CUDA
    packages) and, on 0.33, the GDN layers' prefill checkpoint alignment (FlashInfer's GDN prefill
    declares 64; ``None``: the stub layers declare none)."""
    from vllm.model_executor.layers.mamba import abstract  # type: ignore[import-not-found,unused-ignore]
    from vllm.model_executor.models import ModelRegistry  # type: ignore[import-not-found,unused-ignore]

    saved = ModelRegistry.__dict__.get("resolve_model_cls")
    saved_alignment = abstract.__dict__.get("get_mamba_prefill_checkpoint_alignment")
    ModelRegistry.resolve_model_cls = lambda *a, **k: (StubModel, "Qwen3NextForCausalLM")  # type: ignore[method-assign]
    if saved_alignment is not None:
        abstract.get_mamba_prefill_checkpoint_alignment = lambda cfg: checkpoint_alignment
    try:
        yield
    finally:
        if saved is None:
            del ModelRegistry.resolve_model_cls
        else:
            ModelRegistry.resolve_model_cls = saved  # type: ignore[method-assign]
        if saved_alignment is not None:
            abstract.get_mamba_prefill_checkpoint_alignment = saved_alignment


# -- the hand-built VllmConfig -----------------------------------------------------------------
class Speculative:
    """``speculative_config`` for a separate draft model (vLLM's ``draft_model`` method)."""

    method = "draft_model"

    def __init__(self, k: int, draft_hf: Any) -> None:
        self.num_speculative_tokens = k
        self.draft_model_config = SimpleNamespace(hf_config=draft_hf)

    def use_multi_module_mtp(self) -> bool:
        return False

    def use_eagle(self) -> bool:
        return False

    def use_eagle_block_drop(self) -> bool:
        return False


def hf_config(directory: Path, name: str) -> Any:
    """The config as vLLM holds it: transformers' config class, built offline from the file."""
    import transformers

    data = json.loads((directory / name).read_text())
    return transformers.AutoConfig.for_model(data.pop("model_type"), **data)


def make_config(args: argparse.Namespace, line: str) -> SimpleNamespace:
    """The ``VllmConfig`` stand-in before ``update_block_size_for_backend`` (block size 16)."""
    import torch

    target, draft = hf_config(EXAMPLE, "config.json"), hf_config(EXAMPLE, "draft.json")
    cache = SimpleNamespace(
        block_size=16,
        user_specified_block_size=False,
        user_specified_mamba_block_size=False,
        cache_dtype="fp8",
        kv_cache_dtype_skip_layers=[],
        mamba_cache_mode="align",
        mamba_block_size=None,
        mamba_page_size_padded=None,
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype="auto",
        enable_prefix_caching=True,
        use_replayssm=False,
        num_gpu_blocks_override=None,
        prefix_cache_retention_interval=None,
        kv_cache_layout="LBNHC",
    )
    if line == "0.33":
        from vllm.config.cache import CacheConfig  # type: ignore[import-not-found,unused-ignore]

        cache.get_resolved_kv_cache_layout = lambda: CacheConfig.get_resolved_kv_cache_layout(cache)
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=target,
            dtype=torch.bfloat16,
            max_model_len=args.max_model_len,
            original_max_model_len=args.max_model_len,
            use_mla=False,
            is_hybrid=True,
            architecture="Qwen3NextForCausalLM",
            architectures=["Qwen3NextForCausalLM"],
            supports_kv_cache_grouping=False,
            get_num_kv_heads=lambda pc: target.num_key_value_heads // pc.tensor_parallel_size,
            get_head_size=lambda: target.head_dim,
        ),
        cache_config=cache,
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=8192,
            max_num_encoder_input_tokens=8192,
            disable_hybrid_kv_cache_manager=False,
        ),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            prefill_context_parallel_size=1,
        ),
        attention_config=SimpleNamespace(hisparse_config=None),
        device_config=SimpleNamespace(device_type="cuda"),
        speculative_config=Speculative(args.k, draft),
        kv_transfer_config=None,
        max_in_flight_tokens=8192,
        num_prefill_lookahead_tokens=0,
        num_speculative_tokens=args.k,
    )
    cfg.compilation_config = SimpleNamespace(static_forward_context=layers(cfg, target, draft, line))
    StubModel.hf = target.to_dict()
    return cfg


def _fields(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def attention_spec(heads: int, head: int, draft: bool) -> Any:
    """What vLLM's ``Attention`` layer builds: the cache block size, fp8 (uint8) storage."""
    import torch
    from vllm.v1 import kv_cache_interface as kvi  # type: ignore[import-not-found,unused-ignore]

    def build(cfg: Any) -> Any:
        kwargs: dict[str, Any] = {"num_kv_heads": heads, "head_size": head, "dtype": torch.uint8}
        if "kv_quant_mode" in _fields(kvi.FullAttentionSpec):
            kwargs["kv_quant_mode"] = kvi.get_kv_quant_mode(cfg.cache_config.cache_dtype)
        if draft and "is_draft" in _fields(kvi.FullAttentionSpec):
            kwargs["is_draft"] = True
        return kvi.FullAttentionSpec(block_size=cfg.cache_config.block_size, **kwargs)

    return build


def mamba_spec(shapes: Any, dtypes: Any) -> Any:
    """What vLLM's ``MambaBase`` layer builds from ``mamba_block_size`` and ``mamba_page_size_padded``."""
    from vllm.v1 import kv_cache_interface as kvi  # type: ignore[import-not-found,unused-ignore]

    def build(cfg: Any) -> Any:
        cache = cfg.cache_config
        kwargs: dict[str, Any] = {
            "shapes": shapes,
            "dtypes": dtypes,
            "block_size": cache.mamba_block_size,
            "page_size_padded": cache.mamba_page_size_padded,
            "mamba_cache_mode": cache.mamba_cache_mode,
            "num_speculative_blocks": cfg.num_speculative_tokens,
        }
        if "mamba_type" in _fields(kvi.MambaSpec):
            kwargs["mamba_type"] = gdn_type()
        return kvi.MambaSpec(**kwargs)

    return build


def gdn_type() -> Any:
    """The GDN ``mamba_type`` value of this vLLM (an enum member, or the string)."""
    with contextlib.suppress(ImportError, AttributeError):
        enum = importlib.import_module("vllm.v1.attention.backends.registry").MambaAttentionBackendEnum
        return enum.GDN_ATTN
    return "gdn_attention"


def layers(cfg: Any, target: Any, draft: Any, line: str) -> dict[str, Any]:
    """The forward context: the target's attention and GDN layers, then the draft's attention layers."""
    import torch

    attention, gdn = stub_backend("STUB_FLASH_ATTN"), stub_backend("STUB_GDN_ATTN", ssm=True)
    shapes = gdn_shapes(target.to_dict(), cfg.num_speculative_tokens, 1)
    out: dict[str, Any] = {}
    for i, kind in enumerate(target.layer_types):
        if kind == "full_attention":
            spec = attention_spec(target.num_key_value_heads, target.head_dim, False)
            out[f"model.layers.{i}.self_attn.attn"] = stub_layer(attention, spec)
        else:
            out[f"model.layers.{i}.linear_attn"] = stub_layer(gdn, mamba_spec(shapes, (torch.bfloat16,) * 2))
    for i in range(draft.num_hidden_layers):
        spec = attention_spec(draft.num_key_value_heads, draft.head_dim, True)
        out[f"draft_model.model.layers.{i}.self_attn.attn"] = stub_layer(attention, spec)
    return out


# -- one side ------------------------------------------------------------------------------------
def reset_kvrules() -> None:
    """vLLM plans by itself again: no drop-ins, no hooks, no selection."""
    from vllm import platforms  # type: ignore[import-not-found,unused-ignore]

    from kvrules.integrations import vllm as kv_vllm
    from kvrules.integrations import vllm033, vllm_platform

    kv_vllm.uninstall()
    vllm_platform.restore_platform_hook(type(platforms.current_platform))
    vllm033.reset()


def plan(cfg: Any, line: str, specs: dict[str, Any], memory: int) -> Any:
    """vLLM's planning of one worker (whatever kvrules replaced or selected)."""
    if line == "0.28":
        utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
        return utils.get_kv_cache_configs(cfg, [specs], [memory])[0]
    planning = importlib.import_module("vllm.v1.core.kv_cache_planning")
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    return planning.get_kv_cache_configs(cfg, [specs], [memory], groups)[0]


def side(
    args: argparse.Namespace, line: str, strategies: str | None, *, values_only: bool = False
) -> dict[str, Any]:
    """One engine start: the general plugin (when ``strategies``), the platform's hook, the plan.
    ``values_only``: only the engine-start wrapper, vLLM's own planner (no drop-ins, no builder)."""
    from vllm import platforms  # type: ignore[import-not-found,unused-ignore]
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config  # type: ignore[import-not-found,unused-ignore]

    from kvrules import Planner
    from kvrules.integrations import vllm as kv_vllm
    from kvrules.integrations import vllm_align

    reset_kvrules()
    os.environ.pop(STRATEGIES_ENV, None)
    if strategies is not None and values_only:
        planner = Planner(strategies)
        vllm_align.wrap_platform(type(platforms.current_platform), lambda: planner, line)
    elif strategies is not None:
        os.environ[STRATEGIES_ENV] = strategies
        kv_vllm.vllm_general_plugin()  # what vLLM runs in every process
    cfg = make_config(args, line)
    before = vllm_align.last_decision()
    with stub_registry(args.checkpoint_alignment):
        type(platforms.current_platform).update_block_size_for_backend(cfg)
    decision = vllm_align.last_decision()
    specs = {
        n: layer.get_kv_cache_spec(cfg) for n, layer in cfg.compilation_config.static_forward_context.items()
    }
    config = plan(cfg, line, specs, args.memory)
    cache = cfg.cache_config
    reset_kvrules()
    vllm_align.unwrap_platform(type(platforms.current_platform))
    os.environ.pop(STRATEGIES_ENV, None)
    return {
        "values": (cache.block_size, cache.mamba_block_size, cache.mamba_page_size_padded),
        "num_blocks": config.num_blocks,
        "pages": sorted({g.kv_cache_spec.page_size_bytes for g in config.kv_cache_groups}),
        "max_concurrency": get_max_concurrency_for_kv_cache_config(cfg, config),
        "decision": None
        if decision is before or decision is None
        else f"{decision.outcome}: {decision.rule}",
    }


def offline(args: argparse.Namespace) -> dict[str, float]:
    """``kvrules compare`` for the same pair (vLLM's rules and ``default``), no vLLM involved."""
    from kvrules import EngineConfig, Planner
    from kvrules.hf import HFOptions, model_from_hf

    options = HFOptions(
        kv_cache_dtype="fp8",
        num_speculative_tokens=args.k,
        mamba_cache_mode="align",
        max_model_len=args.max_model_len,
    )
    out = {}
    for name in ("vllm", "default"):
        model = model_from_hf(EXAMPLE / "config.json", EXAMPLE / "draft.json", options, strategies=name)
        config = EngineConfig.from_dict({**model.engine, "max_model_len": args.max_model_len})
        out[name] = Planner(name).plan(model.specs, args.memory, config).max_concurrency
    return out


def parse_memory(text: str) -> int:
    from kvrules.units import parse_size

    return parse_size(text)


def bench_platform() -> Any:
    """The active platform for the run: vLLM's generic ``update_block_size_for_backend`` (the one
    CUDA uses; ``UnspecifiedPlatform`` overrides nothing of it), on a class of its own so that
    wrapping it touches no other platform."""
    from vllm.platforms.interface import UnspecifiedPlatform  # type: ignore[import-not-found,unused-ignore]

    return type("BenchPlatform", (UnspecifiedPlatform,), {})()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory", type=parse_memory, default=parse_memory("40GiB"), help="KV-cache memory")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4, help="speculative tokens")
    parser.add_argument(
        "--strategies", default="default", help="KVRULES_VLLM_STRATEGIES for the kvrules side"
    )
    parser.add_argument(
        "--checkpoint-alignment",
        type=int,
        default=None,
        help="0.33: the GDN layers' prefill checkpoint alignment (64 with FlashInfer's GDN prefill)",
    )
    args = parser.parse_args(argv)
    line = require_vllm()
    from vllm import platforms  # type: ignore[import-not-found,unused-ignore]

    platforms.current_platform = bench_platform()
    alone = side(args, line, None)
    ours = side(args, line, args.strategies)
    values = side(args, line, args.strategies, values_only=True)
    print(
        f"vLLM {line}, the #43626 pair, max_model_len {args.max_model_len}, memory {args.memory:,} B, "
        f"checkpoint alignment {args.checkpoint_alignment}"
    )
    print("hand-built VllmConfig with stub backends: NOT an engine start")
    rows = (
        ("vLLM alone", alone),
        (f"{STRATEGIES_ENV}={args.strategies}", ours),
        ("kvrules' values, vLLM's planner", values),
    )
    for label, row in rows:
        print(
            f"  {label:34} block/mamba_block/mamba_padded {row['values']}, pages {row['pages']}, "
            f"num_blocks {row['num_blocks']:,}, max concurrency {row['max_concurrency']:.2f}"
            + (f"  [kvrules {row['decision']}]" if row["decision"] else "")
        )
    print(f"  ratio: {ours['max_concurrency'] / alone['max_concurrency']:.3f}x")
    print(
        f"  ratio, kvrules' values with vLLM's planner: {values['max_concurrency'] / alone['max_concurrency']:.3f}x"
    )
    figures = offline(args)
    print(
        f"  offline kvrules compare: vllm {figures['vllm']:.2f}, default {figures['default']:.2f}, "
        f"ratio {figures['default'] / figures['vllm']:.3f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
