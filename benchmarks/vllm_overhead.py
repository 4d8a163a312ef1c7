"""Planning inside vLLM through kvrules vs vLLM's own planner, at about 1,000 layers, on either line.

Run inside a venv holding vLLM 0.28 or 0.33 (``scripts/vllm-parity`` builds one; vLLM with
``--no-deps`` on the CPU torch); the line is detected:

    python benchmarks/vllm_overhead.py [--calls 15] [--strategies auto] [--shape NAME ...]

One call is what the engine core does to plan. On vLLM 0.33: ``get_global_kv_cache_groups`` then
``get_kv_cache_configs`` (bytes per block, admission, the placement), kvrules selected through the
public platform hook. On vLLM 0.28: ``kv_cache_utils.get_kv_cache_configs``, kvrules selected by
``kvrules.integrations.vllm.install()``. The conversions are included. Both planners are measured
in one process, interleaved call by call (the order alternating), so a loaded machine slows both
alike; medians and ranges in ms and the median ratio kvrules / vLLM are printed, and "same plan"
compares groups, ``num_blocks`` and tensors. kvrules keeps its planner (``default_manager()``) and
its conversion cache across calls, as the integration does inside vLLM, so the first (cold) call
is reported apart. Every layer holds a spec object of its own, as vLLM's layers report them.

Shapes: Gemma-like 5:1; 750 Mamba + 250 full attention; the same + one draft layer; and a
DeepSeek-V4-like model (the geometry of the shared case ``quantized/c10e``: fp8_ds_mla MLA with
``state_content_bytes``, compress ratios 4 and 128, an indexer with its compressed state, and
sliding-window MLA caches), 252 model layers or 1,002 KV-cache layers, which vLLM 0.33 plans
through its packed path under a block-outermost layout (BLHNC) and vLLM 0.28 through its
DeepSeek-V4 tuple packing.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

LAYERS = 1000
MEMORY = 64 << 30
#: the shared case whose DeepSeek-V4 geometry the fourth shape repeats
DSV4_CASE = REPO / "tests" / "data" / "cases" / "quantized" / "c10e_dsv4_like_fp8_ds_mla.json"
#: model layers of the DeepSeek-V4-like shape: 2 dense + 125 (CSA, HCA) pairs = 1,002 caches
DSV4_MODEL_LAYERS = 252


def settings() -> dict[str, Any]:
    """The stand-in VllmConfig settings (4K context, no override), read by both lines."""
    return {
        "max_model_len": 4096,
        "original_max_model_len": 4096,
        "max_num_batched_tokens": 2048,
        "max_num_encoder_input_tokens": 2048,
        "max_in_flight_tokens": 2048,
        "disable_hybrid_kv_cache_manager": False,
        "num_gpu_blocks_override": None,
        "mamba_cache_mode": "none",
        "block_size": 16,
        "decode_context_parallel_size": 1,
        "prefill_context_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "tensor_parallel_size": 1,
        "speculative_config": None,
    }


def distinct(specs: dict[str, Any]) -> dict[str, Any]:
    """Every layer with a spec object of its own (equal, not identical), as vLLM's layers report."""
    return {name: copy.copy(spec) for name, spec in specs.items()}


def gemma(iface: Any, torch: Any, line: str) -> dict[str, Any]:
    """5 sliding-window layers to 1 full-attention layer."""
    common = {"block_size": 16, "num_kv_heads": 8, "head_size": 256, "dtype": torch.bfloat16}
    full = iface.FullAttentionSpec(**common)
    window = iface.SlidingWindowSpec(**common, sliding_window=1024)
    return distinct({f"model.layers.{i}": full if i % 6 == 5 else window for i in range(LAYERS)})


def mamba_hybrid(iface: Any, torch: Any, line: str, draft: bool = False) -> dict[str, Any]:
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
        tag = {"is_draft": True} if line == "0.33" else {}
        specs["draft.layers.0"] = iface.FullAttentionSpec(
            block_size=256, num_kv_heads=4, head_size=128, dtype=torch.bfloat16, **tag
        )
    return distinct(specs)


def _dsv4_kinds() -> dict[str, dict[str, dict[str, Any]]]:
    """c10e's caches of a dense, a CSA (compress ratio 4, with indexer) and an HCA (ratio 128)
    model layer, by cache suffix (``attn.swa_cache``, ...)."""
    layers = json.loads(DSV4_CASE.read_text())["layers"]

    def of(index: int) -> dict[str, dict[str, Any]]:
        prefix = f"model.layers.{index}."
        return {name[len(prefix) :]: data for name, data in layers.items() if name.startswith(prefix)}

    return {"dense": of(0), "csa": of(2), "hca": of(3)}


