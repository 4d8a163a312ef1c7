"""Helpers of ``scripts/vllm-parity``; they run inside its throwaway vLLM environment.

``cases``     plan every shared case through vLLM's own ``get_kv_cache_configs`` and again with
              ``kvrules.integrations.vllm.install()``, and compare the results field by field
              (also ``get_kv_cache_groups`` and ``unify_kv_cache_spec_page_size``);
``hf-cache``  lay tests/data/hf-cache's configs out as the offline Hugging Face cache vLLM's
              tests need (``hf-cache HOME [--from DIR]``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CASES = Path(os.environ.get("KVRULES_CASES_DIR", REPO / "tests" / "data" / "cases"))

#: model-file type name -> vLLM class name
VLLM_TYPES = {
    "full_attention": "FullAttentionSpec",
    "sliding_window": "SlidingWindowSpec",
    "chunked_local": "ChunkedLocalAttentionSpec",
    "mla": "MLAAttentionSpec",
    "sliding_window_mla": "SlidingWindowMLASpec",
    "mamba": "MambaSpec",
    "cross_attention": "CrossAttentionSpec",
    "encoder_only": "EncoderOnlyAttentionSpec",
    "sink_full_attention": "SinkFullAttentionSpec",
    "hidden_state_cache": "HiddenStateCacheSpec",
}

#: Configs-only Hugging Face files (``ORG/NAME/config.json``, the published config of each model
#: vLLM's tests name in ``ModelConfig``; see its NOTES.md). Offline machines read them from a
#: private HF_HOME laid out by :func:`write_hf_cache`.
HF_CACHE_FILES = REPO / "tests" / "data" / "hf-cache"
#: the hub revision every stand-in snapshot is filed under
HF_REVISION = "0" * 40


def hf_configs(source: Path = HF_CACHE_FILES) -> dict[str, Path]:
    """Repository id (``ORG/NAME``) -> its ``config.json`` under ``source``; at least one."""
    found = {f"{f.parent.parent.name}/{f.parent.name}": f for f in sorted(source.glob("*/*/config.json"))}
    if not found:
        raise SystemExit(f"vllm_parity: no ORG/NAME/config.json under {source}")
    return found


def _check_json(path: Path) -> None:
    """Refuse a ``config.json`` that is not a JSON object, naming the file."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SystemExit(f"vllm_parity: {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or "architectures" not in data:
        raise SystemExit(f"vllm_parity: {path} is not a model config (no 'architectures')")


def write_hf_cache(home: Path, source: Path = HF_CACHE_FILES) -> list[str]:
    """Lay every config under ``source`` out as a Hugging Face hub cache under ``home``
    (``hub/models--ORG--NAME/{refs/main,snapshots/REV/config.json}``); returns the repository ids."""
    repos = hf_configs(source)
    for repo, config in repos.items():
        _check_json(config)
        base = home / "hub" / ("models--" + repo.replace("/", "--"))
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / "main").write_text(HF_REVISION)
        snapshot = base / "snapshots" / HF_REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_bytes(config.read_bytes())
    return list(repos)


