"""``kvrules specs``: the per-layer specs derived from a Hugging Face config, and why.

Prints layers grouped by identical spec (in layer order of first appearance) and the ``arch``
and ``align`` decisions; ``-o PATH`` writes the specs as a model file that ``kvrules plan PATH``
reads; ``--json`` prints that model file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from kvrules.cli import flags
from kvrules.cli.common import add_common, output_path, plugin_manager_from, strategies_from, write_output
from kvrules.cli.hf import add_hf_arguments, hf_model_from_args
from kvrules.errors import ModelFileError
from kvrules.hf.build import HFModel, HFModelFile
from kvrules.report.tables import table
from kvrules.specs import AttentionSpec, KVCacheSpec, MambaSpec


def _geometry(spec: KVCacheSpec) -> str:
    if isinstance(spec, MambaSpec):
        shapes = " ".join("(" + ",".join(map(str, s)) + ")" for s in spec.shapes)
        dtypes = "/".join(spec.dtypes)
        return f"{spec.mamba_type} {shapes} {dtypes}"
    if isinstance(spec, AttentionSpec):
        extra = ""
        window = getattr(spec, "sliding_window", None)
        chunk = getattr(spec, "attention_chunk_size", None)
        if window:
            extra = f" window {window}"
        elif chunk:
            extra = f" chunk {chunk}"
        quant = "" if spec.kv_quant_mode.name == "NONE" else f" {spec.kv_quant_mode.name}"
        return f"{spec.num_kv_heads} x {spec.head_size} {spec.dtype}{quant}{extra}"
    return "-"


def render_specs(specs: Mapping[str, KVCacheSpec]) -> str:
    """Layers grouped by identical spec: count, type, block, geometry, page, padding, first/last layer."""
    buckets: dict[KVCacheSpec, list[str]] = {}
    for name, spec in specs.items():
        buckets.setdefault(spec, []).append(name)
    rows = []
    for spec, names in buckets.items():
        padding = spec.page_size_bytes - spec.unpadded_page_size_bytes
        rows.append(
            [
                len(names),
                spec.type_name,
                spec.block_size,
                _geometry(spec),
                f"{spec.page_size_bytes:,}",
                f"{padding:,}" if padding else "-",
                names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}",
            ]
        )
    return table(
        ["layers", "type", "block", "geometry", "page B", "padding B", "layers (first .. last)"], rows
    )


def render_model(model: HFModel, title: str) -> str:
    """The ``kvrules specs`` report: description, spec table, decisions that acted."""
    out = [f"kvrules specs: {title}", model.description(), ""]
    out.append(render_specs(model.specs))
    applied = [d for d in model.decisions if d.outcome == "applied" and d.layer is None]
    declined = sum(1 for d in model.decisions if d.outcome == "declined")
    per_layer = sum(1 for d in model.decisions if d.layer is not None)
    out.append("")
    out.append(
        f"decisions ({len(model.decisions)}: {declined} declined, {per_layer} per layer; --log-format json for all):"
    )
    out.append(table(["stage", "rule", "reason"], [[d.stage, d.rule, d.reason] for d in applied]))
    if model.engine:
        out.append("")
        out.append("engine settings implied by the model: " + json.dumps(model.engine))
    return "\n".join(out)


def cmd_specs(args: argparse.Namespace) -> int:
    output_path(args.output, "-o")
    pm = plugin_manager_from(args)
    found = hf_model_from_args(args, pm, strategies_from(args))
    if found is None:
        raise ModelFileError("give --hf-config PATH (a config.json or its directory) or --example hf-NAME")
    model_file, title = found
    if not isinstance(model_file, HFModelFile) or model_file.hf is None:
        raise ModelFileError(f"{title} is not a Hugging Face model")
    model = model_file.hf
    document: dict[str, Any] = model.to_dict()
    document["engine"] = dict(model_file.engine)
    document["description"] = model_file.description
    if model_file.available_memory:
        document["available_memory"] = list(model_file.available_memory)
    if args.output:
        write_output(args.output, json.dumps(document, indent=1) + "\n", "-o")
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print(render_model(model, title))
        if args.output:
            print(
                f"\nwrote the model file {args.output} (plan it with `kvrules plan {args.output} --memory ...`)"
            )
    return 0


def register(subparsers: Any) -> None:
    """Add the ``specs`` sub-command."""
    p = subparsers.add_parser("specs", help="derive per-layer specs from a Hugging Face config.json")
    p.add_argument("--example", metavar="NAME", help="a built-in hf-* example (see `kvrules examples`)")
    p.add_argument(
        "--max-model-len",
        type=flags.TOKENS,
        metavar="N",
        help="longest request (Mamba blocks in 'none' mode)",
    )
    add_hf_arguments(p)
    p.add_argument("-o", "--output", metavar="PATH", help="write the specs as a model file to PATH")
    p.add_argument("--json", action="store_true", help="print the model file as JSON")
    add_common(p)
    p.set_defaults(func=cmd_specs)
