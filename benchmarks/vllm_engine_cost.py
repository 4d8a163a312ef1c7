"""What kvrules costs a real vLLM engine: engine start time with and without kvrules, side by side.

Run in the engine venv (``scripts/engine-venv``)::

    .venv-engine/bin/python benchmarks/vllm_engine_cost.py [--pairs 5] [--model qwen3-next]

Each run is a fresh process that builds ``vllm.LLM(...)`` for a config-only model of
``tests/engine/models`` (dummy weights, in-process engine core) and exits; the two modes
alternate, pair by pair, the order swapping every pair, so load on a shared machine falls on both
alike. Measured per run:

* **start**: from the moment the process is spawned until ``LLM()`` returns (the parent's clock):
  vLLM's import, kvrules' import and plugin loading (the general plugin, with
  ``KVRULES_VLLM_STRATEGIES=auto``), the first plan and everything else of an engine start;
* **first plan**: the engine's first ``get_kv_cache_configs`` call (inside the child), the whole
  planning step of an engine start: vLLM's own functions alone, or with kvrules' in their place;
* **plugins**: vLLM's loading of its general plugins (inside the child): vLLM alone loads its
  own (``VLLM_PLUGINS`` names all but kvrules', so kvrules is not even imported); with kvrules,
  also kvrules' import, its seam detection and ``install()`` with kvrules' plugins loaded
  (kvrules' share of the start, apart from the first plan).

Printed: every run, then per mode the median, minimum and maximum, and the median over pairs of
the ratio kvrules / vLLM alone (target: at most 1.03 for the start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "engine" / "models"
MARK = "KVRULES_ENGINE_COST "

CHILD = """
import json, sys, time
import vllm.plugins as plugins
loading = []
real_load = plugins.load_general_plugins
def timed_load(*args, **kwargs):
    began = time.perf_counter()
    try:
        return real_load(*args, **kwargs)
    finally:
        loading.append(time.perf_counter() - began)
plugins.load_general_plugins = timed_load
import vllm.v1.engine.core as core
plan = []
real = core.get_kv_cache_configs
def timed(*args, **kwargs):
    began = time.perf_counter()
    try:
        return real(*args, **kwargs)
    finally:
        plan.append(time.perf_counter() - began)
core.get_kv_cache_configs = timed
from vllm import LLM
llm = LLM(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
          max_model_len=512, seed=0, dtype="bfloat16", max_num_seqs=8)
print("MARK" + json.dumps({"first_plan_s": plan[0] if plan else None, "plugins_s": sum(loading)}), flush=True)
import os
os._exit(0)
""".replace("MARK", MARK)


def vllm_own_plugins() -> list[str]:
    """The installed general plugins of vLLM other than kvrules' (vLLM's own LoRA resolvers)."""
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="vllm.general_plugins") if ep.name != "kvrules"]
    return names or ["none"]


def run_once(model: Path, kvrules: bool) -> dict[str, Any]:
    """One fresh engine process: its start time (spawn to ``LLM()`` returned) and first plan."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVRULES_", "VLLM_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_LOGGING_LEVEL="WARNING",
    )
    if kvrules:
        env["KVRULES_VLLM_STRATEGIES"] = "auto"
    else:  # vLLM's own general plugins only: kvrules is neither imported nor loaded
        env["VLLM_PLUGINS"] = ",".join(vllm_own_plugins())
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(model)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    found: dict[str, Any] | None = None
    for line in child.stdout:
        if line.startswith(MARK):
            found = {"start_s": time.perf_counter() - began, **json.loads(line[len(MARK) :])}
    child.wait()
    if found is None:
        raise SystemExit(f"the engine process for {model.name} (kvrules={kvrules}) did not start")
    return found


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):7.3f}  min {min(values):7.3f}  max {max(values):7.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--model", default="qwen3-next", help=f"a folder of {MODELS}")
    args = parser.parse_args(argv)
    model = MODELS / args.model
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    print(f"model {args.model}, {args.pairs} interleaved pairs, fresh processes, in-process engine core")
    for pair in range(args.pairs):
        for kvrules in (False, True) if pair % 2 == 0 else (True, False):
            result = run_once(model, kvrules)
            runs[kvrules].append(result)
            label = "kvrules auto" if kvrules else "vLLM alone  "
            print(
                f"pair {pair + 1}  {label}  start {result['start_s']:7.2f} s  first plan "
                f"{result['first_plan_s']:.4f} s  plugins {result['plugins_s']:.3f} s",
                flush=True,
            )
    print()
    for what, key in (
        ("start (s)", "start_s"),
        ("first plan (s)", "first_plan_s"),
        ("plugins (s)", "plugins_s"),
    ):
        alone = [r[key] for r in runs[False]]
        ours = [r[key] for r in runs[True]]
        print(f"{what:15s} vLLM alone    {summary(alone)}")
        print(f"{what:15s} kvrules auto  {summary(ours)}")
        extra = [b - a for a, b in zip(alone, ours, strict=True)]
        print(f"{what:15s} added per pair {summary(extra)}   (kvrules - vLLM alone)")
        if key != "plugins_s":  # vLLM alone loads no plugin: a ratio would say nothing
            ratios = [b / a for a, b in zip(alone, ours, strict=True)]
            print(f"{what:15s} ratio per pair {summary(ratios)}   (kvrules / vLLM alone)")
    added = sum(
        statistics.median(r[key] for r in runs[True]) - statistics.median(r[key] for r in runs[False])
        for key in ("plugins_s", "first_plan_s")
    )
    start = statistics.median(r["start_s"] for r in runs[False])
    print(
        f"kvrules' share of an engine start, measured inside (plugins and first plan, over vLLM alone's): "
        f"{added:.3f} s = {added / start:.4f} of vLLM alone's median start"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
