"""Planning inside vLLM 0.33 through kvrules' builder vs vLLM's own builder, at 1,000 layers.

Run inside a venv holding vLLM 0.33 (``scripts/vllm-parity --vllm 0.33`` builds one; vLLM with
``--no-deps`` on the CPU torch):

    python benchmarks/vllm_overhead.py [--calls 10]

Each call is what vLLM 0.33's engine core does: ``get_global_kv_cache_groups`` then
``get_kv_cache_configs`` (one-block probe or declared bytes per block, admission, the placement),
with the conversions included. Both builders are measured side by side in one process, the
platform hook switched between them; medians in ms and the ratio kvrules / vLLM are printed.
kvrules keeps its planner (``default_manager()``) and conversion cache across calls, as the
integration does inside vLLM, so the first (cold) call is reported apart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

LAYERS = 1000
MEMORY = 64 << 30


def settings() -> dict[str, Any]:
    """The stand-in VllmConfig settings of the shared cases (4K context, no override)."""
    return {
        "max_model_len": 4096,
        "original_max_model_len": 4096,
        "max_num_batched_tokens": 2048,
        "max_num_encoder_input_tokens": 2048,
        "max_in_flight_tokens": 2048,
        "disable_hybrid_kv_cache_manager": False,
        "num_gpu_blocks_override": None,
        "mamba_cache_mode": "none",
        "decode_context_parallel_size": 1,
        "prefill_context_parallel_size": 1,
        "tensor_parallel_size": 1,
        "speculative_config": None,
    }


def gemma(iface: Any, torch: Any) -> dict[str, Any]:
    """5 sliding-window layers to 1 full-attention layer."""
    common = {"block_size": 16, "num_kv_heads": 8, "head_size": 256, "dtype": torch.bfloat16}
    return {
        f"model.layers.{i}": iface.FullAttentionSpec(**common)
        if i % 6 == 5
        else iface.SlidingWindowSpec(**common, sliding_window=1024)
        for i in range(LAYERS)
    }


def mamba_hybrid(iface: Any, torch: Any, draft: bool = False) -> dict[str, Any]:
    """750 Mamba layers and 250 full-attention layers (pages aligned as vLLM's config step does),
    plus one dense draft layer with a smaller page when ``draft``."""
    attn = iface.FullAttentionSpec(block_size=256, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    mamba = iface.MambaSpec(
        block_size=256,
        shapes=((3, 4096), (32, 64, 128)),
        dtypes=(torch.bfloat16, torch.bfloat16),
        page_size_padded=attn.page_size_bytes,
    )
    specs = {f"model.layers.{i}": attn if i % 4 == 3 else mamba for i in range(LAYERS)}
    if draft:
        specs["draft.layers.0"] = iface.FullAttentionSpec(
            block_size=256, num_kv_heads=4, head_size=128, dtype=torch.bfloat16, is_draft=True
        )
    return specs


SHAPES = {
    "gemma-like 5:1": lambda i, t: gemma(i, t),
    "750 mamba + 250 full": lambda i, t: mamba_hybrid(i, t),
    "same + 1 draft layer": lambda i, t: mamba_hybrid(i, t, draft=True),
}


def one_plan(planning: Any, cfg: SimpleNamespace, specs: dict[str, Any]) -> float:
    """Seconds for the engine core's two calls."""
    start = time.perf_counter()
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    planning.get_kv_cache_configs(cfg, [specs], [MEMORY], groups)
    return time.perf_counter() - start


def outcome(planning: Any, cfg: SimpleNamespace, specs: dict[str, Any]) -> tuple[Any, ...]:
    """Groups (layers, page), num_blocks and tensors: what must agree for the timing to count."""
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    (config,) = planning.get_kv_cache_configs(cfg, [specs], [MEMORY], groups)
    return (
        [(tuple(g.layer_names), g.kv_cache_spec.page_size_bytes) for g in groups],
        config.num_blocks,
        sorted(
            (t.size, tuple(t.layers), t.layer_stride, t.block_stride, t.offset)
            for t in config.kv_cache_tensors
        ),
    )


def measure(calls: int) -> list[tuple[str, float, float, float, bool]]:
    """(shape, vLLM median ms, kvrules cold ms, kvrules median ms, same plan) per shape."""
    import torch
    import vllm_parity033 as parity
    from vllm.platforms import current_platform
    from vllm.v1 import kv_cache_interface as iface
    from vllm.v1.core import kv_cache_planning as planning

    from kvrules.integrations import vllm_platform

    platform = type(current_platform)
    rows = []
    for shape, make in SHAPES.items():
        specs = make(iface, torch)
        cfg = parity.vllm_config(settings(), "LBNHC")
        theirs = statistics.median(one_plan(planning, cfg, specs) for _ in range(calls))
        want = outcome(planning, cfg, specs)
        vllm_platform.set_platform_hook(platform, strategies="vllm-0.33")
        try:
            cold = one_plan(planning, cfg, specs)
            ours = statistics.median(one_plan(planning, cfg, specs) for _ in range(calls))
            same = outcome(planning, cfg, specs) == want
        finally:
            vllm_platform.restore_platform_hook(platform)
        rows.append((shape, theirs * 1e3, cold * 1e3, ours * 1e3, same))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    import vllm

    print(f"vLLM {vllm.__version__}, {LAYERS} layers, median of {args.calls} calls")
    print(f"{'shape':24s} {'vLLM ms':>9s} {'kvrules cold':>13s} {'kvrules ms':>11s} {'ratio':>7s}  same plan")
    for shape, theirs, cold, ours, same in measure(args.calls):
        print(f"{shape:24s} {theirs:9.1f} {cold:13.1f} {ours:11.1f} {ours / theirs:6.2f}x  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
