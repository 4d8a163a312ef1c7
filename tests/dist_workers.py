"""Code run on each spawned rank by tests/distributed/test_distributed.py (and benchmarks/distributed.py).

Each rank joins a gloo group on 127.0.0.1, runs the named scenarios through
:func:`kvrules.distributed.plan_across_ranks` and writes what happened to ``OUT/rank{r}.json``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

GiB = 1 << 30


def start_method() -> str:
    """``forkserver`` (torch is imported once, in the server, not once per rank) where the
    platform has it, else ``spawn``; never ``fork`` (the parent may run threads)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch.distributed", "kvrules", "dist_workers"]
    )
    return "forkserver"


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model(layers: int) -> dict[str, Any]:
    """A hybrid model: one full-attention layer for every five sliding-window layers."""
    from kvrules import FullAttentionSpec, SlidingWindowSpec

    full = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    window = SlidingWindowSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=1024)
    return {f"model.layers.{i}.self_attn": full if i % 6 == 5 else window for i in range(layers)}


def stages(layers: int, ranks: int) -> list[dict[str, Any]]:
    """The model cut into ``ranks`` contiguous pipeline stages."""
    specs = model(layers)
    names = list(specs)
    size, extra = divmod(len(names), ranks)
    bounds = [i * size + min(i, extra) for i in range(ranks + 1)]
    return [{n: specs[n] for n in names[bounds[i] : bounds[i + 1]]} for i in range(ranks)]


#: per-rank memory of the pipeline scenario (different on every rank)
MEMORY = (8 * GiB, 6 * GiB, 7 * GiB, 5 * GiB, 9 * GiB, 4 * GiB, 8 * GiB, 6 * GiB)
CONFIG = {"max_model_len": 32768, "max_num_batched_tokens": 2048}


def _outcome(fn: Any) -> dict[str, Any]:
    from kvrules.distributed import plan_digest

    started = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:
        return {
            "error": type(exc).__name__,
            "message": str(exc),
            "kvrules": type(exc).__module__.startswith("kvrules"),
            "seconds": time.perf_counter() - started,
            "trace": traceback.format_exc()[-2000:],
        }
    out: dict[str, Any] = {"seconds": time.perf_counter() - started}
    if hasattr(result, "workers"):
        out.update(digest=plan_digest(result), extra=dict(result.extra), num_blocks=result.num_blocks)
        out["own"] = [w.own_num_blocks for w in result.workers]
    else:
        out.update(num_blocks=result.num_blocks, own=result.own_num_blocks, tensors=len(result.tensors))
    return out


def scenario(name: str, rank: int, world: int) -> dict[str, Any]:
    """Run one scenario on this rank."""
    import torch.distributed as dist

    from kvrules import EngineConfig, FullAttentionSpec, get_plugin_manager
    from kvrules.distributed import agree_plan, plan_across_ranks

    config = EngineConfig.from_dict(CONFIG)
    pm = get_plugin_manager(autoload=False)
    mine = stages(48, world)[rank]
    memory = MEMORY[rank]
    if name == "pipeline":
        return _outcome(lambda: agree_plan(mine, memory, config, plugin_manager=pm))
    if name == "worker-plan":
        return _outcome(lambda: plan_across_ranks(mine, memory, config, plugin_manager=pm))
    if name == "contradiction":
        if rank == world - 1:  # claims rank 0's first layer with a different spec
            mine = {
                **mine,
                "model.layers.0.self_attn": FullAttentionSpec(
                    16, num_kv_heads=2, head_size=64, dtype="float16"
                ),
            }
        return _outcome(lambda: plan_across_ranks(mine, memory, config, plugin_manager=pm))
    if name == "bad-input":
        bad: Any = [] if rank == 2 else mine
        return _outcome(lambda: plan_across_ranks(bad, memory, config, plugin_manager=pm))
    if name == "settings-differ":
        other = EngineConfig.from_dict({**CONFIG, "max_model_len": 16384}) if rank == 1 else config
        return _outcome(lambda: plan_across_ranks(mine, memory, other, plugin_manager=pm))
    if name == "plugins-differ":
        blocked = get_plugin_manager(autoload=False, blocked=["page-unify"]) if rank == 1 else pm
        return _outcome(lambda: plan_across_ranks(mine, memory, config, plugin_manager=blocked))
    if name == "absent-rank":  # the last rank never calls: the others must fail within the timeout
        group = dist.new_group(timeout=timedelta(seconds=3))
        if rank == world - 1:
            return {"skipped": True}
        return _outcome(lambda: plan_across_ranks(mine, memory, config, group, plugin_manager=pm))
    raise ValueError(f"unknown scenario {name!r}")


def run(rank: int, world: int, port: int, out: str, names: list[str]) -> None:
    """Entry point of one spawned rank (``torch.multiprocessing`` passes ``rank`` first)."""
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=20),
    )
    results: dict[str, Any] = {}
    try:
        for name in names:
            results[name] = scenario(name, rank, world)
            Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
        if "absent-rank" not in names:
            dist.destroy_process_group()