# -- building vLLM inputs from a case --------------------------------------------------------
class SpeculativeStandIn:
    """``speculative_config`` with the two methods vLLM 0.28's planner calls."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.method = data["method"]
        self.num_speculative_tokens = data["num_speculative_tokens"]
        self.num_nextn_predict_layers = data.get("num_nextn_predict_layers", 1)

    def use_multi_module_mtp(self) -> bool:
        return bool(
            self.method == "mtp" and min(self.num_nextn_predict_layers, self.num_speculative_tokens) > 1
        )

    def use_eagle(self) -> bool:
        return bool(self.method in ("eagle", "eagle3", "mtp", "dflash", "dspark"))


def stand_in_config(settings: dict[str, Any], speculative: dict[str, Any] | None = None) -> SimpleNamespace:
    """The ``vllm_config`` stand-in the shared answers were produced with (``config_mode``)."""
    spec = speculative if speculative is not None else settings.get("speculative_config")
    return SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=settings["max_model_len"],
            original_max_model_len=settings["original_max_model_len"],
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=settings["max_num_batched_tokens"],
            max_num_encoder_input_tokens=settings["max_num_encoder_input_tokens"],
            disable_hybrid_kv_cache_manager=settings["disable_hybrid_kv_cache_manager"],
        ),
        cache_config=SimpleNamespace(
            block_size=settings["block_size"],
            num_gpu_blocks_override=settings["num_gpu_blocks_override"],
            mamba_cache_mode=settings["mamba_cache_mode"],
        ),
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=settings["decode_context_parallel_size"],
            prefill_context_parallel_size=settings["prefill_context_parallel_size"],
            pipeline_parallel_size=settings["pipeline_parallel_size"],
            tensor_parallel_size=settings["tensor_parallel_size"],
        ),
        speculative_config=SpeculativeStandIn(spec) if spec else None,
        kv_transfer_config=None,
        max_in_flight_tokens=settings["max_in_flight_tokens"],
    )


def vllm_specs(case: dict[str, Any], interface: Any) -> list[dict[str, Any]]:
    """The case's layers as vLLM spec objects, one dict per worker."""
    import torch

    specs: dict[str, Any] = {}
    for name, layer in case["layers"].items():
        data = dict(layer)
        cls = getattr(interface, VLLM_TYPES[data.pop("type")])
        if "dtype" in data:
            data["dtype"] = getattr(torch, data["dtype"])
        if "dtypes" in data:
            data["dtypes"] = tuple(getattr(torch, d) for d in data["dtypes"])
        if "shapes" in data:
            data["shapes"] = tuple(tuple(s) for s in data["shapes"])
        if "kv_cache_dtype" in data:
            data["kv_quant_mode"] = interface.get_kv_quant_mode(data.pop("kv_cache_dtype"))
        if cls.__name__ == "MambaSpec" and case.get("mamba_cache_mode"):
            data.setdefault("mamba_cache_mode", case["mamba_cache_mode"])
        specs[name] = cls(**data)
    workers = case.get("workers") or [list(specs)]
    return [{n: specs[n] for n in names} for names in workers]


def memory_of(case: dict[str, Any], workers: int) -> list[int]:
    memory = case["available_memory"]
    return list(memory) if isinstance(memory, list) else [memory] * workers


