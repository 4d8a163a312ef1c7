"""The model zoo through the front door: how much of it kvrules plans, and plans right.

(a) The corpus in ``tests/data/hf`` (real configs written from the published files): every config
at KV dtype auto (bf16) / fp8 and TP 1 / 2 / 8 is built, planned and checked layer by layer
against the independent reference ``tests/hf_reference.py``. A config counts as
*planned-correct* when every combination vLLM accepts matches the reference and plans (and every
TP size vLLM refuses is refused), *planned-wrong* when one builds different layers or another pool (``num_blocks``, max concurrency), *refused*
when kvrules raises a KVRulesError (grouped by the reason), *other* for any other exception.
Configs with values marked unsure (``tests/data/hf/uncertain.json``) are counted separately.

(b) With ``transformers`` installed: every text-decoder model type of the issue (the
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` types whose ``AutoConfig.for_model(t)`` builds,
image-text-to-text types through their ``text_config``, and ``*_text`` sub-configs), built from
the class defaults and planned at bf16, TP 1: planned / refused with a clear error / other
(traceback), grouped by reason; types whose config is ``is_encoder_decoder`` are listed but not
counted. Without transformers, (b) is skipped with a note.

Never stops on one model. Run: ``.venv/bin/python benchmarks/hf_zoo.py`` (``--corpus-only``,
``--types-only``, ``--verbose`` for every refusal's full message). Outside CI.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import structlog
from hf_reference import Layer, TPRefused, capacity, expected, first_difference, observed

from kvrules import EngineConfig, KVRulesError, Plan, Planner
from kvrules.hf import HFModel, HFOptions, build_hf_model
from kvrules.report.tables import table

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"
KV_DTYPES = ("auto", "fp8")
TP_SIZES = (1, 2, 8)
MEMORY = 8 << 30
MAX_MODEL_LEN = 4096
STATUSES = ("planned-correct", "planned-wrong", "refused", "other")
ENCODER_DECODER = "not a decoder"
"""(b): a type whose config says ``is_encoder_decoder`` (BART, Whisper, ...): not counted."""


@dataclass(frozen=True)
class Result:
    """One combination's outcome: a status from :data:`STATUSES` and why (empty when correct)."""

    status: str
    reason: str = ""


MAX_NUM_BATCHED_TOKENS = 2048


def plan_model(model: HFModel) -> Plan:
    """Plan ``model`` on one worker (raises what the planner raises)."""
    settings = {"max_model_len": MAX_MODEL_LEN, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS}
    return Planner("vllm").plan(model.specs, MEMORY, EngineConfig.from_dict({**model.engine, **settings}))


def pool_difference(want: list[Layer], plan: Plan) -> str | None:
    """``None`` when the plan's pool is vLLM's (or the reference has none), else what differs."""
    pool = capacity(want, MEMORY, MAX_MODEL_LEN, MAX_NUM_BATCHED_TOKENS)
    if pool is None or (plan.num_blocks, round(plan.max_concurrency, 9)) == (
        pool.num_blocks,
        round(pool.max_concurrency, 9),
    ):
        return None
    return (f"num_blocks {plan.num_blocks}, max concurrency {plan.max_concurrency:.4f}; vLLM: "
            f"{pool.num_blocks}, {pool.max_concurrency:.4f}")  # fmt: skip


def _other(exc: BaseException) -> Result:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return Result("other", f"{type(exc).__name__}{where}: {exc}")