def dsv4_like(iface: Any, torch: Any, line: str) -> dict[str, Any]:
    """c10e's DeepSeek-V4 pattern over :data:`DSV4_MODEL_LAYERS` model layers (2 dense, then CSA
    and HCA alternating), converted to vLLM specs by kvrules (one object per distinct spec, then
    one per layer)."""
    import kvrules
    from kvrules import KVQuantMode
    from kvrules.integrations.vllm033_specs import to_vllm033_spec
    from kvrules.integrations.vllm_specs import to_vllm_spec, vllm_classes

    kinds = _dsv4_kinds()
    classes = vllm_classes()
    made: dict[str, Any] = {}

    def vllm_spec(data: dict[str, Any], layer: str) -> Any:
        key = json.dumps(data, sort_keys=True)
        if key not in made:
            data = dict(data)
            cache_dtype = data.pop("kv_cache_dtype", None)
            if cache_dtype is not None:
                data["kv_quant_mode"] = KVQuantMode.from_cache_dtype(cache_dtype).name
            spec = kvrules.spec_from_dict(data, layer=layer)
            made[key] = (
                to_vllm033_spec(spec, classes=classes, layer=layer)
                if line == "0.33"
                else to_vllm_spec(spec, layer=layer, classes=classes)
            )
        return made[key]

    specs: dict[str, Any] = {}
    for i in range(DSV4_MODEL_LAYERS):
        kind = "dense" if i < 2 else ("csa" if i % 2 == 0 else "hca")
        for suffix, data in kinds[kind].items():
            name = f"model.layers.{i}.{suffix}"
            specs[name] = vllm_spec(data, name)
    return distinct(specs)


#: shape name -> (specs builder, the KV-cache layout vLLM 0.33's engine resolves for it)
SHAPES: dict[str, tuple[Callable[[Any, Any, str], dict[str, Any]], str]] = {
    "gemma-like 5:1": (gemma, "LBNHC"),
    "750 mamba + 250 full": (mamba_hybrid, "LBNHC"),
    "same + 1 draft layer": (lambda i, t, line: mamba_hybrid(i, t, line, draft=True), "LBNHC"),
    "deepseek-v4-like": (dsv4_like, "BLHNC"),
}


class Line033:
    """vLLM 0.33: the engine core's two calls; kvrules through the platform hook."""

    name = "0.33"

    def __init__(self, strategies: str) -> None:
        import vllm_parity033 as parity  # type: ignore[import-not-found,unused-ignore]
        from vllm.platforms import current_platform  # type: ignore[import-not-found,unused-ignore]
        from vllm.v1.core import kv_cache_planning as planning  # type: ignore[import-not-found,unused-ignore]

        from kvrules.integrations import vllm033, vllm_platform

        self.parity, self.planning, self.vllm033, self.hook = parity, planning, vllm033, vllm_platform
        self.platform = type(current_platform)
        self.strategies = vllm033.parse_strategies(strategies, "vllm-0.33")

    def config(self, layout: str) -> Any:
        return self.parity.vllm_config(settings(), layout)

    def plan(self, cfg: Any, specs: dict[str, Any]) -> Any:
        groups = self.planning.get_global_kv_cache_groups(cfg, [specs])
        (config,) = self.planning.get_kv_cache_configs(cfg, [specs], [MEMORY], groups)
        return config

    def kvrules_on(self) -> None:
        self.hook.set_platform_hook(self.platform, strategies=self.strategies)

    def kvrules_off(self) -> None:
        self.hook.restore_platform_hook(self.platform)

    def forget(self) -> None:
        """Drop kvrules' state, so the next call is a cold one."""
        self.vllm033.reset()

    @staticmethod
    def outcome(config: Any) -> tuple[Any, ...]:
        return (
            [(tuple(g.layer_names), g.kv_cache_spec.page_size_bytes) for g in config.kv_cache_groups],
            config.num_blocks,
            sorted(
                (t.size, tuple(t.layers), t.layer_stride, t.block_stride, t.offset)
                for t in config.kv_cache_tensors
            ),
        )