# -- running and comparing -------------------------------------------------------------------
def attempt(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:
        return "error", exc


def _tensor_rows(config: Any) -> list[tuple[Any, ...]]:
    return [(t.size, list(t.shared_by), t.offset, t.block_stride) for t in config.kv_cache_tensors]


def _group_rows(groups: list[Any]) -> list[tuple[Any, ...]]:
    return [(list(g.layer_names), g.kv_cache_spec, g.is_eagle_group) for g in groups]


def _unordered(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr((sorted(r[1]) if isinstance(r[1], list) else r[1], *r[2:], r[0])) for r in rows)


def diff_configs(theirs: list[Any], ours: list[Any]) -> list[str]:
    """Field-by-field differences between two ``get_kv_cache_configs`` results."""
    notes: list[str] = []
    if len(theirs) != len(ours):
        return [f"workers: vLLM {len(theirs)}, kvrules {len(ours)}"]
    for w, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        if a.num_blocks != b.num_blocks:
            notes.append(f"worker {w} num_blocks: vLLM {a.num_blocks}, kvrules {b.num_blocks}")
        ta, tb = _tensor_rows(a), _tensor_rows(b)
        if ta != tb:
            kind = "order only" if _unordered(ta) == _unordered(tb) else "values"
            notes.append(f"worker {w} kv_cache_tensors differ ({kind}): vLLM {ta}, kvrules {tb}")
        notes += diff_groups(a.kv_cache_groups, b.kv_cache_groups, f"worker {w} ")
    return notes


def diff_groups(theirs: list[Any], ours: list[Any], where: str = "") -> list[str]:
    """Differences between two group lists (names, spec equality, is_eagle_group), in order."""
    ga, gb = _group_rows(theirs), _group_rows(ours)
    if ga == gb:
        return []
    if len(ga) != len(gb):
        return [f"{where}groups: vLLM {[r[0] for r in ga]}, kvrules {[r[0] for r in gb]}"]
    notes = []
    for i, (a, b) in enumerate(zip(ga, gb, strict=True)):
        for label, x, y in (
            ("layer_names", a[0], b[0]),
            ("kv_cache_spec", a[1], b[1]),
            ("is_eagle_group", a[2], b[2]),
        ):
            if x != y:
                notes.append(f"{where}group {i} {label}: vLLM {x!r}, kvrules {y!r}")
    return notes


def diff_outcomes(
    theirs: tuple[str, Any], ours: tuple[str, Any], differ: Callable[[Any, Any], list[str]]
) -> list[str]:
    """Both succeed (then ``differ``), or both fail with ours an instance of vLLM's exception type."""
    if theirs[0] == "error" or ours[0] == "error":
        if theirs[0] == ours[0] == "error":
            a, b = theirs[1], ours[1]
            if isinstance(b, type(a)):
                return []
            return [f"error types: vLLM {type(a).__name__}, kvrules {type(b).__name__} ({b})"]
        a_text = type(theirs[1]).__name__ if theirs[0] == "error" else "a result"
        b_text = f"{type(ours[1]).__name__}: {ours[1]}" if ours[0] == "error" else "a result"
        return [f"vLLM gives {a_text}, kvrules gives {b_text}"]
    return differ(theirs[1], ours[1])


def outcome_text(result: tuple[str, Any]) -> str:
    if result[0] == "error":
        return f"both raise {type(result[1]).__name__}"
    configs = result[1]
    if not isinstance(configs, list) or not configs or not hasattr(configs[0], "num_blocks"):
        return "identical"
    groups = len(configs[0].kv_cache_groups)
    tensors = sum(len(c.kv_cache_tensors) for c in configs)
    return f"identical: {len(configs)} worker(s), {groups} group(s), {tensors} tensor(s), num_blocks {configs[0].num_blocks}"


class Parity:
    """Runs one planning call through vLLM and through kvrules and keeps the differences."""

    def __init__(self, strategies: str) -> None:
        import vllm.v1.core.kv_cache_utils as utils  # type: ignore[import-not-found,unused-ignore]
        import vllm.v1.kv_cache_interface as interface  # type: ignore[import-not-found,unused-ignore]

        from kvrules.integrations import vllm as kv_vllm

        self.utils, self.interface, self.kv_vllm = utils, interface, kv_vllm
        self.strategies = kv_vllm.parse_strategies(strategies)

    def both(self, call: Callable[[], Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
        self.kv_vllm.uninstall()
        theirs = attempt(call)
        self.kv_vllm.install(self.strategies)
        try:
            ours = attempt(call)
        finally:
            self.kv_vllm.uninstall()
        return theirs, ours

    def configs(self, case: dict[str, Any], settings: dict[str, Any], speculative: Any = None) -> list[str]:
        lengths: list[int] = []

        def call() -> Any:
            cfg = stand_in_config(settings, speculative)
            workers = vllm_specs(case, self.interface)
            try:
                return self.utils.get_kv_cache_configs(cfg, workers, memory_of(case, len(workers)))
            finally:
                lengths.append(cfg.model_config.max_model_len)

        theirs, ours = self.both(call)
        notes = diff_outcomes(theirs, ours, diff_configs)
        if lengths[0] != lengths[1]:
            notes.append(f"model_config.max_model_len after: vLLM {lengths[0]}, kvrules {lengths[1]}")
        self.last = theirs
        return notes

    def groups(self, case: dict[str, Any], settings: dict[str, Any], speculative: Any = None) -> list[str]:
        inputs: list[dict[str, Any]] = []

        def call() -> Any:
            merged = {n: s for w in vllm_specs(case, self.interface) for n, s in w.items()}
            inputs.append(merged)
            return self.utils.get_kv_cache_groups(stand_in_config(settings, speculative), merged)

        theirs, ours = self.both(call)
        notes = diff_outcomes(theirs, ours, diff_groups)
        if inputs[0] != inputs[1]:
            notes.append("the kv_cache_spec dict differs after the call (in-place conversion)")
        return notes

    def unify(self, case: dict[str, Any]) -> list[str]:
        def call() -> Any:
            merged = {n: s for w in vllm_specs(case, self.interface) for n, s in w.items()}
            return self.utils.unify_kv_cache_spec_page_size(merged)

        theirs, ours = self.both(call)
        return diff_outcomes(
            theirs, ours, lambda a, b: [] if a == b else [f"unified specs: vLLM {a}, kvrules {b}"]
        )


def probes(interface: Any) -> list[tuple[str, dict[str, Any], dict[str, Any], Any]]:
    """Inputs beyond the shared cases that exercise behaviour the cases do not reach."""
    base = {
        "max_model_len": 4096,
        "original_max_model_len": 4096,
        "max_num_batched_tokens": 2048,
        "max_num_encoder_input_tokens": 2048,
        "max_in_flight_tokens": 2048,
        "block_size": 16,
        "disable_hybrid_kv_cache_manager": True,
        "num_gpu_blocks_override": None,
        "mamba_cache_mode": "none",
        "decode_context_parallel_size": 1,
        "prefill_context_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "tensor_parallel_size": 1,
    }
    attn = {"num_kv_heads": 2, "head_size": 64, "dtype": "float32"}
    mixed_blocks = {
        "available_memory": 1 << 28,
        "layers": {
            "layer_1": {"type": "full_attention", "block_size": 64, **attn},
            "layer_2": {"type": "sliding_window", "block_size": 16, "sliding_window": 1024, **attn},
        },
    }
    dsv4 = json.loads((DEFAULT_CASES / "c5c_dsv4_like.json").read_text()) if DEFAULT_CASES.is_dir() else None
    # 32 x 2 x 128 x 4 = 32768 = 16 x 4 x 128 x 4; one hidden-state token is 3 x 1000 x 4 bytes
    hidden_state = {
        "available_memory": 1 << 28,
        "layers": {
            "layer_1": {"type": "full_attention", "block_size": 32, **attn},
            "layer_2": {
                "type": "sliding_window",
                "block_size": 16,
                "sliding_window": 1024,
                **dict(attn, num_kv_heads=4),
            },
            "cache_only_layers.0": {
                "type": "hidden_state_cache",
                "block_size": 16,
                "num_kv_heads": 3,
                "head_size": 1000,
                "dtype": "float32",
            },
        },
    }
    out: list[tuple[str, dict[str, Any], dict[str, Any], Any]] = [
        ("hybrid manager disabled, full bs 64 + sliding window bs 16", mixed_blocks, base, None),
        (
            "hidden-state layer beside full bs 32 + sliding window bs 16",
            hidden_state,
            dict(base, disable_hybrid_kv_cache_manager=False),
            None,
        ),
    ]
    if dsv4 is not None:
        dsv4_settings = dict(base, disable_hybrid_kv_cache_manager=False, max_model_len=dsv4["max_model_len"])
        dsv4_settings["original_max_model_len"] = dsv4["max_model_len"]
        mtp = {"method": "mtp", "num_speculative_tokens": 1, "num_nextn_predict_layers": 1}
        out.append(("c5c (DeepSeek-V4-like) with MTP speculation", dsv4, dsv4_settings, mtp))
        ngram = {"method": "ngram", "num_speculative_tokens": 3}
        out.append(("c5c (DeepSeek-V4-like) with n-gram speculation", dsv4, dsv4_settings, ngram))
    return out


def case_names(cases_dir: Path) -> list[str]:
    """Every case with a vLLM 0.28 answer (``NAME.vllm.json``), sub-folders included
    (``quantized/c10a_...``), as paths relative to ``cases_dir`` without the suffix."""
    suffix = ".vllm.json"
    return sorted(p.relative_to(cases_dir).as_posix()[: -len(suffix)] for p in cases_dir.rglob(f"*{suffix}"))


def run_cases(cases_dir: Path, strategies: str) -> int:
    parity = Parity(strategies)
    names = case_names(cases_dir)
    print(
        f"vLLM {parity.kv_vllm.vllm_version()} vs kvrules install({parity.strategies!r}); {len(names)} cases"
    )
    differing = 0
    for name in names:
        case = json.loads((cases_dir / f"{name}.json").read_text())
        settings = json.loads((cases_dir / f"{name}.vllm.json").read_text())["settings"]
        notes = [f"get_kv_cache_configs: {n}" for n in parity.configs(case, settings)]
        summary = outcome_text(parity.last)
        notes += [f"get_kv_cache_groups: {n}" for n in parity.groups(case, settings)]
        notes += [f"unify_kv_cache_spec_page_size: {n}" for n in parity.unify(case)]
        differing += bool(notes)
        print(f"  {name:52s} {'DIFFERS' if notes else 'same'}  ({summary})")
        for note in notes:
            print(f"      - {note}")
    print(f"cases: {len(names) - differing} identical, {differing} differing (of {len(names)})")
    print("probes beyond the shared cases (get_kv_cache_groups, then get_kv_cache_configs):")
    for label, case, settings, speculative in probes(parity.interface):
        notes = parity.groups(case, settings, speculative) + parity.configs(case, settings, speculative)
        print(f"  {label}: {'same' if not notes else 'DIFFERS'}")
        for note in notes:
            print(f"      - {note}")
    return 1 if differing else 0


def compare_capacity(cases_dir: Path, strategies: str) -> int:
    """Groups, blocks and capacity (vLLM's own ``get_kv_cache_capacity``) with and without kvrules."""
    parity = Parity(strategies)
    vllm = f"vLLM {parity.kv_vllm.vllm_version()}"
    print(f"{'case':46s} {vllm:>38s}   kvrules install({parity.strategies!r})")
    for name in case_names(cases_dir):
        case = json.loads((cases_dir / f"{name}.json").read_text())
        settings = json.loads((cases_dir / f"{name}.vllm.json").read_text())["settings"]
        cells = []
        for installed in (False, True):
            parity.kv_vllm.uninstall()
            if installed:
                parity.kv_vllm.install(parity.strategies)
            cfg = stand_in_config(settings)
            workers = vllm_specs(case, parity.interface)
            memory = memory_of(case, len(workers))
            result = attempt(partial(parity.utils.get_kv_cache_configs, cfg, workers, memory))
            parity.kv_vllm.uninstall()
            if result[0] == "error":
                cells.append(f"{type(result[1]).__name__}")
                continue
            first = result[1][0]
            tokens, _ = parity.utils.get_kv_cache_capacity(cfg, first)
            cells.append(f"{len(first.kv_cache_groups)} groups, {first.num_blocks} blocks, {tokens} tokens")
        print(f"{name:46s} {cells[0]:>38s}   {cells[1]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cases = sub.add_parser("cases")
    cases.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    cases.add_argument("--strategies", default="vllm")
    cases.add_argument("--brief", action="store_true", help="only groups, blocks and capacity side by side")
    hf = sub.add_parser("hf-cache")
    hf.add_argument("home", type=Path)
    hf.add_argument("--from", dest="source", type=Path, default=HF_CACHE_FILES)
    args = parser.parse_args(argv)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.command == "hf-cache":
        print("hf-cache:", ", ".join(write_hf_cache(args.home, args.source)))
        return 0
    if args.brief:
        return compare_capacity(args.cases, args.strategies)
    return run_cases(args.cases, args.strategies)


if __name__ == "__main__":
    sys.exit(main())
