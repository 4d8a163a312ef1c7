"""How fast the model front door answers: config.json (+ draft) -> specs -> plan.

Prints, per built-in Hugging Face example, the time to build the specs (stages ``arch`` and
``align``) and to plan them, warm (median of ``--repeat`` runs); then the wall time of the whole
command line, ``kvrules plan --example hf-qwen3-coder-next`` (Python start and imports included),
and of a 40-combination ``kvrules sweep``. Goal: the #43626 pair answered in under a second on
the command line, and every example built and planned in well under 100 ms warm.
Run: ``.venv/bin/python benchmarks/hf_front_door.py``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import structlog

from kvrules import EngineConfig, Planner
from kvrules.hf import build_hf_model
from kvrules.hf.examples import hf_example_names, load_hf_example_info
from kvrules.report.tables import table


def warm_times(name: str, repeat: int) -> tuple[float, float, int]:
    """Median seconds to build and to plan example ``name``, and its layer count."""
    example = load_hf_example_info(name)
    planner = Planner("vllm")
    builds, plans = [], []
    layers = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = build_hf_model(example.config, example.draft, example.options, strategies="vllm")
        t1 = time.perf_counter()
        engine = {**model.engine, **example.engine}
        planner.plan(model.specs, example.available_memory or [40 << 30], EngineConfig.from_dict(engine))
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        plans.append(t2 - t1)
        layers = len(model.specs)
    return statistics.median(builds), statistics.median(plans), layers


def wall(argv: list[str]) -> float:
    """Seconds one command takes, start to exit."""
    exe = shutil.which("kvrules", path=str(Path(sys.executable).parent)) or "kvrules"
    t0 = time.perf_counter()
    subprocess.run([exe, *argv], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    # a benchmark is an application: keep kvrules' info summaries off stdout
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rows = []
    total = 0.0
    for name in hf_example_names():
        build, plan, layers = warm_times(name, args.repeat)
        total += build + plan
        rows.append(
            [name, layers, f"{1000 * build:.1f}", f"{1000 * plan:.1f}", f"{1000 * (build + plan):.1f}"]
        )
    print("warm, median of", args.repeat, "runs (ms):")
    print(table(["example", "layers", "build specs", "plan", "total"], rows))
    print(f"  all {len(rows)} examples: {1000 * total:.1f} ms")
    print()
    single = wall(["plan", "--example", "hf-qwen3-coder-next", "--strategies", "vllm"])
    sweep = wall(
        ["sweep", "--example", "hf-qwen3-coder-next", "--tp", "1,2,4,8", "--kv-cache-dtype",
         "auto,fp8,fp8_per_token_head,nvfp4,bfloat16", "--num-speculative-tokens", "0,4", "--strategies", "vllm"]
    )  # fmt: skip
    print("command line, wall time (process start and imports included):")
    print(f"  kvrules plan --example hf-qwen3-coder-next (#43626 pair): {single:.2f} s  (goal < 1 s: "
          f"{'met' if single < 1 else 'missed'})")  # fmt: skip
    print(f"  kvrules sweep, 40 combinations: {sweep:.2f} s ({sweep / 40 * 1000:.0f} ms per combination)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
