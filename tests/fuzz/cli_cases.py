"""Model files and Hugging Face configs under fuzz, through the command line.

A model-file case mutates a shipped example (``kvrules/examples/*.json``); a Hugging Face case
mutates a shipped ``config.json`` (and its draft's); both add hostile flags. Cases are data::

    {"kind": "model", "example": "llama3-8b", "toml": False, "ops": [...], "command": "plan",
     "flags": ["--memory", "1GiB", ...]}
    {"kind": "hf", "example": "jamba-v0.1", "ops": [...], "draft_ops": [...], "command": "plan",
     "flags": [...]}

A case may also carry ``"doc"`` (a whole document, after shrinking) instead of an example and ops.
:func:`run_cli_case` writes the files into a work folder and runs ``kvrules`` in a forked child
(:mod:`fuzz.forked`); :func:`shrink_cli` makes a failing case small.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fuzz.draw import Draw
from fuzz.forked import run_cli, warm_up
from fuzz.mutate import ENGINE_KEYS, HF_KEYS, apply, dumps, field_mutation, mutations, paths, shown_op
from fuzz.outcome import Outcome

Case = dict[str, Any]

F = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
#: the smallest model file: what a shrunk reproducer starts from when the example does not matter
TINY = {"layers": {"a": F}, "engine": {"max_model_len": 4096}, "available_memory": "1GiB"}


def _examples() -> Any:
    return resources.files("kvrules") / "examples"


@cache
def model_names() -> tuple[str, ...]:
    """The shipped model-file examples."""
    return tuple(sorted(p.name[: -len(".json")] for p in _examples().iterdir() if p.name.endswith(".json")))


@cache
def hf_names() -> tuple[str, ...]:
    """The shipped Hugging Face examples (folders with a ``config.json``)."""
    return tuple(sorted(p.name for p in (_examples() / "hf").iterdir() if (p / "config.json").is_file()))


@cache
def _read(*parts: str) -> Any:
    node = _examples()
    for part in parts:
        node = node / part
    return json.loads(node.read_text(encoding="utf-8"))


def model_doc(name: str) -> Any:
    """A fresh copy of the model file ``name`` (``tiny``: :data:`TINY`)."""
    return copy.deepcopy(TINY if name == "tiny" else _read(f"{name}.json"))


def hf_files(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(config, draft config or None, example.json)`` of the Hugging Face example ``name``."""
    example = _read("hf", name, "example.json")
    draft = example.get("draft")
    doc = _read("hf", name, draft) if isinstance(draft, str) and draft != "mtp" else None
    return copy.deepcopy(_read("hf", name, "config.json")), copy.deepcopy(doc), example


SIZES = (
    "9" * 400,
    "9" * 400 + "GiB",
    "1e3GiB",
    "-1",
    "0",
    "nan",
    "inf",
    "\u0664\u0660GiB",
    "1.5",
    "",
    "40GiB,40GiB",
    "0.5",
    "18446744073709551616",
    "1GiB",
)
LENGTHS = (
    "9" * 400,
    "0",
    "-1",
    "auto",
    "\u0664\u0660\u0669\u0666",
    "4096.0",
    "1e3",
    "",
    "2147483648",
    "10",
    "9" * 5000,
)
COUNTS = ("0", "-1", "3", "9" * 400, "100000", "1", "x")
COMMON_FLAGS: dict[str, tuple[str, ...]] = {
    "--memory": SIZES,
    "--max-model-len": LENGTHS,
    "--num-gpu-blocks-override": COUNTS,
    "--max-num-batched-tokens": COUNTS,
    "--workers": COUNTS,
    "--strategies": ("vllm", "default", "nope", "vllm,default", ","),
}
SWITCHES = ("--json", "--disable-hybrid-kv-cache-manager")
HF_FLAGS: dict[str, tuple[str, ...]] = {
    "--tp": COUNTS,
    "--block-size": ("0", "16", "9" * 400, "7", "100000"),
    "--mamba-block-size": ("8", "0", "9" * 400, "12"),
    "--num-speculative-tokens": COUNTS,
    "--dtype": ("int8", "bool", "nope", "float32", "bfloat16"),
    "--kv-cache-dtype": ("fp8", "auto", "nvfp4", "fp8_ds_mla", "int8_per_token_head"),
    "--mamba-cache-mode": ("all", "none", "align"),
    "--draft": ("mtp",),
}
OUTPUTS = ("{dir}", "{dir}/missing/plan.json")


def _flags(draw: Draw, table: dict[str, tuple[str, ...]], most: int) -> list[str]:
    out: list[str] = []
    for flag in draw.sample(sorted(table), most):
        out += [flag, draw.choice(table[flag])]
    return out