def run_combination(config: dict[str, Any], kv: str, tp: int) -> Result:
    """Build, compare and plan one (config, dtype, TP); never raises."""
    try:
        want: list[Layer] | None = expected(config, kv, tp)
    except TPRefused:
        want = None
    try:
        model = build_hf_model(
            config, None, HFOptions(kv_cache_dtype=kv, tensor_parallel_size=tp), strategies="vllm"
        )
    except KVRulesError as exc:
        return (
            Result("planned-correct") if want is None else Result("refused", f"{type(exc).__name__}: {exc}")
        )
    except Exception as exc:  # a benchmark reports every fault and goes on
        return _other(exc)
    if want is None:
        return Result("planned-wrong", f"TP {tp}: vLLM refuses it, kvrules built {model.description()}")
    difference = first_difference(want, observed(model.specs))
    if difference is not None:
        return Result("planned-wrong", f"{kv} TP {tp}: {difference}")
    try:
        plan = plan_model(model)
    except KVRulesError as exc:
        return Result("refused", f"planning: {type(exc).__name__}: {exc}")
    except Exception as exc:
        return _other(exc)
    pool = pool_difference(want, plan)
    return Result("planned-correct") if pool is None else Result("planned-wrong", f"{kv} TP {tp}: {pool}")


def run_config(path: Path) -> Result:
    """The worst outcome over every dtype and TP (wrong > other > refused > correct)."""
    config = json.loads(path.read_text())
    results = [run_combination(config, kv, tp) for kv in KV_DTYPES for tp in TP_SIZES]
    for status in ("planned-wrong", "other", "refused"):
        for result in results:
            if result.status == status:
                return result
    return Result("planned-correct")


