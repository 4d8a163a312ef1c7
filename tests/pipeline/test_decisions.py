"""Decision records: returned as data and emitted as structlog events (architecture §4)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError

import pytest
from structlog.testing import capture_logs

from kvrules import Decision, EngineConfig, FullAttentionSpec, MambaSpec, Planner
from kvrules.decisions import DecisionLog, DeferredDecisions
from kvrules.plan import Plan

SPECS = {
    "model.layers.0.linear_attn": MambaSpec(
        16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"], page_size_padded=16_384
    ),
    "model.layers.1.self_attn": FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16"),
    "drafter.model.layers.0.self_attn": FullAttentionSpec(
        16, num_kv_heads=4, head_size=128, dtype="bfloat16"
    ),
}
CFG = EngineConfig(max_model_len=4096)


def test_decision_events_carry_the_record_keys_flat() -> None:
    with capture_logs() as logs:
        plan = Planner("vllm").plan(SPECS, 1 << 30, CFG)
    events = [e for e in logs if e["event"] == "kvrules.decision"]
    mamba = [e for e in events if e["rule"] == "mamba-pad" and e["outcome"] == "applied"]
    assert mamba == [
        {
            "event": "kvrules.decision",
            "log_level": "debug",
            "stage": "unify",
            "rule": "mamba-pad",
            "outcome": "applied",
            "layer": "model.layers.0.linear_attn",
            "reason": "Mamba page 16384 bytes is fixed by its state shapes; pad it to 32768 bytes "
            "(+16384 bytes) and keep block_size 16.",
            "before": {
                "spec_type": "mamba",
                "block_size": 16,
                "page_size_bytes": 16384,
                "page_size_padded": 16384,
            },
            "after": {
                "spec_type": "mamba",
                "block_size": 16,
                "page_size_bytes": 32768,
                "page_size_padded": 32768,
            },
            "padding_bytes": 16384,
        }
    ]
    declined = [e for e in events if e["outcome"] == "declined" and e["layer"] == "model.layers.1.self_attn"]
    assert [e["rule"] for e in declined] == ["mamba-pad"]
    assert [e for e in events] == [
        dict(event="kvrules.decision", log_level="debug", **d.to_dict()) for d in plan.decisions
    ]
    finished = [e for e in logs if e["event"] == "kvrules.plan.finished"]
    assert len(finished) == 1 and finished[0]["log_level"] == "info"
    assert finished[0]["num_blocks"] == plan.num_blocks and finished[0]["route"] == "unified-page"


def test_every_stage_records_decisions_with_valid_fields() -> None:
    plan = Planner("vllm").plan(SPECS, 1 << 30, CFG)
    stages = {d.stage for d in plan.decisions}
    assert {"route", "unify", "group", "layout", "capacity"} <= stages
    for d in plan.decisions:
        assert isinstance(d, Decision)
        assert d.outcome in ("applied", "declined", "failed")
        assert d.reason and d.reason[0].isalnum()
        assert Decision.from_dict(d.to_dict()) == d


def test_unconfigured_structlog_is_not_flooded() -> None:
    code = (
        "import kvrules\n"
        "s = {f'l{i}': kvrules.FullAttentionSpec(16, num_kv_heads=4 + 4 * (i % 2), head_size=128, dtype='bfloat16')"
        " for i in range(200)}\n"
        "s['m'] = kvrules.MambaSpec(16, [[3, 64]], ['bfloat16'])\n"
        "p = kvrules.plan(s, 1 << 30, kvrules.EngineConfig(max_model_len=1024))\n"
        "print('DECISIONS', len(p.decisions))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    [line] = out.stdout.splitlines()  # our own print only: kvrules writes nothing by itself
    assert line.startswith("DECISIONS ") and int(line.split()[1]) > 200  # decisions are still data


def test_a_decision_is_an_immutable_value_and_copies_share_its_body() -> None:
    d = Decision("unify", "mamba-pad", "applied", "a.0", "padded", {"x": 1}, None, 64)
    e = d.for_layer("a.1")
    assert e.body is d.body and e.layer == "a.1" and e.padding_bytes == 64
    assert e == Decision("unify", "mamba-pad", "applied", "a.1", "padded", {"x": 1}, None, 64)
    assert e != d and d != ("unify", "mamba-pad")
    assert pickle.loads(pickle.dumps(e)) == e and copy.deepcopy(e) == e and copy.copy(e) == e
    assert repr(e).startswith("Decision(stage='unify', rule='mamba-pad', outcome='applied', layer='a.1'")
    assert hash(Decision("route", "r", "declined", None, "no")) == hash(
        Decision("route", "r", "declined", None, "no")
    )
    with pytest.raises(FrozenInstanceError):
        e.layer = "b"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del e.reason  # type: ignore[misc]
    match e:
        case Decision("unify", rule, "applied", layer):
            assert (rule, layer) == ("mamba-pad", "a.1")
        case _:
            pytest.fail("a decision matches by its fields")


def test_a_plans_decisions_are_made_when_first_read() -> None:
    """The pipeline hands the plan its log's records; per-layer copies become Decision objects on
    the first read of ``plan.decisions`` (then kept), the same records a listening plan made one
    by one, and the JSON is written from the records without making them."""
    specs = {f"l.{i}": spec for i in range(40) for spec in [list(SPECS.values())[i % 3]]}
    plan = Planner("vllm").plan(specs, 1 << 30, CFG)
    stored = plan.__dict__["decisions"]
    assert isinstance(stored, DeferredDecisions) and len(stored) > 40
    text = plan.to_json()
    assert plan.__dict__["decisions"] is stored  # writing the JSON made no records
    made = plan.decisions
    assert type(made) is tuple and plan.decisions is made and len(made) == len(stored)
    assert plan.__dict__["decisions"] is stored and stored.made() is made  # columns kept
    assert plan.to_json() == text  # written from the columns again, read or not
    with capture_logs():  # someone listens: every record is made and emitted at once
        listened = Planner("vllm").plan(specs, 1 << 30, CFG)
    assert type(listened.__dict__["decisions"]) is DeferredDecisions
    assert listened.decisions == made and listened == plan
    assert text == listened.to_json()
    again = pickle.loads(pickle.dumps(Planner("vllm").plan(specs, 1 << 30, CFG)))
    assert type(again.__dict__["decisions"]) is tuple and again == plan
    assert copy.deepcopy(Planner("vllm").plan(specs, 1 << 30, CFG)) == plan
    replaced = dataclasses.replace(plan, strategy_set="other")
    assert replaced.decisions == made and replaced.strategy_set == "other"
    given = Plan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(Plan)})
    assert given.decisions is made and given == plan


def test_a_decision_log_copies_answers_for_layers_in_order() -> None:
    d = Decision("unify", "mamba-pad", "applied", "a.0", "padded", None, None, 64)
    log = DecisionLog()
    log.add(d)
    mark = log.mark()
    log.add_for_layer([d], "b.0")
    log.add_for_layer([d, d], "b.1")
    log.add_for_layer([], "b.2")
    assert len(log.entries) == 4 and len(log.deferred()) == 4
    assert all(x.body is d.body for x in log.entries)
    assert [x.layer for x in log.since(mark)] == ["b.0", "b.1", "b.1"]
    assert log.decisions() == (d, d.for_layer("b.0"), d.for_layer("b.1"), d.for_layer("b.1"))
    assert log.items == list(log.decisions())