MILD_FLAGS = (
    [],
    ["--strategies", "vllm"],
    ["--strategies", "default"],
    ["--json"],
    ["--max-model-len", "auto"],
    ["--workers", "2"],
)


def cli_flags(draw: Draw, hf: bool, mild: bool = False) -> list[str]:
    """Hostile command-line flags (often none; ``mild``: at most one ordinary flag)."""
    if mild:
        return list(draw.choice(MILD_FLAGS))
    if draw.chance(40):
        return []
    out = _flags(draw, COMMON_FLAGS, 2)
    if hf:
        out += _flags(draw, HF_FLAGS, 2)
    if draw.chance(20):
        out.append(draw.choice(SWITCHES))
    if draw.chance(5):
        out += ["-o", draw.choice(OUTPUTS)]
    return out


def _with_field(
    draw: Draw, ops: list[dict[str, Any]], keys: tuple[str, ...], mild: bool, big: bool
) -> list[dict[str, Any]]:
    """``ops`` and, a third of the time (never when ``mild``), a targeted ``field`` mutation."""
    if mild or not draw.chance(33):
        return ops
    return [*ops, field_mutation(draw, keys, big)]


def model_case(draw: Draw) -> Case:
    """A mutated model file and hostile flags."""
    mild = draw.chance(30)
    return {
        "kind": "model",
        "example": draw.choice(model_names()),
        "toml": draw.chance(10),
        "ops": _with_field(draw, mutations(draw, 4 - 2 * mild, mild=mild), ENGINE_KEYS, mild, big=False),
        "command": draw.choice(("plan",) * 8 + ("compare", "allocate")),
        "flags": cli_flags(draw, hf=False, mild=mild),
    }


def hf_case(draw: Draw) -> Case:
    """A mutated Hugging Face config (and draft config) and hostile flags."""
    name = draw.choice(hf_names())
    _, draft, _ = hf_files(name)
    mild = draw.chance(30)
    return {
        "kind": "hf",
        "example": name,
        "ops": _with_field(draw, mutations(draw, 3 - mild, mild=mild), HF_KEYS, mild, big=draw.chance(10)),
        "draft_ops": mutations(draw, 2, mild=mild) if draft is not None and draw.chance(30) else [],
        "command": draw.choice(("plan",) * 8 + ("specs", "compare")),
        "flags": cli_flags(draw, hf=True, mild=mild),
    }


# -- running -----------------------------------------------------------------------------------------


def _model_argv(case: Case, work: Path) -> list[str]:
    path = work / ("model.toml" if case.get("toml") else "model.json")
    if "doc" in case:
        data = dumps(case["doc"]).encode("utf-8", "surrogatepass")
    else:
        data = apply(model_doc(case["example"]), case["ops"], toml=bool(case.get("toml")))
    path.write_bytes(data)
    argv = [case["command"], str(path)]
    if case["command"] == "allocate":
        argv += ["--device", "meta"]
    return argv


def _hf_argv(case: Case, work: Path) -> list[str]:
    config, draft, example = hf_files(case["example"])
    folder = work / "hf"
    folder.mkdir(exist_ok=True)
    doc = case["doc"] if "doc" in case else config
    ops = [] if "doc" in case else case["ops"]
    (folder / "config.json").write_bytes(apply(doc, ops))
    argv = [case["command"], "--hf-config", str(folder)]
    if case["command"] != "specs":
        argv += ["--memory", str(example.get("available_memory", ["40GiB"])[0])]
    engine = example.get("engine", {})
    argv += ["--max-model-len", str(engine.get("max_model_len", 4096))]
    names = {
        "kv_cache_dtype": "--kv-cache-dtype",
        "tensor_parallel_size": "--tp",
        "num_speculative_tokens": "--num-speculative-tokens",
    }
    for key, value in example.get("options", {}).items():
        argv += [names[key], str(value)]
    if example.get("draft") == "mtp":
        argv += ["--draft", "mtp"]
    elif draft is not None:
        (work / "hf-draft.json").write_bytes(apply(draft, case.get("draft_ops", [])))
        argv += ["--draft", str(work / "hf-draft.json")]
    return argv


def cli_argv(case: Case, work: Path) -> list[str]:
    """Write ``case``'s files into ``work`` and return the command line (``-o`` added to a
    ``plan`` so that its plan is checked)."""
    argv = _hf_argv(case, work) if case["kind"] == "hf" else _model_argv(case, work)
    flags = [f.replace("{dir}", str(work)) for f in case["flags"]]
    argv += flags
    if case["command"] == "plan" and "-o" not in flags:
        argv += ["-o", str(work / "plan.json")]
    return argv


