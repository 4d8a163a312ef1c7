"""Every rank plans the KV cache of a pipeline-parallel model; all ranks agree on one plan.

Run on one machine with 4 CPU processes (gloo):

    torchrun --nproc-per-node 4 examples/plan_across_ranks.py

Each rank knows only its own pipeline stage and its own free memory, as in an engine. Run
under plain ``python`` it says how to start it and exits with status 2 (torchrun sets the
variables ``torch.distributed`` needs; without them it would stop with a traceback).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from datetime import timedelta

import structlog

import kvrules
from kvrules.distributed import plan_across_ranks

GiB = 1 << 30
#: what torchrun sets for every process it starts (``env://`` initialisation reads them)
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
COMMAND = "torchrun --nproc-per-node 4 examples/plan_across_ranks.py"


def missing_torchrun_variables(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The torchrun variables absent from ``environ`` (empty under torchrun)."""
    return [name for name in TORCHRUN_VARIABLES if name not in environ]


def my_stage(rank: int, world: int) -> dict[str, kvrules.KVCacheSpec]:
    """This rank's layers of a 48-layer model: one full-attention layer per five sliding-window layers."""
    full = kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    window = kvrules.SlidingWindowSpec(
        16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=1024
    )
    per_stage = 48 // world
    layers = range(rank * per_stage, (rank + 1) * per_stage)
    return {f"model.layers.{i}.self_attn": full if i % 6 == 5 else window for i in layers}


def main() -> int:
    """Plan on this rank; 2 with a message on stderr when not started by torchrun."""
    missing = missing_torchrun_variables()
    if missing:
        print(
            f"plan_across_ranks.py: error: start it with torchrun, one process per rank: {COMMAND}\n"
            f"({', '.join(missing)} not set: torchrun sets them for every rank it starts)",
            file=sys.stderr,
        )
        return 2
    import torch.distributed as dist

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
