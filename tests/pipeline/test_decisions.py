"""Decision records: returned as data and emitted as structlog events (architecture §4)."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import msgspec
import pytest
from structlog.testing import capture_logs

from kvrules import Decision, EngineConfig, FullAttentionSpec, MambaSpec, Planner
from kvrules.decisions import DecisionLog
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


def test_a_decision_is_an_immutable_value_and_copies_share_its_mappings() -> None:
    d = Decision("unify", "mamba-pad", "applied", "a.0", "padded", {"x": 1}, None, 64)
    e = d.for_layer("a.1")
    assert e.before is d.before and e.layer == "a.1" and e.padding_bytes == 64
    assert e == Decision("unify", "mamba-pad", "applied", "a.1", "padded", {"x": 1}, None, 64)
    assert e != d and d != ("unify", "mamba-pad")
    assert pickle.loads(pickle.dumps(e)) == e and copy.deepcopy(e) == e and copy.copy(e) == e
    assert repr(e).startswith("Decision(stage='unify', rule='mamba-pad', outcome='applied', layer='a.1'")
    assert hash(Decision("route", "r", "declined", None, "no")) == hash(
        Decision("route", "r", "declined", None, "no")
    )
    with pytest.raises(AttributeError):
        e.layer = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del e.reason  # type: ignore[misc]
    match e:
        case Decision("unify", rule, "applied", layer):
            assert (rule, layer) == ("mamba-pad", "a.1")
        case _:
            pytest.fail("a decision matches by its fields")


def test_a_plan_holds_its_decisions_as_a_tuple_from_construction() -> None:
    """The pipeline hands the plan its log's records at construction: the same tuple on every
    read, equal whether someone listened to the log or not, kept through pickle, deepcopy and
    ``msgspec.structs.replace``."""
    specs = {f"l.{i}": spec for i in range(40) for spec in [list(SPECS.values())[i % 3]]}
    plan = Planner("vllm").plan(specs, 1 << 30, CFG)
    made = plan.decisions
    assert type(made) is tuple and plan.decisions is made and len(made) > 40
    assert all(type(d) is Decision for d in made) and type(plan.specs) is dict
    text = plan.to_json()
    with capture_logs():  # someone listens: every record is emitted as it is made
        listened = Planner("vllm").plan(specs, 1 << 30, CFG)
    assert listened.decisions == made and listened == plan and text == listened.to_json()
    assert pickle.loads(pickle.dumps(plan)) == plan and copy.deepcopy(plan) == plan
    replaced = msgspec.structs.replace(plan, strategy_set="other")
    assert replaced.decisions is made and replaced.strategy_set == "other"
    given = Plan(**{name: getattr(plan, name) for name in Plan.__struct_fields__})
    assert given.decisions is made and given == plan
    with pytest.raises(AttributeError):
        plan.decisions = ()  # type: ignore[misc]


def test_a_decision_log_copies_answers_for_layers_in_order() -> None:
    d = Decision("unify", "mamba-pad", "applied", "a.0", "padded", None, None, 64)
    log = DecisionLog()
    log.add(d)
    log.add_for_layer([d], "b.0")
    log.add_for_layer([d, d], "b.1")
    log.add_for_layer([], "b.2")
    assert [x.layer for x in log.entries] == ["a.0", "b.0", "b.1", "b.1"]
    assert log.decisions() == (d, d.for_layer("b.0"), d.for_layer("b.1"), d.for_layer("b.1"))
    assert log.items == list(log.decisions())
