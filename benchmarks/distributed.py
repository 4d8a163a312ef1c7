"""``plan_across_ranks`` for 2, 4 and 8 local ranks versus planning in one process.

A 1,000-layer hybrid model (one full-attention layer per five sliding-window layers) is cut into
N pipeline stages, one per rank, each rank with different memory. Every rank (gloo on
127.0.0.1, processes from ``torch.multiprocessing``) calls ``plan_across_ranks`` a few times
after a warm-up; a barrier precedes each call and the figure is the median over calls of the
slowest rank. The baseline is ``Planner.plan`` of the same N workers in one process (median).
The ratio is the price of agreeing: gathering, decoding, planning on every rank, the digest and
its all-reduce. The per-step costs of the local work are printed too.

Run: ``.venv/bin/python benchmarks/distributed.py`` (``--quick`` for fewer calls).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import dist_workers

LAYERS = 1000
GiB = 1 << 30


def memory(ranks: int) -> list[int]:
    return [(40 + 3 * (r % 5)) * GiB for r in range(ranks)]


def quiet() -> None:
    """This script is the application: log warnings only (no per-plan info lines)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def rank_main(rank: int, world: int, port: int, out: str, calls: int) -> None:
    """One rank: warm up twice, then time ``calls`` calls, each after a barrier."""
    import torch.distributed as dist

    quiet()
    from kvrules import EngineConfig, get_plugin_manager
    from kvrules.distributed import plan_across_ranks

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    pm = get_plugin_manager(autoload=False)
    mine = dist_workers.stages(LAYERS, world)[rank]
    config = EngineConfig.from_dict(dist_workers.CONFIG)
    times = []
    for call in range(calls + 2):
        dist.barrier()
        started = time.perf_counter()
        worker = plan_across_ranks(mine, memory(world)[rank], config, plugin_manager=pm)
        if call >= 2:
            times.append(time.perf_counter() - started)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"times": times, "num_blocks": worker.num_blocks}))
    dist.destroy_process_group()


def distributed(ranks: int, calls: int) -> tuple[float, int]:
    """Median over calls of the slowest rank's time, and the agreed num_blocks."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            rank_main,
            args=(ranks, dist_workers.free_port(), out, calls),
            nprocs=ranks,
            join=True,
            start_method=dist_workers.start_method(),
        )
        reports = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(ranks)]
    slowest = [max(r["times"][i] for r in reports) for i in range(calls)]
    blocks = {r["num_blocks"] for r in reports}
    if len(blocks) != 1:
        raise SystemExit(f"ranks disagree on num_blocks: {sorted(blocks)}")
    return statistics.median(slowest), blocks.pop()


def median_time(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def local_steps(ranks: int, repeat: int) -> dict[str, float]:
    """One process: planning all N workers, and the local steps every rank adds around it."""
    from kvrules import EngineConfig, Planner, get_plugin_manager
    from kvrules.distributed import decode_specs, encode_specs, plan_digest

    pm = get_plugin_manager(autoload=False)
    planner = Planner(plugin_manager=pm)
    workers = dist_workers.stages(LAYERS, ranks)
    config = EngineConfig.from_dict(dist_workers.CONFIG)
    plan = planner.plan(workers, memory(ranks), config)
    payloads = [encode_specs(w) for w in workers]
    types = pm.registries.spec_types.classes
    return {
        "plan": median_time(lambda: planner.plan(workers, memory(ranks), config), repeat),
        "encode": median_time(lambda: encode_specs(workers[0]), repeat),
        "decode": median_time(lambda: [decode_specs(p, types, {}) for p in payloads], repeat),
        "digest": median_time(lambda: plan_digest(plan), repeat),
        "num_blocks": plan.num_blocks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed calls instead of 10")
    args = parser.parse_args()
    quiet()
    calls = 3 if args.quick else 10
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"plan_across_ranks, {LAYERS}-layer model, gloo on 127.0.0.1, {cores} CPU cores; median of {calls} calls"
    )
    print()
    header = f"{'ranks':>5}  {'one process ms':>14}  {'across ranks ms':>15}  {'ratio':>6}  "
    header += f"{'encode ms':>9}  {'decode ms':>9}  {'digest ms':>9}  num_blocks"
    print(header)
    for ranks in (2, 4, 8):
        local = local_steps(ranks, repeat=calls)
        across, blocks = distributed(ranks, calls)
        if blocks != local["num_blocks"]:
            raise SystemExit(
                f"{ranks} ranks agreed on {blocks} blocks, one process plans {local['num_blocks']}"
            )
        print(
            f"{ranks:>5}  {local['plan'] * 1e3:>14.1f}  {across * 1e3:>15.1f}  {across / local['plan']:>5.2f}x  "
            f"{local['encode'] * 1e3:>9.2f}  {local['decode'] * 1e3:>9.2f}  {local['digest'] * 1e3:>9.2f}  {blocks}"
        )
    print()
    print("ratio = plan_across_ranks (slowest rank) / Planner.plan of the same workers in one process")
    if cores is not None and cores < 8:
        print(
            f"note: {cores} cores for up to 8 ranks; ranks share cores, so the 8-rank figure includes waiting"
        )


if __name__ == "__main__":
    main()