WARM_UP = (
    ("plan", "--example", "llama3-8b", "-o", "/dev/null"),
    ("plan", "--example", "deepseek-v4-flash", "--json"),
    ("compare", "--example", "swa30-full20"),
    ("allocate", "--example", "llama3-8b", "--device", "meta", "--memory", "1GiB"),
    ("plan", "--example", "hf-qwen3-coder-next"),
    ("specs", "--example", "hf-jamba-v0.1"),
)


def run_cli_case(case: Case, work: Path) -> Outcome:
    """``kvrules`` on ``case`` in a forked child (see :mod:`fuzz.forked`)."""
    warm_up(WARM_UP)
    for stale in ("plan.json",):
        (work / stale).unlink(missing_ok=True)
    return run_cli(cli_argv(case, work))


# -- shrinking and showing ----------------------------------------------------------------------------


def _fewer(case: Case) -> Iterator[Case]:
    """``case`` with one mutation, one flag pair or one setting fewer, or on the tiny model."""
    for key in ("ops", "draft_ops"):
        for index in range(len(case.get(key, []))):
            yield {**case, key: case[key][:index] + case[key][index + 1 :]}
    flags = case["flags"]
    for index in range(len(flags)):
        pair = 2 if flags[index].startswith("--") and flags[index] not in SWITCHES else 1
        if flags[index].startswith("-"):
            yield {**case, "flags": flags[:index] + flags[index + pair :]}
    if case["command"] != "plan":
        yield {**case, "command": "plan"}
    if case["kind"] == "model" and case.get("example") != "tiny" and "doc" not in case:
        yield {**case, "example": "tiny"}
    if case.get("toml"):
        yield {**case, "toml": False}


def _doc_of(case: Case) -> Any:
    """The mutated document of ``case`` when it reads back as JSON equal to what was written."""
    if case["kind"] == "model":
        data = apply(model_doc(case["example"]), case["ops"], toml=bool(case.get("toml")))
        if case.get("toml"):
            return None
    else:
        data = apply(hf_files(case["example"])[0], case["ops"])
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _without(doc: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def _greedy(
    case: Case,
    candidates: Callable[[Case], Iterator[Case]],
    run: Callable[[Case], Outcome],
    target: Outcome,
    deadline: float,
) -> Case:
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in candidates(case):
            if time.monotonic() >= deadline:
                break
            if run(candidate).cause == target.cause:
                case, progress = candidate, True
                break
    return case


def _doc_pass(case: Case, run: Callable[[Case], Outcome], target: Outcome, deadline: float) -> Case:
    """Delete nodes of ``case["doc"]`` one by one while it fails the same way."""
    index = 0
    while time.monotonic() < deadline:
        nodes = paths(case["doc"])
        if index >= len(nodes):
            break
        candidate = {**case, "doc": _without(case["doc"], nodes[index])}
        if run(candidate).cause == target.cause:
            case = candidate
        else:
            index += 1
    return case


def shrink_cli(case: Case, run: Callable[[Case], Outcome], seconds: float = 20) -> tuple[Case, Outcome]:
    """A smaller case failing for the same cause: fewer mutations and flags, then (when the
    mutated file is JSON) fewer nodes of the document itself."""
    target = run(case)
    deadline = time.monotonic() + seconds
    case = _greedy(case, _fewer, run, target, deadline)
    doc = _doc_of(case) if "doc" not in case else None
    if doc is not None:
        flat = {k: v for k, v in case.items() if k not in ("ops", "toml")}
        candidate = {**flat, "doc": doc}
        if run(candidate).cause == target.cause:
            case = _doc_pass(candidate, run, target, deadline)
    return case, run(case)


def show_cli_case(case: Case) -> str:
    """``case`` as JSON for a report (the document itself when it is small)."""
    out = {k: v for k, v in case.items() if k not in ("ops", "draft_ops", "doc")}
    for key in ("ops", "draft_ops"):
        if case.get(key):
            out[key] = [shown_op(op) for op in case[key]]
    if "doc" in case:
        text = dumps(case["doc"])
        out["file"] = text if len(text) <= 700 else text[:680] + f"... ({len(text)} chars)"
    return json.dumps(out, ensure_ascii=True, default=repr)


__all__ = [
    "TINY",
    "cli_argv",
    "hf_case",
    "hf_names",
    "model_case",
    "model_names",
    "run_cli_case",
    "show_cli_case",
    "shrink_cli",
]
