"""Allocation + view construction time versus a plain ``torch.zeros`` of the same total bytes.

CPU (always): for each built-in example planned to a given size, the time of
``kvrules.allocate(plan, "cpu")`` (every buffer zeroed, every view built) next to the time of one
``torch.zeros(total, dtype=torch.int8)``, best and median of alternating runs, and their ratios.
Per-view overhead: the same allocation on ``meta`` (zeroing costs nothing there) minus making the
same buffers on ``meta``, divided by the number of tensor views, for models of up to a few
thousand layers, with structlog unconfigured and configured.

GPU (when ``torch.cuda.is_available()``): 1, 16 and 100 GiB (sizes above 90 % of the free
memory are skipped), with the achieved zeroing bandwidth next to the device's memset bandwidth
(``zero_()`` on a buffer that already exists).

On CPU the script re-runs itself with ``MALLOC_MMAP_THRESHOLD_=131072`` so that every large
buffer, ours and the baseline's, gets fresh pages from the kernel as in a new engine process;
otherwise glibc's adaptive threshold lets whichever side reuses a just-freed block skip its page
faults, and the ratio measures malloc's caching rather than kvrules.

Targets: ratio within 5 % of plain ``torch.zeros`` (<= 1.05) and under 10 us per view.
Run: ``.venv/bin/python benchmarks/allocate.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import sys
import time
from collections.abc import Callable

import structlog
import torch

import kvrules
from kvrules import CapacityError, EngineConfig, FullAttentionSpec, KVCacheSpec, MambaSpec, Plan, Planner
from kvrules.examples import load_example

MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"
GiB = 1 << 30
MiB = 1 << 20
EXAMPLES = ("llama3-8b", "gemma3-27b", "issue-43626", "deepseek-v4-flash")


def example_plan(name: str, memory: int) -> Plan:
    """A built-in example planned against ``memory`` bytes (max_model_len fitted to it)."""
    model = load_example(name)
    config = EngineConfig.from_dict({**model.engine, "auto_fit_max_model_len": True})
    return Planner("vllm").plan(model.worker_specs(), memory, config)


def hybrid_plan(layers: int, memory: int) -> Plan:
    """``layers`` layers, 3 Mamba : 1 full attention (Qwen3-Next-like geometry, small heads)."""
    attention = FullAttentionSpec(block_size=64, num_kv_heads=2, head_size=128, dtype="bfloat16")
    mamba = MambaSpec(block_size=64, shapes=((3, 1024), (8, 32, 32)), dtypes=("bfloat16", "bfloat16"))
    specs: dict[str, KVCacheSpec] = {
        f"layers.{i}": attention if (i + 1) % 4 == 0 else mamba for i in range(layers)
    }
    config = EngineConfig(max_model_len=1024, auto_fit_max_model_len=True)
    return Planner("vllm").plan(specs, memory, config)


def timed(fn: Callable[[], object], device: str) -> float:
    """Wall time of ``fn()`` in seconds, synchronising CUDA; the result is dropped afterwards."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    del result
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return elapsed


def compare(plan: Plan, device: str, repeat: int) -> tuple[list[float], list[float], int]:
    """Seconds of allocate() and of one torch.zeros of the same bytes (``repeat`` each), and those bytes."""
    total = plan.workers[0].allocated_bytes
    ours: list[float] = []
    plain: list[float] = []
    for i in range(repeat):
        first, second = (ours, plain) if i % 2 == 0 else (plain, ours)
        for bucket in (first, second):
            if bucket is ours:
                bucket.append(timed(lambda: kvrules.allocate(plan, device), device))
            else:
                bucket.append(timed(lambda: torch.zeros(total, dtype=torch.int8, device=device), device))
    return ours, plain, total


def meta_overhead(plan: Plan, repeat: int) -> float:
    """Seconds kvrules adds to making the buffers: allocate on meta minus the same buffers on meta."""
    sizes = (
        [t.size for t in plan.workers[0].tensors]
        if not plan.workers[0].tensors[0].block_stride
        else [plan.workers[0].tensors[0].size]
    )
    ours = min(timed(lambda: kvrules.allocate(plan, "meta"), "meta") for _ in range(repeat))
    base = min(
        timed(lambda: [torch.zeros(n, dtype=torch.int8, device="meta") for n in sizes], "meta")
        for _ in range(repeat)
    )
    return max(ours - base, 0.0)


