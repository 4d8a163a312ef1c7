"""Command-line glue of the model front door: the ``--hf-config`` flags and building the model file.

``kvrules.cli.main`` calls :func:`add_hf_arguments` from ``add_plan_arguments`` and
:func:`hf_model_from_args` from ``load_model``; every error is a :class:`~kvrules.KVRulesError`
(exit code 2, no traceback).
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from kvrules.cli import flags
from kvrules.errors import ConfigError, ModelFileError
from kvrules.hf.backends import AUTO, BACKENDS
from kvrules.hf.build import HFModelFile, model_from_hf
from kvrules.hf.config import READERS
from kvrules.hf.examples import load_hf_example
from kvrules.hf.options import KV_CACHE_DTYPES, MAMBA_DTYPES, HFOptions
from kvrules.model import ModelFile
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.plugin.presets import StrategySpec
from kvrules.specs.mamba import MAMBA_CACHE_MODES

#: argparse destination -> :class:`HFOptions` field (whose name, dashed, is the flag: ``--dtype``)
OPTION_FLAGS: dict[str, str] = {
    **{
        name: name
        for name in (
            "kv_cache_dtype",
            "draft_kv_cache_dtype",
            "tensor_parallel_size",
            "block_size",
            "mamba_cache_dtype",
            "mamba_ssm_cache_dtype",
            "mamba_cache_mode",
            "mamba_block_size",
            "num_speculative_tokens",
            "attention_backend",
        )
    },
    "model_dtype": "dtype",
}


def add_hf_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--hf-config`` flags (all default to ``None``: unset flags keep the model's defaults)."""
    g = parser.add_argument_group("Hugging Face config (plan straight from a model's config.json)")
    g.add_argument("--hf-config", metavar="PATH", help="a config.json, or a directory holding one")
    g.add_argument(
        "--draft",
        metavar="CONFIG|mtp",
        help="the draft model's config.json (or 'mtp': the target's MTP layers)",
    )
    kv = ", ".join(KV_CACHE_DTYPES)
    g.add_argument(
        "--kv-cache-dtype", choices=tuple(KV_CACHE_DTYPES), metavar="DTYPE", help=f"KV-cache dtype: {kv}"
    )
    g.add_argument(
        "--draft-kv-cache-dtype",
        choices=tuple(KV_CACHE_DTYPES),
        metavar="DTYPE",
        help="the draft's KV-cache dtype (default: --kv-cache-dtype)",
    )
    g.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tensor_parallel_size",
        type=flags.PARALLEL,
        metavar="N",
        help="tensor-parallel size (KV heads and Mamba states per rank)",
    )
    g.add_argument(
        "--block-size",
        type=flags.TOKENS,
        metavar="N",
        help="cache block size in tokens (default: the backend's, 16)",
    )
    g.add_argument("--mamba-cache-dtype", choices=MAMBA_DTYPES, help="Mamba conv-state dtype (default auto)")
    g.add_argument(
        "--mamba-ssm-cache-dtype",
        choices=MAMBA_DTYPES,
        help="Mamba SSM-state dtype (default auto: the model's own default)",
    )
    g.add_argument(
        "--mamba-cache-mode", choices=MAMBA_CACHE_MODES, help="Mamba prefix-cache mode (default align)"
    )
    g.add_argument(
        "--mamba-block-size",
        type=flags.TOKENS,
        metavar="N",
        help="Mamba block size for --mamba-cache-mode all",
    )
    g.add_argument(
        "--num-speculative-tokens",
        type=flags.TOKENS_OR_ZERO,
        metavar="K",
        help="draft tokens per step (default 0)",
    )
    g.add_argument(
        "--attention-backend",
        choices=(AUTO, *BACKENDS),
        metavar="NAME",
        help=f"kernel block sizes come from it: {AUTO}, {', '.join(BACKENDS)}",
    )
    g.add_argument("--dtype", dest="model_dtype", metavar="DTYPE", help="model dtype (default: the config's)")
    g.add_argument(
        "--hf-reader",
        choices=READERS,
        help="how config.json is read: auto (default: the built-in reader for every model type it "
        "knows, transformers for the others), builtin, or transformers (its config classes; kvrules[hf])",
    )


def option_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`HFOptions` fields set on the command line."""
    out = {}
    for dest, field in OPTION_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            out[field] = value
    length = getattr(args, "max_model_len", None)
    if isinstance(length, int):  # parsed by kvrules.cli.flags ('auto' is not an option value)
        out["max_model_len"] = length
    return out


def _flags_given(args: argparse.Namespace) -> list[str]:
    """The Hugging Face flags given (``--max-model-len`` applies to every model)."""
    names = [field for field in option_overrides(args) if field != "max_model_len"]
    names += [dest for dest in ("draft", "hf_reader") if getattr(args, dest, None) is not None]
    return [f"--{name.replace('_', '-')}" for name in names]


def reader_from(args: argparse.Namespace) -> str:
    """``--hf-reader`` (``auto`` when not given)."""
    return str(getattr(args, "hf_reader", None) or "auto")


def hf_model_from_args(
    args: argparse.Namespace, pm: KVRulesPluginManager, strategies: StrategySpec = None
) -> tuple[ModelFile, str] | None:
    """The model file from ``--hf-config`` or an ``hf-*`` example, or ``None`` when neither is given.

    :raises ModelFileError: conflicting inputs, or a bad config.
    :raises ConfigError: Hugging Face flags without a Hugging Face model.
    """
    hf_config = getattr(args, "hf_config", None)
    example = getattr(args, "example", None)
    if hf_config:
        if getattr(args, "file", None) or example:
            raise ModelFileError("give one model: a model FILE, --example NAME, or --hf-config PATH")
        options = HFOptions.from_dict(option_overrides(args))
        model = model_from_hf(
            hf_config,
            getattr(args, "draft", None),
            options,
            strategies=strategies,
            plugin_manager=pm,
            reader=reader_from(args),
        )
        return model, str(hf_config)
    if example and example.startswith("hf-"):
        overrides = option_overrides(args)
        if getattr(args, "draft", None) is not None:
            raise ConfigError(f"example {example!r} brings its own draft; use --hf-config to choose another")
        return load_hf_example(
            example, overrides, strategies=strategies, plugin_manager=pm, reader=reader_from(args)
        ), f"example {example!r}"
    given = _flags_given(args)
    if given:
        raise ConfigError(
            f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only to a Hugging Face model: "
            "add --hf-config PATH (or --example hf-NAME)"
        )
    return None


def with_model_decisions(plan: Plan, model: ModelFile) -> Plan:
    """``plan`` with the model's ``arch`` and ``align`` decisions in front (HF models only)."""
    if isinstance(model, HFModelFile) and model.hf is not None:
        return msgspec.structs.replace(plan, decisions=model.hf.decisions + plan.decisions)
    return plan