def short_reason(reason: str, width: int = 150) -> str:
    """A reason cut to one line of ``width`` characters, the corpus path left out."""
    text = " ".join(reason.replace(str(CORPUS) + "/", "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def corpus_table(verbose: bool) -> None:
    """Part (a): plan the corpus and print the table, split by certain / uncertain."""
    uncertain = set(json.loads((CORPUS / "uncertain.json").read_text()))
    names = sorted(p.name for p in CORPUS.iterdir() if (p / "config.json").is_file())
    counts: dict[str, Counter[str]] = {"certain": Counter(), "uncertain": Counter()}
    failures = []
    for name in names:
        result = run_config(CORPUS / name / "config.json")
        group = "uncertain" if name in uncertain else "certain"
        counts[group][result.status] += 1
        if result.status != "planned-correct":
            failures.append(
                [name, group, result.status, result.reason if verbose else short_reason(result.reason)]
            )
    rows = [[g, sum(c.values()), *(c[s] for s in STATUSES)] for g, c in counts.items()]
    total = counts["certain"] + counts["uncertain"]
    rows.append(["all", sum(total.values()), *(total[s] for s in STATUSES)])
    print(f"(a) corpus: {len(names)} configs x KV {'/'.join(KV_DTYPES)} x TP {'/'.join(map(str, TP_SIZES))}")
    print(table(["configs", "n", *STATUSES], rows))
    if failures:
        print()
        print(table(["config", "values", "status", "first reason"], failures))


# ---------------------------------------------------------------- (b) transformers' model types


def _text_types(
    mapping_names: Iterable[str], image_text: Iterable[str], configs: Iterable[str]
) -> list[tuple[str, str]]:
    """(model type, how) for the issue's set, each type once: causal LM, image-text-to-text, ``*_text``."""
    seen: dict[str, str] = {}
    for t in mapping_names:
        seen.setdefault(t, "causal-lm")
    for t in image_text:
        seen.setdefault(t, "image-text-to-text")
    for t in configs:
        if t.endswith("_text"):
            seen.setdefault(t, "text sub-config")
    return sorted(seen.items())


def _config_dict(transformers: Any, model_type: str, how: str) -> dict[str, Any]:
    """The class-default config of ``model_type`` as JSON data (the text part for multimodal types)."""
    config = transformers.AutoConfig.for_model(model_type)
    if how == "image-text-to-text":
        config = config.get_text_config()
    data: dict[str, Any] = json.loads(config.to_json_string(use_diff=False))
    return data


def refusal_group(message: str) -> str:
    """A reason without the per-model details (model type, class names, numbers), to group refusals."""
    text = re.sub(r"model_type '[^']*'", "model_type '…'", message)
    text = re.sub(r"architectures [^)]*\)", "architectures …)", text)
    text = re.sub(r"\b\d+\b", "N", text)
    text = text.split("Supported:")[0]
    return short_reason(text, 140)


def run_type(transformers: Any, model_type: str, how: str) -> tuple[str, str]:
    """(status, reason) for one transformers model type; never raises."""
    try:
        data = _config_dict(transformers, model_type, how)
    except Exception as exc:  # transformers itself cannot build it
        return "transformers-failed", f"{type(exc).__name__}: {short_reason(str(exc), 100)}"
    if data.get("is_encoder_decoder"):
        return ENCODER_DECODER, ""
    try:
        plan_model(build_hf_model(data, None, HFOptions(), strategies="vllm"))
    except KVRulesError as exc:
        return "refused", str(exc)
    except Exception as exc:
        return "other", _other(exc).reason
    return "planned", ""


def _import_transformers() -> Any:
    try:
        import transformers
        from transformers.models.auto import configuration_auto, modeling_auto
    except ImportError:
        return None
    hf_logging: Any = transformers.logging
    hf_logging.set_verbosity_error()
    return transformers, configuration_auto, modeling_auto


def _print_types(results: dict[str, list[tuple[str, str, str]]], verbose: bool) -> None:
    total = sum(len(v) for v in results.values())
    rows = [
        [status, len(items), f"{100 * len(items) / max(total, 1):.1f}%"]
        for status, items in sorted(results.items())
    ]
    print(table(["status", "types", "share"], rows))
    for status in ("refused", "other", "transformers-failed", ENCODER_DECODER):
        groups: dict[str, list[str]] = defaultdict(list)
        for model_type, _how, reason in results.get(status, []):
            groups[reason if verbose else refusal_group(reason)].append(model_type)
        if groups:
            print(f"\n{status}, by reason:")
            ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
            print(table(["n", "reason", "model types"], [[len(v), r, ", ".join(v)] for r, v in ordered]))


def types_table(verbose: bool, only: Callable[[str], bool] = lambda t: True) -> None:
    """Part (b): transformers' text-decoder model types through the front door."""
    modules = _import_transformers()
    if modules is None:
        print("(b) skipped: transformers is not installed (pip install 'kvrules[hf]')")
        return
    transformers, configuration_auto, modeling_auto = modules
    types = _text_types(
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        configuration_auto.CONFIG_MAPPING_NAMES,
    )
    results: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type, how in types:
            if only(model_type):
                status, reason = run_type(transformers, model_type, how)
                results[status].append((model_type, how, reason))
    built = sum(len(v) for k, v in results.items() if k not in ("transformers-failed", ENCODER_DECODER))
    planned = len(results.get("planned", []))
    print(f"(b) transformers {transformers.__version__}: {sum(len(v) for v in results.values())} model types, "
          f"{built} text decoders built by AutoConfig.for_model; planned {planned} of {built} ({100 * planned / max(built, 1):.1f}%)")  # fmt: skip
    by_how: dict[str, Counter[str]] = defaultdict(Counter)
    for status, items in results.items():
        for _type, how, _reason in items:
            by_how[how][status] += 1
    statuses = sorted(results)
    print(
        table(
            ["source", "types", *statuses],
            [[h, sum(c.values()), *(c[s] for s in statuses)] for h, c in sorted(by_how.items())],
        )
    )
    print()
    _print_types(results, verbose)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-only", action="store_true", help="only part (a)")
    parser.add_argument("--types-only", action="store_true", help="only part (b)")
    parser.add_argument("--verbose", action="store_true", help="full messages, not grouped")
    args = parser.parse_args()
    # a benchmark is an application: keep kvrules' info summaries off stdout
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    t0 = time.perf_counter()
    if not args.types_only:
        corpus_table(args.verbose)
        print(f"  ({time.perf_counter() - t0:.1f} s)\n")
    t1 = time.perf_counter()
    if not args.corpus_only:
        types_table(args.verbose)
        print(f"  ({time.perf_counter() - t1:.1f} s)")
    print(f"\ntotal runtime {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
