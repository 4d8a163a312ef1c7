"""Every rank plans the KV cache of a pipeline-parallel model; all ranks agree on one plan.

Run on one machine with 4 CPU processes (gloo):

    torchrun --nproc-per-node 4 examples/plan_across_ranks.py

Each rank knows only its own pipeline stage and its own free memory, as in an engine.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import structlog
import torch.distributed as dist

import kvrules
from kvrules.distributed import plan_across_ranks

GiB = 1 << 30


def my_stage(rank: int, world: int) -> dict[str, kvrules.KVCacheSpec]:
    """This rank's layers of a 48-layer model: one full-attention layer per five sliding-window layers."""
    full = kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    window = kvrules.SlidingWindowSpec(
        16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=1024
    )
    per_stage = 48 // world
    layers = range(rank * per_stage, (rank + 1) * per_stage)
    return {f"model.layers.{i}.self_attn": full if i % 6 == 5 else window for i in layers}


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    free = (8 - rank) * GiB  # every rank has a different amount of memory left
    config = kvrules.EngineConfig(max_model_len=32768)
    worker = plan_across_ranks(my_stage(rank, world), free, config)
    print(
        f"rank {rank}: {len(worker.tensors)} tensors of {worker.tensors[0].size:,} bytes, "
        f"num_blocks {worker.num_blocks} (own memory would give {worker.own_num_blocks})",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
