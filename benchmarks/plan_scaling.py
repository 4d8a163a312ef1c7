"""Plan time versus model size, pipeline stages, auto-fit, logging overhead, and JSON at scale.

Prints microseconds per layer for a hybrid model (Mamba + full attention + a dense draft, the
geometry of vLLM issue #43626) at 48 to 100,000 layers. Target: linear growth; 100,000 layers in
under 1 s.

Then, for the ``vllm`` and ``default`` sets, each figure in a fresh process (``--child``; memory
``max(80 GiB, layers x 1 GiB)``, structlog at warning): at 100,000 layers the plan time, the
``to_json()`` time and their ratio (target <= 2; fastest against fastest, and the median over
the JSON processes of each one's ``to_json`` time over its own plan time), the peak RSS
(``ru_maxrss`` of that process, the returned JSON string included; target < 300 MiB) and that
every decision is in the JSON; the same for ``to_json(indent=2)``; and the 1,000,000-layer plan
time with its ratio to the 100,000-layer one (target <= 12), the two sizes' processes taking
turns. A plan holds its decision records from construction (the first read of
``plan.decisions`` is timed apart, and costs nothing).
Then (not with ``--scale-only``) issue 25's case, 100,000 layers with one spec object per
layer from a model file and from an HF config against 10,000 (in-process plan time, the
readers imported first; target <= 12x), and a 100,000-layer plan document read back with its
invariant checks (``Plan.from_dict``) beside ``check_plan`` alone.
Run: ``.venv/bin/python benchmarks/plan_scaling.py`` (``--quick`` for a short
run, ``--scale-only`` for the fresh-process figures alone).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

import kvrules
from kvrules import EngineConfig, FullAttentionSpec, KVCacheSpec, MambaSpec, Plan, Planner
from kvrules.hf import specs_from_hf
from kvrules.model import load_model_file
from kvrules.plan import check_plan

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


def per_layer_tables(quick: bool) -> None:
    """Plan time per layer, logging overhead, pipeline stages and auto-fit, in this process."""
    repeat = 2 if quick else 5
    sizes = [48, 1_000, 10_000] if quick else [48, 1_000, 10_000, 100_000]
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


# -- JSON and planning at scale: one fresh process per figure ------------------------------------

SCALE_CONFIG = EngineConfig(max_model_len=32_768, max_num_batched_tokens=8192)
#: what the JSON figures are written as: the default (compact) text, and indented by 2
JSON_MODES = {"json": None, "json-indent": 2}


def scale_memory(layers: int) -> int:
    """``max(80 GiB, layers x 1 GiB)``: every layer count plans with room to spare."""
    return max(80 << 30, layers << 30)


def child(mode: str, layers: int, strategies: str) -> None:
    """One figure, measured in this process (started fresh for it); prints one JSON line.

    ``mode`` is ``plan`` (plan time and peak RSS) or a key of :data:`JSON_MODES` (plus the
    ``to_json`` time; the peak is read while the JSON string is still held).
    """
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    planner = Planner(strategies)
    planner.plan(hybrid_model(48), scale_memory(48), SCALE_CONFIG)  # warm up: plugins loaded
    specs = hybrid_model(layers)
    start, cpu = time.perf_counter(), time.process_time()
    plan = planner.plan(specs, scale_memory(layers), SCALE_CONFIG)
    out: dict[str, Any] = {"plan_s": time.perf_counter() - start, "plan_cpu_s": time.process_time() - cpu}
    start = time.perf_counter()
    out["decisions"] = len(plan.decisions)  # per-layer records are made on this first read
    out["read_decisions_s"] = time.perf_counter() - start
    text = ""
    if mode in JSON_MODES:
        start, cpu = time.perf_counter(), time.process_time()
        text = plan.to_json(indent=JSON_MODES[mode])
        out["json_s"], out["json_cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if text:
        out["json_mib"] = len(text) / (1 << 20)
        out["decisions_in_json"] = text.count('"stage":')  # one per decision record
    print(json.dumps(out))


def run_child(mode: str, layers: int, strategies: str) -> dict[str, Any]:
    """:func:`child`'s figures, measured in a fresh interpreter."""
    command = [sys.executable, __file__, "--child", mode, str(layers), strategies]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every time the fastest of ``runs`` (wall clock and CPU time apart: on a busy machine CPU
    time varies less), with the median beside it (``*_median``), the peak RSS the highest."""
    times = [key for key in runs[0] if key.endswith("_s")]
    best = {key: min(r[key] for r in runs) for key in times}
    median = {f"{key}_median": statistics.median(r[key] for r in runs) for key in times}
    return {**runs[0], **best, **median, "peak_mib": max(r["peak_mib"] for r in runs)}


def figure(mode: str, layers: int, strategies: str, repeat: int) -> dict[str, Any]:
    """:func:`child` run ``repeat`` times, each in a fresh interpreter (:func:`summary`), with
    the median of each process's ``to_json`` time over its own plan time (``json_ratio``)."""
    runs = [run_child(mode, layers, strategies) for _ in range(repeat)]
    out = summary(runs)
    if "json_s" in runs[0]:
        out["json_ratio"] = statistics.median(r["json_s"] / r["plan_s"] for r in runs)
    return out