class Line028:
    """vLLM 0.28: the engine core's ``get_kv_cache_configs``; kvrules through ``install()``."""

    name = "0.28"

    def __init__(self, strategies: str) -> None:
        import vllm_parity as parity  # type: ignore[import-not-found,unused-ignore]
        from vllm.v1.core import kv_cache_utils as utils  # type: ignore[import-not-found,unused-ignore]

        from kvrules.integrations import vllm as kv_vllm

        self.parity, self.utils, self.kv_vllm = parity, utils, kv_vllm
        self.strategies = kv_vllm.parse_strategies(strategies)

    def config(self, layout: str) -> Any:
        return self.parity.stand_in_config(settings())

    def plan(self, cfg: Any, specs: dict[str, Any]) -> Any:
        (config,) = self.utils.get_kv_cache_configs(cfg, [specs], [MEMORY])
        return config

    def kvrules_on(self) -> None:
        self.kv_vllm.install(self.strategies)

    def kvrules_off(self) -> None:
        self.kv_vllm.uninstall()

    def forget(self) -> None:
        """Drop kvrules' state, so the next call is a cold one."""
        self.kv_vllm.reset()

    @staticmethod
    def outcome(config: Any) -> tuple[Any, ...]:
        return (
            [(tuple(g.layer_names), g.kv_cache_spec.page_size_bytes) for g in config.kv_cache_groups],
            config.num_blocks,
            sorted(
                (t.size, tuple(t.shared_by), t.offset, getattr(t, "block_stride", 0))
                for t in config.kv_cache_tensors
            ),
        )


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds for ``call()`` and its result."""
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def measure_shape(line: Any, make: Callable[..., dict[str, Any]], layout: str, calls: int) -> dict[str, Any]:
    """One shape: the cold kvrules call, then ``calls`` rounds of one vLLM and one kvrules call."""
    import torch

    iface = importlib_interface()
    specs = make(iface, torch, line.name)
    cfg = line.config(layout)
    line.forget()
    line.kvrules_on()
    try:
        cold, _ = timed(lambda: line.plan(cfg, specs))
    finally:
        line.kvrules_off()
    theirs: list[float] = []
    ours: list[float] = []
    plans: dict[str, Any] = {}
    for round_ in range(calls):
        sides = ("vllm", "kvrules") if round_ % 2 == 0 else ("kvrules", "vllm")
        for side in sides:
            if side == "kvrules":
                line.kvrules_on()
            try:
                gc.collect()
                seconds, config = timed(lambda: line.plan(cfg, specs))
            finally:
                if side == "kvrules":
                    line.kvrules_off()
            (ours if side == "kvrules" else theirs).append(seconds)
            plans[side] = config
    return {
        "layers": len(specs),
        "vllm": theirs,
        "kvrules": ours,
        "cold": cold,
        "same": line.outcome(plans["vllm"]) == line.outcome(plans["kvrules"]),
    }


def importlib_interface() -> Any:
    from vllm.v1 import kv_cache_interface  # type: ignore[import-not-found,unused-ignore]

    return kv_cache_interface


def spread(values: list[float]) -> str:
    """``median (min-max)`` in ms."""
    ms = sorted(v * 1e3 for v in values)
    return f"{statistics.median(ms):7.1f} ({ms[0]:.1f}-{ms[-1]:.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15, help="rounds per shape (one call per side each)")
    parser.add_argument("--strategies", default="auto", help="kvrules' set (auto: the line's preset)")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these shapes")
    args = parser.parse_args(argv)
    import vllm  # type: ignore[import-not-found,unused-ignore]

    from kvrules.integrations import vllm_platform

    line = Line033(args.strategies) if vllm_platform.vllm_line() == "0.33" else Line028(args.strategies)
    print(
        f"vLLM {vllm.__version__} (line {line.name}), kvrules set {line.strategies!r}, "
        f"{args.calls} interleaved rounds; ms as median (min-max)"
    )
    print(
        f"{'shape':22s} {'layers':>6s}  {'vLLM ms':>22s}  {'kvrules ms':>22s}  {'cold ms':>8s}  "
        f"{'ratio':>6s}  same plan"
    )
    for shape in args.shape or list(SHAPES):
        make, layout = SHAPES[shape]
        row = measure_shape(line, make, layout, args.calls)
        ratio = statistics.median(row["kvrules"]) / statistics.median(row["vllm"])
        print(
            f"{shape:22s} {row['layers']:6d}  {spread(row['vllm']):>22s}  {spread(row['kvrules']):>22s}  "
            f"{row['cold'] * 1e3:8.1f}  {ratio:5.2f}x  {row['same']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
