"""Many distinct spec objects under fuzz (issue 25 R1): every layer has its own spec object.

A model file whose every layer has its own spec entry, or a Hugging Face config stretched to
thousands of layers, is what users really send; the shared-object scale benchmark never saw the
quadratic cost R1 found there. A case is data::

    {"via": "model", "example": "gemma3-27b", "layers": 2000, "vary": False,
     "strategies": "vllm", "max_model_len": 4096, "memory_per_layer": 1073741824}
    {"via": "hf", "example": "gemma-3-27b", "layers": 1500, ...}

:func:`run_distinct_case` builds the specs (reading the model file back from disk, or through
the HF front door), plans them in this process and checks every invariant
(:mod:`fuzz.invariants`). :func:`work_count` counts the lines kvrules executes for a call and
:class:`CountingLayers` the entries it reads from the layer table: the measures the CI test
compares across two sizes instead of timing.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable, ItemsView, Iterator, KeysView, ValuesView
from pathlib import Path
from types import FrameType
from typing import Any

import kvrules
from fuzz.cli_cases import hf_files, hf_names, model_doc, model_names
from fuzz.draw import Draw
from fuzz.invariants import InvariantBroken, check_plan_invariants
from fuzz.outcome import BROKEN, HANG, HANG_SECONDS, OK, Outcome, from_exception, time_limit

Case = dict[str, Any]

#: layer counts a campaign input draws from (each layer its own spec object)
LAYERS = (1, 2, 3, 7, 64, 255, 500, 1000, 2000, 4000)
LENGTHS = (1, 16, 4096, 32768, 131072)
#: bytes of memory per layer: roomy, tight, and too little for one request
PER_LAYER = (1 << 30, 64 << 20, 4 << 20, 1 << 16)


def distinct_case(draw: Draw) -> Case:
    """A model (model file or HF config) of many layers, one spec object per layer."""
    hf = draw.chance(40)
    return {
        "via": "hf" if hf else "model",
        "example": draw.choice(hf_names() if hf else model_names()),
        "layers": draw.choice(LAYERS),
        "vary": draw.chance(25),
        "strategies": draw.choice(("vllm", "default")),
        "max_model_len": draw.choice(LENGTHS),
        "memory_per_layer": draw.choice(PER_LAYER),
    }


def _stretched(values: list[Any], layers: int) -> list[Any]:
    return [copy.deepcopy(values[i % len(values)]) for i in range(layers)]


def model_document(case: Case) -> dict[str, Any]:
    """The model file of ``case``: the example's layers repeated to ``layers`` entries, each its
    own JSON object (``vary``: sliding windows and block sizes differ from layer to layer)."""
    doc = model_doc(case["example"])
    source = list(doc["layers"].values())
    layers = {}
    for index, spec in enumerate(_stretched(source, case["layers"])):
        if case["vary"] and isinstance(spec, dict):
            if "sliding_window" in spec:
                spec["sliding_window"] = 64 * (1 + index % 5)
        layers[f"model.layers.{index}.mixer"] = spec
    return {"layers": layers, "engine": {"max_model_len": case["max_model_len"]}}


def hf_config(case: Case) -> dict[str, Any]:
    """The HF config of ``case``: the example's config with ``layers`` hidden layers (per-layer
    lists and pattern strings repeated to that length; ``vary``: a few layer types flipped)."""
    config, _, _ = hf_files(case["example"])
    inner = config.get("text_config", config)
    old = int(inner.get("num_hidden_layers", 1))
    for key, value in list(inner.items()):
        if isinstance(value, list) and len(value) == old and old:
            inner[key] = _stretched(value, case["layers"])
        elif isinstance(value, str) and len(value) == old and old > 1:
            inner[key] = "".join(_stretched(list(value), case["layers"]))
    inner["num_hidden_layers"] = case["layers"]
    if case["vary"] and isinstance(inner.get("layer_types"), list):
        kinds = sorted(set(map(str, inner["layer_types"])))
        inner["layer_types"] = [kinds[i % 7 % len(kinds)] for i in range(case["layers"])]
    return config


def build(case: Case, work: Path) -> tuple[Any, Any]:
    """``(specs, memory)`` of ``case``: a model file read back from ``work``, or HF specs."""
    memory = case["memory_per_layer"] * max(1, case["layers"])
    if case["via"] == "model":
        path = work / "distinct.json"
        path.write_text(json.dumps(model_document(case)), encoding="utf-8")
        return kvrules.model.load_model_file(path).worker_specs(), memory
    from kvrules.hf import specs_from_hf

    specs, _ = specs_from_hf(hf_config(case))
    return specs, memory


def run_distinct_case(case: Case, *, seconds: float = HANG_SECONDS) -> Outcome:
    """Build ``case`` and plan it in this process; check every invariant. Never raises.

    A hang is more than ``seconds`` of this process's CPU time (the wall clock of a loaded
    machine may run slower; it stops the input only at six times the limit)."""
    started = time.process_time()
    with tempfile.TemporaryDirectory(prefix="kvrules-distinct-") as folder:
        try:
            with time_limit(6 * seconds):
                specs, memory = build(case, Path(folder))
                config = kvrules.EngineConfig(max_model_len=case["max_model_len"])
                plan = kvrules.Planner(case["strategies"]).plan(specs, memory, config)
                check_plan_invariants(plan, specs, memory)
        except InvariantBroken as broken:
            return Outcome(BROKEN, str(broken)[:400], "InvariantBroken", broken.invariant)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            return from_exception(exc)
    used = time.process_time() - started
    if used > seconds:
        return Outcome(HANG, f"{used:.1f} s of CPU for {case['layers']} layers", "Hang", "cpu")
    return Outcome(OK)


def _smaller(case: Case) -> Iterator[Case]:
    if case["layers"] > 1:
        yield {**case, "layers": max(1, case["layers"] // 2)}
    if case["vary"]:
        yield {**case, "vary": False}
    if case["strategies"] != "vllm":
        yield {**case, "strategies": "vllm"}


def shrink_distinct(case: Case, run: Callable[[Case], Outcome], seconds: float = 20) -> tuple[Case, Outcome]:
    """Fewer layers (halving), no variation, the vllm set, while it fails for the same cause."""
    target = run(case)
    deadline = time.monotonic() + seconds
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in _smaller(case):
            if run(candidate).cause == target.cause:
                case, progress = candidate, True
                break
    return case, run(case)


def show_distinct(case: Case) -> str:
    """``case`` as one JSON line."""
    return json.dumps(case, sort_keys=True)


class CountingLayers(dict[Any, Any]):
    """A layer table (a plain ``dict`` to kvrules) that counts the entries read from it: every
    key its iteration yields, through ``keys()``, ``values()`` and ``items()`` views too. A scan
    of the table per distinct spec object (issue 25 R1, done in C, invisible to
    :func:`work_count`) shows as a square here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0

    def __iter__(self) -> Iterator[Any]:
        for key in dict.__iter__(self):
            self.reads += 1
            yield key

    def keys(self) -> KeysView[Any]:  # type: ignore[override]
        return KeysView(self)

    def values(self) -> ValuesView[Any]:  # type: ignore[override]
        return ValuesView(self)

    def items(self) -> ItemsView[Any, Any]:  # type: ignore[override]
        return ItemsView(self)


def _is_kvrules(frame: FrameType) -> bool:
    return f"{Path(kvrules.__file__).parent}" in frame.f_code.co_filename


def work_count(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result and the number of lines of kvrules' own code it executed (a
    deterministic measure of work: a loop over all layers inside a loop over all layers shows
    as a square, whatever the machine's speed)."""
    count = 0

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return line

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return line if event == "call" and _is_kvrules(frame) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        result = call()
    finally:
        sys.settrace(previous)
    return result, count


__all__ = [
    "CountingLayers",
    "distinct_case",
    "hf_config",
    "model_document",
    "run_distinct_case",
    "show_distinct",
    "shrink_distinct",
    "work_count",
]