def paired(
    small: int, large: int, strategies: str, repeat: int
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """The plan figures of ``small`` and ``large`` layers, their fresh processes taking turns so
    that the machine's load falls on both alike; with the median of the ``repeat`` ratios of
    each large run to the small run before it."""
    smalls, larges = [], []
    for _ in range(repeat):
        smalls.append(run_child("plan", small, strategies))
        larges.append(run_child("plan", large, strategies))
    ratios = [b["plan_s"] / a["plan_s"] for a, b in zip(smalls, larges, strict=True)]
    return summary(smalls), summary(larges), statistics.median(ratios)


def scale_section(quick: bool, repeat: int) -> None:
    """The fresh-process figures for ``vllm`` and ``default`` (see the module docstring)."""
    small, large = (10_000, 100_000) if quick else (100_000, 1_000_000)
    print()
    print(
        f"scale: hybrid model, memory max(80 GiB, layers x 1 GiB), structlog at warning; each figure "
        f"in a fresh process, fastest of {repeat} (medians beside the 1,000,000-layer ratio), peak RSS = ru_maxrss (highest of the runs, the JSON "
        "string included)"
    )
    print(
        f"{'set':>8} {'layers':>10} {'output':>12} {'plan s':>8} {'to_json s':>10} {'ratio':>7} "
        f"{'peak MiB':>9} {'JSON MiB':>9} {'decisions':>19}"
    )
    for strategies in ("vllm", "default"):
        planned, big, turns = paired(small, large, strategies, repeat)
        print(
            f"{strategies:>8} {small:>10,} {'(plan only)':>12} {planned['plan_s']:>8.2f} {'':>10} {'':>7} "
            f"{planned['peak_mib']:>9.0f}"
        )
        for mode, indent in JSON_MODES.items():
            out = figure(mode, small, strategies, repeat)
            every = "all" if out["decisions_in_json"] == out["decisions"] else "MISSING SOME"
            print(
                f"{strategies:>8} {small:>10,} {f'indent={indent}':>12} {'':>8} {out['json_s']:>10.2f} "
                f"{out['json_s'] / planned['plan_s']:>6.2f}x {out['peak_mib']:>9.0f} {out['json_mib']:>9.1f} "
                f"{out['decisions']:>10,} ({every}); median over the processes of to_json / that "
                f"process's own plan: {out['json_ratio']:.2f}x"
            )
        print(
            f"{strategies:>8} {large:>10,} {'(plan only)':>12} {big['plan_s']:>8.2f} {'':>10} {'':>7} "
            f"{big['peak_mib']:>9.0f}   = {big['plan_s'] / planned['plan_s']:.1f}x the {small:,}-layer plan "
            f"(CPU time {big['plan_cpu_s']:.2f} s / {planned['plan_cpu_s']:.2f} s = "
            f"{big['plan_cpu_s'] / planned['plan_cpu_s']:.1f}x; medians {big['plan_s_median']:.2f} s / "
            f"{planned['plan_s_median']:.2f} s = {big['plan_s_median'] / planned['plan_s_median']:.1f}x; "
            f"median of the {repeat} run-by-run ratios {turns:.1f}x)"
        )
        print(
            f"{'':>8} {'':>10} {'':>12} first read of plan.decisions ({big['decisions']:,} records made): "
            f"{big['read_decisions_s']:.2f} s at {large:,} layers, {planned['read_decisions_s']:.3f} s at {small:,}"
        )


def per_layer_spec_objects(layers: int) -> tuple[float, float, float, float]:
    """Issue 25's case: ``layers`` layers with one spec object per layer, from a model file (a
    JSON document whose every layer has its own spec entry) and from an HF config (Llama-like,
    ``num_hidden_layers = layers``); the in-process times ``(read model file, plan it, build HF
    specs, plan them)``, every reader imported (and warmed up by the caller) before the clock
    starts; each plan time the fastest of 3 plans of the same specs."""
    planner = Planner("vllm")
    config = EngineConfig(max_model_len=4096)
    spec = {
        "type": "full_attention",
        "block_size": 16,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": "bfloat16",
    }
    document = {"layers": {f"model.layers.{i}.self_attn": dict(spec) for i in range(layers)}}
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": layers,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 8192,
    }
    memory = scale_memory(layers)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        start = time.perf_counter()
        model = load_model_file(path)
        read_s = time.perf_counter() - start
    plan_file_s = _fastest(lambda: planner.plan(model.worker_specs(), memory, config))
    start = time.perf_counter()
    specs, _ = specs_from_hf(hf)
    build_s = time.perf_counter() - start
    plan_hf_s = _fastest(lambda: planner.plan(specs, memory, config))
    return read_s, plan_file_s, build_s, plan_hf_s