def cpu_section(sizes: list[int], repeat: int) -> None:
    print(f"CPU: allocate(plan, 'cpu') vs torch.zeros(total bytes), {repeat} runs each, alternating")
    print("  overhead: views and bookkeeping, measured on meta; expected = (zeros + overhead) / zeros")
    print(
        f"  {'model':18s} {'size':>9s} {'buffers':>7s} {'views':>5s} {'allocate':>18s} {'zeros':>18s} "
        f"{'ratio':>14s} {'overhead':>9s} {'expected':>8s}"
    )
    print(f"  {'':43s} {'best / median':>18s} {'best / median':>18s} {'best / median':>14s}")
    for size in sizes:
        for name in EXAMPLES:
            try:
                plan = example_plan(name, size)
            except CapacityError:
                print(f"  {name:18s} {size / MiB:7.0f}Mi  does not fit one request; skipped")
                continue
            ours, plain, total = compare(plan, "cpu", repeat)
            extra = meta_overhead(plan, repeat)
            views = len(plan.workers[0].layer_names())
            best, median = min(ours) / min(plain), statistics.median(ours) / statistics.median(plain)
            print(
                f"  {name:18s} {total / MiB:7.0f}Mi {len(plan.workers[0].tensors):7d} {views:5d} "
                f"{min(ours) * 1e3:7.1f} / {statistics.median(ours) * 1e3:6.1f}ms "
                f"{min(plain) * 1e3:7.1f} / {statistics.median(plain) * 1e3:6.1f}ms "
                f"{best:6.3f} / {median:5.3f} {extra * 1e3:7.2f}ms {(min(plain) + extra) / min(plain):8.4f}"
            )


def per_view_section(layer_counts: list[int], repeat: int) -> None:
    print(f"\nPer-view overhead on meta (nothing is zeroed), best of {repeat}:")
    print("  overhead = allocate(plan, 'meta') - torch.zeros(...) of the same buffers on meta")
    print(
        f"  {'layers':>6s} {'views':>6s} {'structlog':>12s} {'allocate':>9s} {'buffers':>9s} "
        f"{'per view':>9s} {'per layer':>9s} {'verify/layer':>12s}"
    )
    for configured in (False, True):
        if configured:
            structlog.configure(
                processors=[structlog.processors.JSONRenderer()],
                wrapper_class=structlog.make_filtering_bound_logger(30),
                logger_factory=structlog.PrintLoggerFactory(io.StringIO()),
            )
        else:
            structlog.reset_defaults()
        for layers in layer_counts:
            plan = hybrid_plan(layers, 64 * GiB)
            sizes = [t.size for t in plan.workers[0].tensors]

            def buffers(sizes: list[int] = sizes) -> object:
                return [torch.zeros(n, dtype=torch.int8, device="meta") for n in sizes]

            def allocation(plan: Plan = plan) -> object:
                return kvrules.allocate(plan, "meta")

            best = min(timed(allocation, "meta") for _ in range(repeat))
            base = min(timed(buffers, "meta") for _ in range(repeat))
            result = kvrules.allocate(plan, "meta")
            views = sum(len(v) if isinstance(v, tuple) else 1 for v in result.views.values())
            start = time.perf_counter()
            result.verify()
            check = time.perf_counter() - start
            label = "configured" if configured else "unconfigured"
            print(
                f"  {layers:6d} {views:6d} {label:>12s} {best * 1e3:7.2f}ms {base * 1e3:7.2f}ms "
                f"{(best - base) / views * 1e6:7.2f}us {(best - base) / layers * 1e6:7.2f}us "
                f"{check / layers * 1e6:10.2f}us"
            )
    structlog.reset_defaults()


def gpu_section(sizes_gib: list[int], repeat: int) -> None:
    device = "cuda"
    free, total = torch.cuda.mem_get_info()
    print(f"\nGPU {torch.cuda.get_device_name()}: {free / GiB:.1f} GiB free of {total / GiB:.1f} GiB")
    print(f"  best of {repeat}; zeroing = bytes / allocate time, memset = bytes / zero_() of a live buffer")
    print(
        f"  {'model':18s} {'size':>7s} {'allocate':>10s} {'zeros':>10s} {'ratio':>6s} "
        f"{'zeroing':>10s} {'memset':>10s}"
    )
    for size_gib in sizes_gib:
        size = size_gib * GiB
        if size > 0.9 * torch.cuda.mem_get_info()[0]:
            print(f"  {size_gib} GiB skipped: more than 90 % of the free memory")
            continue
        buffer = torch.empty(size, dtype=torch.int8, device=device)
        memset = min(timed(buffer.zero_, device) for _ in range(repeat))
        del buffer
        torch.cuda.empty_cache()
        for name in ("llama3-8b", "issue-43626", "deepseek-v4-flash"):
            plan = example_plan(name, size)
            runs, baseline, nbytes = compare(plan, device, repeat)
            ours, plain = min(runs), min(baseline)
            print(
                f"  {name:18s} {nbytes / GiB:5.1f}Gi {ours * 1e3:8.1f}ms {plain * 1e3:8.1f}ms {ours / plain:6.3f} "
                f"{nbytes / ours / 1e9:7.0f}GB/s {size / memset / 1e9:7.0f}GB/s"
            )


def main() -> None:
    if MMAP_ENV not in os.environ:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, MMAP_ENV: "131072"})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args()
    repeat = 3 if args.quick else 7
    torch.zeros(1)  # import and initialise torch before timing anything
    print(f"{MMAP_ENV}={os.environ[MMAP_ENV]}")
    cpu_section([1 * GiB] if args.quick else [1 * GiB, 2 * GiB], repeat)
    per_view_section([64, 512] if args.quick else [64, 512, 4096], repeat)
    if torch.cuda.is_available():
        gpu_section([1, 16] if args.quick else [1, 16, 100], repeat)
    else:
        print("\nGPU: no CUDA device here; the 1, 16 and 100 GiB section runs on a GPU machine.")


if __name__ == "__main__":
    main()
