"""Capacity under ``vllm`` and ``default`` at the same memory: every built-in example, the public cases.

For each model: groups, padding slots, max concurrency and capacity tokens under both strategy
sets and their ratio (default / vllm). The vLLM #43626 scenario (Qwen3-Coder-Next-80B-A3B + a
Qwen3-4B draft, built from config.json so each set's aligner chooses the block sizes) is planned
at several lengths. Targets: ratio >= 1.00 everywhere; #43626 (fp8, TP1, 4 speculative tokens)
>= 1.25x max concurrency at max_model_len 4096; zero padding slots where a zero-padding group
size exists within ``min-padding``'s group cap. Run: ``.venv/bin/python benchmarks/capacity.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import structlog

from kvrules import EngineConfig, Plan, Planner, default_manager
from kvrules.cli.compare import specs_for
from kvrules.config import DEFAULT_DRAFT_PREFIXES
from kvrules.examples import example_names, load_example
from kvrules.grouping import buckets_by_spec, search
from kvrules.hf import HFOptions, build_hf_model
from kvrules.report.tables import table
from kvrules.specs import KVCacheSpec
from kvrules_plugins.beyond_vllm import DEFAULT_MAX_GROUPS

GiB = 1 << 30


def shipped_config(name: str) -> dict[str, Any]:
    """A config shipped with the ``hf-qwen3-coder-next`` example (the published field values)."""
    folder = resources.files("kvrules") / "examples" / "hf" / "qwen3-coder-next"
    return dict(json.loads((folder / name).read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Row:
    case: str
    length: int
    vllm: Plan
    default: Plan
    zero_padding_possible: bool

    @property
    def ratio(self) -> float:
        return self.default.max_concurrency / self.vllm.max_concurrency

    @property
    def token_ratio(self) -> float:
        return self.default.capacity_tokens / self.vllm.capacity_tokens


def zero_padding_possible(specs: Mapping[str, KVCacheSpec]) -> bool:
    """A group size within the cap that leaves no padding slot (draft kept apart or not)?"""
    draft = {n: s for n, s in specs.items() if n.startswith(DEFAULT_DRAFT_PREFIXES)}
    target = {n: s for n, s in specs.items() if n not in draft}
    bucket_sets = [buckets_by_spec(specs)]
    if draft and target:
        bucket_sets.append(buckets_by_spec(target) + buckets_by_spec(draft))
    config = EngineConfig(max_model_len=1)
    for buckets in bucket_sets:
        _, considered, _ = search(buckets, config, DEFAULT_MAX_GROUPS)
        if any(c.cost.padding_slots == 0 for c in considered):
            return True
    return False


def example_rows() -> list[Row]:
    pm = default_manager()
    rows = []
    for name in example_names():
        model = load_example(name)
        config = EngineConfig(**model.engine)
        memory = model.available_memory or [40 * GiB]
        plans = []
        for strategies in ("vllm", "default"):  # an hf-* example is rebuilt with each set's aligners
            built = specs_for(model, strategies, pm)
            plans.append(Planner(strategies, plugin_manager=pm).plan(built.worker_specs(), memory, config))
        possible = plans[1].route == "unified-page" and zero_padding_possible(plans[1].specs)
        rows.append(Row(name, config.max_model_len, plans[0], plans[1], possible))
    return rows


def scenario_rows(lengths: list[int]) -> list[Row]:
    """#43626 built from configs: fp8 TP1 k=4 at each length; bf16 TP1 and fp8 TP2 at 32K."""
    variants: list[tuple[str, dict[str, Any], list[int]]] = [
        ("#43626 fp8 TP1 k=4", {"kv_cache_dtype": "fp8"}, lengths),
        ("#43626 bf16 TP1 k=4", {"kv_cache_dtype": "auto"}, [32768]),
        ("#43626 fp8 TP2 k=4", {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}, [32768]),
    ]
    target, draft = shipped_config("config.json"), shipped_config("draft.json")
    rows = []
    for label, extra, sizes in variants:
        for length in sizes:
            options = HFOptions(num_speculative_tokens=4, max_model_len=length, **extra)
            config = EngineConfig(max_model_len=length)
            plans = []
            for strategies in ("vllm", None):
                specs = build_hf_model(target, draft, options, strategies=strategies).specs
                plans.append(Planner(strategies).plan(specs, 40 * GiB, config))
            rows.append(Row(label, length, plans[0], plans[1], zero_padding_possible(plans[1].specs)))
    return rows


def page(plan: Plan) -> str:
    sizes = sorted({s.page_size_bytes for s in plan.specs.values()})
    return f"{sizes[-1]:,}" + (f" (+{len(sizes) - 1})" if len(sizes) > 1 else "")


def slots(plan: Plan) -> int:
    return plan.waste.padding_slots if plan.waste is not None else -1


def render(rows: list[Row]) -> str:
    body = [
        [
            r.case,
            f"{r.length:,}",
            f"{len(r.vllm.groups)}/{slots(r.vllm)}",
            page(r.vllm),
            f"{r.vllm.max_concurrency:.2f}",
            f"{r.vllm.capacity_tokens:,}",
            f"{len(r.default.groups)}/{slots(r.default)}",
            page(r.default),
            f"{r.default.max_concurrency:.2f}",
            f"{r.default.capacity_tokens:,}",
            f"{r.ratio:.3f}",
            f"{r.token_ratio:.3f}",
        ]
        for r in rows
    ]
    headers = [
        "case",
        "max_model_len",
        "vllm groups/pad",
        "vllm page B",
        "vllm conc",
        "vllm tokens",
        "default groups/pad",
        "default page B",
        "default conc",
        "default tokens",
        "conc ratio",
        "token ratio",
    ]
    return table(headers, body, indent="")


def targets(rows: list[Row]) -> tuple[list[str], bool]:
    lines = []
    worst = min(rows, key=lambda r: r.ratio)
    ok_ratio = all(r.ratio >= 1.0 and r.token_ratio >= 1.0 for r in rows)
    lines.append(
        f"ratio >= 1.00 everywhere: {'PASS' if ok_ratio else 'FAIL'} (lowest {worst.ratio:.3f}, {worst.case} "
        f"at {worst.length})"
    )
    seed = [r for r in rows if r.case == "#43626 fp8 TP1 k=4"]
    at_4k = next((r for r in seed if r.length == 4096), None)
    ok_seed = at_4k is not None and at_4k.ratio >= 1.25
    detail = ", ".join(f"{r.length}: x{r.ratio:.3f}" for r in seed)
    lines.append(f"#43626 fp8 TP1 k=4 >= 1.25x at 4096: {'PASS' if ok_seed else 'FAIL'} ({detail})")
    missed = [r for r in rows if r.zero_padding_possible and slots(r.default) != 0]
    lines.append(
        "zero padding slots where a zero-padding group size exists: "
        + ("PASS" if not missed else "FAIL: " + ", ".join(r.case for r in missed))
        + f" ({sum(r.zero_padding_possible for r in rows)} cases have one)"
    )
    return lines, ok_ratio and ok_seed and not missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lengths", default="4096,32768,262144", help="lengths for the #43626 scenario")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = example_rows() + scenario_rows(lengths)
    print("capacity at the same memory: vllm vs default (groups/pad = KV-cache groups / padding slots)")
    print(render(rows))
    print()
    lines, ok = targets(rows)
    for line in lines:
        print(line)
    assert all(math.isfinite(r.ratio) for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