def _fastest(call: Callable[[], object], runs: int = 3) -> float:
    """The fastest of ``runs`` timed calls (each plans the same specs from scratch)."""
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def spec_objects_section(quick: bool) -> None:
    """:func:`per_layer_spec_objects` at 10,000 and 100,000 layers (target: plan <= 12x)."""
    small, large = (1_000, 10_000) if quick else (10_000, 100_000)
    per_layer_spec_objects(2)  # warm up: the readers' and the HF builder's first-call costs
    a, b = per_layer_spec_objects(small), per_layer_spec_objects(large)
    print()
    print("one spec object per layer (issue 25), in-process, readers imported before timing:")
    for label, read, plan in (("model file", 0, 1), ("HF config", 2, 3)):
        print(
            f"  {label:>10}: read {a[read]:.2f} s / {b[read]:.2f} s; plan {small:,} layers {a[plan]:.2f} s, "
            f"{large:,} layers {b[plan]:.2f} s = {b[plan] / a[plan]:.1f}x (target <= 12x)"
        )


def document_section(quick: bool) -> None:
    """A plan document read back at scale: ``Plan.from_dict`` with its invariant checks, and
    ``check_plan`` alone (what ``allocate()`` adds for a plan ``Planner.plan`` did not make)."""
    layers = 10_000 if quick else 100_000
    plan = Planner("vllm").plan(hybrid_model(layers), scale_memory(layers), SCALE_CONFIG)
    text = plan.to_json()
    start = time.perf_counter()
    Plan.from_dict(json.loads(text))
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    check_plan(plan)
    check_s = time.perf_counter() - start
    print()
    print(
        f"plan documents at {layers:,} layers: json.loads + Plan.from_dict {read_s:.2f} s "
        f"(invariants included); check_plan alone {check_s:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller models, fewer repeats")
    parser.add_argument("--scale-only", action="store_true", help="only the fresh-process figures")
    parser.add_argument(
        "--repeat", type=int, default=0, help="runs per fresh-process figure (default 5; 1 with --quick)"
    )
    parser.add_argument("--child", nargs=3, metavar=("MODE", "LAYERS", "SET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, layers, strategies = args.child
        child(mode, int(layers), strategies)
        return
    # the fresh processes first: on Linux a child's ru_maxrss counts the memory it shared with
    # this process before exec, and this process grows while it measures the per-layer tables
    scale_section(args.quick, args.repeat or (1 if args.quick else 5))
    if not args.scale_only:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        spec_objects_section(args.quick)
        document_section(args.quick)
        per_layer_tables(args.quick)


if __name__ == "__main__":
    main()
