"""``kvrules fit``: does a model (and its draft) fit on a GPU, and how well?"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvrules.cli import flags
from kvrules.cli.common import add_common, draw_picture, output_path, plugin_manager_from
from kvrules.errors import ConfigError
from kvrules.hf.build import MTP
from kvrules.hf.config import READERS
from kvrules.hf.options import KV_CACHE_DTYPES
from kvrules.plan import Plan
from kvrules.report.fit import render_fit
from kvrules.report.picture import check_format, formats_text
from kvrules.sizing.fit import DEFAULT_SETS, FitOptions, FitReport, fit
from kvrules.sizing.gpus import catalog
from kvrules.sizing.shard import MXFP4_BACKENDS

VLLM_LINES = ("0.28", "0.33")


def _utilization(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in (0, 1]") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in (0, 1]")
    return value


def strategy_sets(args: argparse.Namespace) -> tuple[str, ...]:
    """The sets to compare: ``--strategies`` (each one a set), else ``default`` beside the
    ``--vllm-line``'s preset (``vllm-0.33`` unless told)."""
    if args.strategies:
        if args.vllm_line:
            raise ConfigError("give --strategies or --vllm-line, not both")
        return tuple(args.strategies)
    if args.vllm_line:
        return ("default", f"vllm-{args.vllm_line}")
    return DEFAULT_SETS


def pictured(report: FitReport) -> tuple[Plan, str]:
    """The plan ``--picture`` draws and its title: the first answer's, else (when it does not
    fit) the first nearest setting's.

    :raises ConfigError: nothing fits, so there is no plan to draw.
    """
    for answer in report.answers:
        if answer.plan is not None:
            return answer.plan, f"kvrules fit: {report.model}, {answer.strategy_set}"
    for alt in report.nearest:
        first = alt.report.answers[0]
        if first.plan is not None:
            return first.plan, f"kvrules fit: {report.model}, {alt.change}, {first.strategy_set}"
    raise ConfigError("--picture: nothing fits, so there is no plan to draw")


def cmd_fit(args: argparse.Namespace) -> int:
    if output_path(args.picture, "--picture") is not None:
        check_format(args.picture)
    pm = plugin_manager_from(args)
    options = FitOptions(
        gpu=args.gpu,
        gpu_memory=args.gpu_memory,
        tp=args.tp,
        pp=args.pp,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        enforce_eager=args.enforce_eager,
        overhead=args.overhead,
        strategies=strategy_sets(args),
        allow_assumed_sizes=args.allow_assumed_sizes,
        reader=args.hf_reader,
        mxfp4_backend=args.mxfp4_backend,
    )
    report = fit(args.hf_config, args.draft, options, plugin_manager=pm)
    if args.picture:
        plan, title = pictured(report)
        draw_picture(plan, args.picture, title)
    print(json.dumps(report.to_dict()) if args.json else render_fit(report))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``fit`` sub-command."""
    names = ", ".join(g.name for g in catalog())
    p = subparsers.add_parser(
        "fit",
        help="does a model (and its draft) fit on a GPU, and how well: weights, runtime memory, the exact KV plan",
    )
    p.add_argument(
        "--hf-config", required=True, metavar="PATH", help="the model's config.json (or its directory)"
    )
    p.add_argument("--draft", metavar="CONFIG|mtp", help=f"a draft model's config.json, or '{MTP}'")
    p.add_argument(
        "--hf-reader",
        choices=READERS,
        default="auto",
        help="how config.json is read: auto (the built-in reader for the model types it knows), builtin or transformers",
    )
    gpu = p.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu", metavar="NAME", help=f"a GPU of kvrules' catalog: {names}")
    gpu.add_argument("--gpu-memory", metavar="SIZE", help="the GPU's total memory, e.g. 80GiB")
    p.add_argument("--tp", "--tensor-parallel-size", type=flags.PARALLEL, default=1, metavar="N")
    p.add_argument("--pp", "--pipeline-parallel-size", type=flags.PARALLEL, default=1, metavar="N")
    p.add_argument(
        "--gpu-memory-utilization", type=_utilization, default=0.9, metavar="F", help="vLLM's (default 0.9)"
    )
    p.add_argument("--max-model-len", type=flags.TOKENS, metavar="N", help="default: the config's maximum")
    p.add_argument("--max-num-seqs", type=flags.TOKENS, metavar="N", help="default: vllm serve's for the GPU")
    p.add_argument(
        "--max-num-batched-tokens", type=flags.TOKENS, metavar="N", help="default: vllm serve's for the GPU"
    )
    p.add_argument("--kv-cache-dtype", choices=tuple(KV_CACHE_DTYPES), default="auto", metavar="DTYPE")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (as vLLM's flag)")
    p.add_argument(
        "--overhead",
        metavar="SIZE",
        help="runtime memory per GPU besides weights and KV cache, instead of the estimate",
    )
    p.add_argument(
        "--mxfp4-backend",
        choices=("auto", *MXFP4_BACKENDS),
        default="auto",
        help="the MoE backend of mxfp4 experts (gpt-oss), which pads and stores them: auto (current vLLM's choice for "
        "--gpu: marlin below Hopper, triton on Hopper, flashinfer-trtllm on B200; triton with --gpu-memory); "
        "marlin for Hopper with vLLM 0.10.1 and others before triton_kernels became a dependency",
    )
    p.add_argument(
        "--vllm-line", choices=VLLM_LINES, help="compare default with this vLLM line's preset (0.33)"
    )
    p.add_argument(
        "--allow-assumed-sizes",
        action="store_true",
        help="go on when the config leaves out a size field (its class default is used)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (schema kvrules.fit/v1)")
    p.add_argument(
        "--picture",
        metavar="PATH",
        help=f"draw the memory layout of the first plan that fits to PATH ({formats_text()}; needs kvrules[plot])",
    )
    add_common(p)
    p.set_defaults(func=cmd_fit)
