"""Plan time versus model size, pipeline stages, auto-fit, and logging overhead.

Prints microseconds per layer for a hybrid model (Mamba + full attention + a dense draft, the
geometry of vLLM issue #43626) at 48 to 100,000 layers. Target: linear growth; 100,000 layers in
under 1 s. Run: ``.venv/bin/python benchmarks/plan_scaling.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import structlog

import kvrules
from kvrules import EngineConfig, FullAttentionSpec, KVCacheSpec, MambaSpec, Planner

BLOCK = 1136
MAMBA = MambaSpec(
    BLOCK,
    [[7, 8192], [32, 128, 128]],
    ["bfloat16", "bfloat16"],
    mamba_cache_mode="align",
    num_speculative_blocks=4,
)
TARGET = FullAttentionSpec(
    BLOCK, num_kv_heads=2, head_size=256, dtype="uint8", kv_quant_mode="FP8_PER_TENSOR"
)
DRAFT = FullAttentionSpec(BLOCK, num_kv_heads=8, head_size=128, dtype="uint8", kv_quant_mode="FP8_PER_TENSOR")


def hybrid_model(layers: int) -> dict[str, KVCacheSpec]:
    """``layers`` layers: 7/8 target (3 Mamba : 1 full attention), 1/8 draft."""
    draft = max(1, layers // 8)
    target = layers - draft
    specs: dict[str, KVCacheSpec] = {}
    for i in range(target):
        if (i + 1) % 4 == 0:
            specs[f"model.layers.{i}.self_attn.attn"] = TARGET
        else:
            specs[f"model.layers.{i}.linear_attn"] = MAMBA
    for i in range(draft):
        specs[f"draft.model.layers.{i}.self_attn.attn"] = DRAFT
    return specs


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Smallest wall time of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def split(specs: dict[str, KVCacheSpec], stages: int) -> list[dict[str, KVCacheSpec]]:
    names = list(specs)
    size = -(-len(names) // stages)
    return [{n: specs[n] for n in names[i : i + size]} for i in range(0, len(names), size)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 2 if args.quick else 5
    sizes = [48, 1_000, 10_000] if args.quick else [48, 1_000, 10_000, 100_000]
    config = EngineConfig(max_model_len=32_768, max_num_batched_tokens=8192)
    structlog.reset_defaults()
    unconfigured = Planner("vllm")
    planner = unconfigured
    planner.plan(hybrid_model(48), 40 << 30, config)  # warm up

    default = Planner()
    default.plan(hybrid_model(48), 40 << 30, config)
    print("plan time of a hybrid model (Mamba + full attention + draft), structlog unconfigured")
    print(
        f"{'layers':>8} {'vllm ms':>10} {'us/layer':>10} {'default ms':>11} {'us/layer':>10} {'decisions':>10}"
    )
    per_layer = []
    for n in sizes:
        specs = hybrid_model(n)
        memory = max(40 << 30, n * (64 << 20))
        seconds = best_of(lambda s=specs, m=memory: unconfigured.plan(s, m, config), repeat)
        with_default = best_of(lambda s=specs, m=memory: default.plan(s, m, config), max(1, repeat // 2))
        plan = unconfigured.plan(specs, memory, config)
        per_layer.append(seconds / n * 1e6)
        print(
            f"{n:>8} {seconds * 1e3:>10.1f} {seconds / n * 1e6:>10.2f} {with_default * 1e3:>11.1f} "
            f"{with_default / n * 1e6:>10.2f} {len(plan.decisions):>10}"
        )
    print(
        f"us/layer ratio largest/1000-layer model (vllm): {per_layer[-1] / per_layer[1]:.2f} (1.00 = linear)"
    )

    n = 10_000
    specs = hybrid_model(n)
    quiet = best_of(lambda: unconfigured.plan(specs, 1 << 40, config), repeat)
    sink = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(10),
        logger_factory=structlog.PrintLoggerFactory(sink),
    )
    logged = best_of(lambda: unconfigured.plan(specs, 1 << 40, config), repeat)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    filtered = best_of(lambda: unconfigured.plan(specs, 1 << 40, config), repeat)
    structlog.reset_defaults()
    print()
    print(
        f"logging overhead at {n} layers: unconfigured {quiet * 1e3:.1f} ms; configured at debug "
        f"(JSON to memory) {logged * 1e3:.1f} ms ({logged / quiet:.2f}x); configured at warning "
        f"{filtered * 1e3:.1f} ms ({filtered / quiet:.2f}x)"
    )

    print()
    base = hybrid_model(1_000)
    one = best_of(lambda: planner.plan(base, 40 << 30, config), repeat)
    print(f"pipeline stages, 1,000-layer model (1 stage: {one * 1e3:.1f} ms)")
    for stages in (2, 4, 8):
        workers = split(base, stages)
        memory = [(40 << 30) - i * (1 << 30) for i in range(stages)]
        t = best_of(lambda w=workers, m=memory: planner.plan(w, m, config), repeat)
        print(f"  {stages} stages: {t * 1e3:7.1f} ms  ({t / one:.2f}x one stage)")

    fit = EngineConfig(max_model_len=1 << 20, max_num_batched_tokens=8192, auto_fit_max_model_len=True)
    plain = best_of(lambda: planner.plan(base, 40 << 30, config), repeat)
    fitted = best_of(lambda: planner.plan(base, 40 << 30, fit), repeat)
    plan = planner.plan(base, 40 << 30, fit)
    print()
    print(
        f"auto-fit, 1,000 layers, 40 GiB, upper bound {fit.max_model_len}: {fitted * 1e3:.1f} ms "
        f"(plan without auto-fit {plain * 1e3:.1f} ms, {fitted / plain:.2f}x); fitted max_model_len {plan.max_model_len}"
    )
    print(f"median us/layer over sizes: {statistics.median(per_layer):.2f}; kvrules {kvrules.__version__}")


if __name__ == "__main__":
    main()
