"""Specs aligned for one strategy set and planned with another (issue 26 item 3): the front door
aligns with the planner's set when it is told it (the command line always tells it), and the
planner warns, naming both sets, when the specs were aligned for a set whose aligners may choose
otherwise."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli as run

from kvrules import EngineConfig, Planner
from kvrules.hf import model_from_hf
from kvrules.pipeline.aligned import AlignedSpecs, Alignment, AlignmentWarning

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hf"
FALCON = str(CORPUS / "tiiuae__Falcon-H1-0.5B-Instruct")
QWEN_DRAFT = str(CORPUS / "Qwen__Qwen3-0.6B")
LLAMA = str(CORPUS / "meta-llama__Llama-3.1-8B")
MEMORY = 20 << 30


def plan_quietly(strategies: Any, specs: Any, engine: dict[str, Any]) -> tuple[Any, list[str]]:
    """The plan, and the :class:`AlignmentWarning` messages it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = Planner(strategies).plan(specs, MEMORY, EngineConfig.from_dict(engine))
    return plan, [str(w.message) for w in caught if issubclass(w.category, AlignmentWarning)]


def alignment_decisions(plan: Any) -> list[str]:
    return [d.reason for d in plan.decisions if d.stage == "merge" and d.rule == "alignment"]


def test_the_default_set_and_vllm_align_falcon_h1_with_a_draft_differently() -> None:
    # why the check matters: draft-aware-align (default only) chooses another block than hybrid-align
    default = model_from_hf(FALCON, QWEN_DRAFT)
    vllm = model_from_hf(FALCON, QWEN_DRAFT, strategies="vllm")
    assert default.hf is not None and vllm.hf is not None
    assert default.hf.block_size != vllm.hf.block_size
    assert default.hf.strategy_set == "default" and vllm.hf.strategy_set == "vllm-0.28"


def test_planning_default_aligned_specs_with_vllm_warns_naming_both_sets() -> None:
    model = model_from_hf(FALCON, QWEN_DRAFT)
    plan, said = plan_quietly("vllm", model.worker_specs(), model.engine)
    assert len(said) == 1
    assert "aligned for strategy set 'default' (draft-aware-align chose the block sizes)" in said[0]
    assert "this plan uses 'vllm-0.28' (aligners hybrid-align)" in said[0]
    assert "strategies='vllm-0.28'" in said[0]  # the fix
    assert alignment_decisions(plan) == [said[0][0].upper() + said[0][1:] + "."]
    assert next(d for d in plan.decisions if d.rule == "alignment").outcome == "failed"


def test_planning_vllm_aligned_specs_with_default_warns() -> None:
    model = model_from_hf(FALCON, QWEN_DRAFT, strategies="vllm")
    _, said = plan_quietly(None, model.specs, model.engine)
    assert len(said) == 1
    assert "aligned for strategy set 'vllm-0.28'" in said[0] and "uses 'default'" in said[0]


@pytest.mark.parametrize(("built", "planned"), [(None, None), ("vllm", "vllm"), ("vllm", "vllm-0.33")])
def test_the_same_aligners_do_not_warn(built: Any, planned: Any) -> None:
    # vllm-0.28 and vllm-0.33 ask the same aligner, so their block sizes agree
    model = model_from_hf(FALCON, QWEN_DRAFT, strategies=built)
    plan, said = plan_quietly(planned, model.specs, model.engine)
    assert said == [] and alignment_decisions(plan) == []


def test_when_no_aligner_acted_a_set_with_the_same_answers_does_not_warn() -> None:
    # a dense model: both of default's aligners declined, so vllm's hybrid-align declines too
    model = model_from_hf(LLAMA)
    assert model.specs.alignment == Alignment("default", ("draft-aware-align", "hybrid-align"), None)  # type: ignore[attr-defined]
    _, said = plan_quietly("vllm", model.specs, {"max_model_len": 4096})
    assert said == []


def test_a_plain_copy_of_the_specs_is_planned_without_the_check() -> None:
    model = model_from_hf(FALCON, QWEN_DRAFT)
    _, said = plan_quietly("vllm", dict(model.specs), model.engine)
    assert said == []


def test_every_worker_keeps_the_record() -> None:
    model = model_from_hf(FALCON, QWEN_DRAFT)
    names = list(model.specs)
    model.workers = [names[: len(names) // 2], names[len(names) // 2 :]]
    workers = model.worker_specs()
    assert all(isinstance(w, AlignedSpecs) and w.alignment == model.specs.alignment for w in workers)  # type: ignore[attr-defined]
    _, said = plan_quietly("vllm", workers, model.engine)
    assert len(said) == 1


@pytest.mark.parametrize(
    ("alignment", "aligners", "same"),
    [
        (Alignment("a", ("x", "y"), "y"), ["x", "y"], True),
        (Alignment("a", ("x", "y"), "y"), ["y"], True),  # x declined: y still acts first
        (Alignment("a", ("x",), "x"), ["y", "x"], False),  # y never asked: its answer is unknown
        (Alignment("a", ("x",), "x"), ["y"], False),
        (Alignment("a", ("x", "y"), None), ["y"], True),  # every one declined
        (Alignment("a", ("x",), None), ["x", "z"], False),
        (Alignment("a", (), None), [], True),
        (Alignment("a", ("x",), "x"), [], False),
    ],
)
def test_same_choice(alignment: Alignment, aligners: list[str], same: bool) -> None:
    assert alignment.same_choice(aligners) is same


def test_the_command_line_aligns_with_the_chosen_set(capsys: pytest.CaptureFixture[str]) -> None:
    vllm = model_from_hf(FALCON, QWEN_DRAFT, strategies="vllm")
    assert vllm.hf is not None
    args = ("--hf-config", FALCON, "--draft", QWEN_DRAFT, "--memory", "20GiB", "--json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlignmentWarning)
        code, out, err = run(capsys, "plan", *args, "--strategies", "vllm")
    assert code == 0, err
    data = json.loads(out)
    assert data["strategy_set"] == "vllm-0.28"
    assert not any(d["rule"] == "alignment" for d in data["decisions"])
    expected, _ = plan_quietly("vllm", vllm.specs, vllm.engine)
    mixed, _ = plan_quietly("vllm", model_from_hf(FALCON, QWEN_DRAFT).specs, vllm.engine)
    blocks = sorted(g["spec"]["block_size"] for g in data["groups"])
    assert blocks == sorted(g.spec.block_size for g in expected.groups)
    assert blocks != sorted(g.spec.block_size for g in mixed.groups)
    assert data["num_blocks"] == expected.num_blocks


def test_compare_plans_each_set_with_its_own_alignment(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--hf-config", FALCON, "--draft", QWEN_DRAFT, "--memory", "20GiB", "--json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlignmentWarning)
        code, out, err = run(capsys, "compare", *args)
    assert code == 0, err
    assert "alignment" not in out
