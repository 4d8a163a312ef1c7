"""Plan schema ``kvrules.plan/v2``: every strategy set writes schema-valid plans (D10), v2's page
sizes beside the specs, ``from_dict`` reading v1 and v2 and refusing tampered sizes, and the JSON
text (msgspec's, UTF-8) decoding to ``to_dict()``."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from kvrules import (
    CapacityError,
    Decision,
    EngineConfig,
    FullAttentionSpec,
    MambaSpec,
    ModelFileError,
    Plan,
    Planner,
    PluginError,
    get_plugin_manager,
)
from kvrules.cli.hf import with_model_decisions
from kvrules.decisions import DecisionLog
from kvrules.examples import example_names, load_example
from kvrules.plan import SCHEMA, SCHEMAS, page_sizes, plan_json_schema
from kvrules.plugin.presets import DEFAULT_SET, presets_of

GiB = 1 << 30
PLANS = Path(__file__).parent.parent / "data" / "plans"
V2 = plan_json_schema(version=2)
#: the strategy sets: the default and every preset (built-in or registered by a plugin)
STRATEGY_SETS = [DEFAULT_SET, *presets_of(get_plugin_manager().registries.rules)]
PLANNERS = {name: Planner(name) for name in STRATEGY_SETS}
SIZE_KEYS = {"page_size_bytes", "real_page_size_bytes", "padding_bytes"}


def plan_example(name: str, strategies: str) -> Plan:
    """The example planned as ``kvrules plan --example NAME`` plans it (HF model decisions first)."""
    model = load_example(name)
    plan = PLANNERS[strategies].plan(
        model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine)
    )
    return with_model_decisions(plan, model)


def hybrid(layers: int = 64) -> dict[str, Any]:
    """Mamba and full attention (with draft layers): page padding, unification and many decisions."""
    mamba = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
    draft = FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16")
    specs: dict[str, Any] = {f"model.layers.{i}": full if i % 4 == 3 else mamba for i in range(layers)}
    specs.update({f"draft.layers.{i}": draft for i in range(layers // 8)})
    return specs


def two_workers() -> Plan:
    specs = hybrid()
    names = list(specs)
    workers = [{n: specs[n] for n in names[:40]}, {n: specs[n] for n in names[40:]}]
    return PLANNERS[DEFAULT_SET].plan(workers, [8 * GiB, 6 * GiB], EngineConfig(max_model_len=4096))


def assert_json_forms(plan: Plan) -> dict[str, Any]:
    """``to_json`` (compact and indented) is ``to_dict`` as JSON, valid v2, and round-trips."""
    expected = plan.to_dict()
    text = plan.to_json()
    assert "\n" not in text and json.loads(plan.to_json(indent=2)) == expected
    document = json.loads(text)
    assert document == expected
    jsonschema.validate(document, V2)
    again = Plan.from_dict(document)
    assert again.to_dict() == expected
    assert again.specs == plan.specs and again.groups == plan.groups
    assert again.decisions == plan.decisions
    return document


# -- every strategy set, every example: schema-valid v2 ----------------------------------------
#: (example, set) pairs that set refuses, and why: the refusal is the engine's answer, not a defect
REFUSED = {
    # the example gives exactly the bytes of one 131,072-token request; vLLM 0.33 holds one block
    # back for the null block, so it is one block short (vLLM 0.28 plans it)
    ("llama3-8b", "vllm-0.33"): CapacityError,
}


@pytest.mark.parametrize("strategies", STRATEGY_SETS)
@pytest.mark.parametrize("name", example_names())
def test_every_example_plan_is_valid_v2_and_round_trips(name: str, strategies: str) -> None:
    refused = REFUSED.get((name, strategies))
    if refused is not None:
        with pytest.raises(refused, match=r"null block|largest max_model_len"):
            plan_example(name, strategies)
        return
    assert_json_forms(plan_example(name, strategies))


@pytest.mark.parametrize("name", example_names())
def test_cli_default_json_validates(capsys: pytest.CaptureFixture[str], name: str) -> None:
    """D10 as the campaign found it: ``kvrules plan --example NAME --json`` (the default set)."""
    code, out, err = run_cli(capsys, "plan", "--example", name, "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, V2)
    assert Plan.from_dict(document).to_dict() == document


def test_a_multi_worker_plan_is_valid_v2() -> None:
    document = assert_json_forms(two_workers())
    assert len(document["workers"]) == 2
    assert [len(w["groups"]) for w in document["workers"]] == [len(document["groups"])] * 2


def test_plan_json_schema_ships_both_versions() -> None:
    assert plan_json_schema() == V2 and V2["$id"] == SCHEMA == "kvrules.plan/v2"
    assert plan_json_schema(version=1)["$id"] == SCHEMAS[1] == "kvrules.plan/v1"
    for bad in (3, 0, True, "2"):
        with pytest.raises(ModelFileError, match=r"plan_json_schema\(version=.*one of 1, 2"):
            plan_json_schema(version=bad)  # type: ignore[arg-type]


# -- D10: model-level figures live in details, before/after are spec summaries -----------------
@pytest.mark.parametrize(
    ("name", "rule"),
    [("swa30-full20", "min-padding"), ("gpt-oss-20b-draft8", "speculator-group")],
)
def test_grouping_rules_record_their_figures_in_details(name: str, rule: str) -> None:
    plan = plan_example(name, DEFAULT_SET)
    applied = [d for d in plan.decisions if d.rule == rule and d.outcome == "applied"]
    assert all(d.before is None and d.after is None for d in applied)
    [decision] = [d for d in applied if d.details is not None]
    details = decision.details
    assert details is not None and set(details) == {"vllm", "chosen", "alternatives", "over_cap"}
    assert details["chosen"]["padding_slots"] == 0 < details["vllm"]["padding_slots"]
    assert {"group_size", "request_bytes", "binding_worker"} <= set(details["chosen"])
    assert all("requested_size" in a for a in details["alternatives"])


def test_draft_aware_align_records_both_alignments_in_details() -> None:
    plan = plan_example("hf-qwen3-coder-next", DEFAULT_SET)
    [decision] = [d for d in plan.decisions if d.rule == "draft-aware-align" and d.details is not None]
    assert decision.before is None and decision.after is None and decision.layer is None
    assert decision.details is not None and set(decision.details) == {"vllm", "chosen"}
    assert decision.details["chosen"]["request_bytes"] <= decision.details["vllm"]["request_bytes"]


def test_decision_log_refuses_figures_that_are_not_spec_summaries() -> None:
    log = DecisionLog()
    with pytest.raises(
        PluginError, match=r"rule 'my-rule' .* before = \{'group_size': 4\} has no key 'spec_type'"
    ):
        log.record("group", "my-rule", "applied", "r", before={"group_size": 4})
    with pytest.raises(PluginError, match=r"after = .* has block_size = True"):
        summary = {"spec_type": "mamba", "block_size": True, "page_size_bytes": 8, "page_size_padded": None}
        log.record("group", "my-rule", "applied", "r", after=summary)
    with pytest.raises(PluginError, match=r"details = \[1\] is not allowed: a mapping"):
        log.record("group", "my-rule", "applied", "r", details=[1])  # type: ignore[arg-type]
    spec = FullAttentionSpec(16, num_kv_heads=1, head_size=64, dtype="bfloat16")
    made = log.record("group", "my-rule", "applied", "r", before=spec.summary(), details={"n": 1})
    assert log.items == [made] and made.details == {"n": 1}


def test_details_reach_the_record_the_log_and_the_json() -> None:
    with capture_logs() as logs:
        log = DecisionLog()
        made = log.record("group", "my-rule", "applied", "why", details={"groups": 3, "sizes": [1, 2]})
        plain = log.record("group", "other", "declined", "why not")
    events = [e for e in logs if e["event"] == "kvrules.decision"]
    assert [{k: v for k, v in e.items() if k not in ("event", "log_level")} for e in events] == [
        made.to_dict(),
        plain.to_dict(),
    ]
    assert made.to_dict()["details"] == {"groups": 3, "sizes": [1, 2]}
    assert "details" not in plain.to_dict()  # optional: written only when set
    assert Decision.from_dict(made.to_dict()) == made and Decision.from_dict(plain.to_dict()) == plain


# -- v2 sizes --------------------------------------------------------------------------------
def test_sizes_sit_beside_the_specs_and_follow_them() -> None:
    plan = plan_example("issue-43626", "vllm")
    document = plan.to_dict()
    assert document["spec_sizes"].keys() == document["specs"].keys()
    for name, spec in plan.specs.items():
        sizes = document["spec_sizes"][name]
        assert sizes == page_sizes(spec)
        assert sizes["page_size_bytes"] == sizes["real_page_size_bytes"] + sizes["padding_bytes"]
        assert SIZE_KEYS.isdisjoint(document["specs"][name])  # specs stay model-file forms
    mamba = {n: s for n, s in document["spec_sizes"].items() if plan.specs[n].type_name == "mamba"}
    # vLLM pads every Mamba page (1,163,264 B of state) to the draft's page, 2,326,528 B
    assert {tuple(s.values()) for s in mamba.values()} == {(2_326_528, 1_163_264, 1_163_264)}
    for group, spec in zip(document["groups"], (g.spec for g in plan.groups), strict=True):
        assert {k: group[k] for k in SIZE_KEYS} == page_sizes(spec)


def test_real_page_size_counts_quantisation_scales() -> None:
    """``real_page_size_bytes`` is the page before padding: KV plus the per-token-head scales."""
    spec = FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="int8", kv_quant_mode="INT8_PER_TOKEN_HEAD"
    )
    plan = PLANNERS["vllm"].plan({"a": spec}, GiB, EngineConfig(max_model_len=4096))
    sizes = plan.to_dict()["spec_sizes"]["a"]
    assert sizes["real_page_size_bytes"] == spec.unpadded_page_size_bytes > spec.real_page_size_bytes
    assert sizes["real_page_size_bytes"] == 16 * 8 * 2 * (128 + 4)  # K and V, int8, one fp32 scale each
    assert sizes["padding_bytes"] == 0


# -- reading v1 ------------------------------------------------------------------------------
def read_plan(name: str) -> dict[str, Any]:
    return dict(json.loads((PLANS / name).read_text(encoding="utf-8")))


def test_v1_documents_are_read_and_written_back_as_v2() -> None:
    document = read_plan("gemma3-27b-vllm.v1.json")
    jsonschema.validate(document, plan_json_schema(version=1))
    plan = Plan.from_dict(document)
    again = plan.to_dict()
    assert again["schema"] == SCHEMA
    jsonschema.validate(again, V2)
    assert plan.to_dict() == plan_example("gemma3-27b", "vllm").to_dict()
    for key in ("specs", "workers", "decisions", "num_blocks", "capacity_tokens"):
        assert again[key] == document[key]
    # 0.3 adds the waste report's scale_bytes (0 here: bf16 pages hold no scales); the rest as read
    waste = again["waste"]
    assert waste.pop("scale_bytes") == 0 and all(w.pop("scale_bytes") == 0 for w in waste["workers"])
    assert waste == document["waste"]


def test_a_kvrules_0_1_document_with_figures_in_before_after_is_still_read() -> None:
    """kvrules 0.1 wrote min-padding's statistics into before/after (D10); they are kept as read."""
    document = read_plan("swa30-full20-default.v1.json")
    plan = Plan.from_dict(document)
    [decision] = [d for d in plan.decisions if d.rule == "min-padding" and d.outcome == "applied"]
    assert decision.details is None and decision.after is not None
    assert decision.after["group_size"] == 10 and decision.after["padding_slots"] == 0
    assert plan.groups == plan_example("swa30-full20", DEFAULT_SET).groups


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(spec_sizes={}), "spec_sizes is not part of schema 'kvrules.plan/v1'"),
        (lambda d: d["groups"][1].update(padding_bytes=0), r"groups\[1\].padding_bytes is not part"),
        (lambda d: d["decisions"][2].update(details={}), r"decisions\[2\].details is not part"),
    ],
)
def test_a_v1_document_with_v2_keys_is_refused(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    document = read_plan("gemma3-27b-vllm.v1.json")
    change(document)
    with pytest.raises(ModelFileError, match=message):
        Plan.from_dict(document)


# -- tampered or malformed documents -----------------------------------------------------------
def first_layer(d: dict[str, Any]) -> str:
    return next(iter(d["specs"]))


TAMPERED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "group page",
        lambda d: d["groups"][0].update(page_size_bytes=1),
        r"groups\[0\].page_size_bytes = 1 does not match",
    ),
    (
        "group padding",
        lambda d: d["groups"][0].update(padding_bytes=7),
        r"groups\[0\].padding_bytes = 7 does not match",
    ),
    (
        "group size missing",
        lambda d: d["groups"][0].pop("real_page_size_bytes"),
        r"groups\[0\].real_page_size_bytes is missing",
    ),
    (
        "layer page",
        lambda d: d["spec_sizes"][first_layer(d)].update(real_page_size_bytes=3),
        r"spec_sizes\['model.layers.0'\].real_page_size_bytes = 3 does not match",
    ),
    (
        "size as float",
        lambda d: d["groups"][0].update(padding_bytes=float(d["groups"][0]["padding_bytes"])),
        "does not match",
    ),
    ("size as bool", lambda d: d["spec_sizes"][first_layer(d)].update(padding_bytes=False), "does not match"),
    (
        "layer missing",
        lambda d: d["spec_sizes"].pop(first_layer(d)),
        r"spec_sizes\['model.layers.0'\] is missing",
    ),
    (
        "stray layer",
        lambda d: d["spec_sizes"].update(ghost=d["spec_sizes"][first_layer(d)]),
        r"spec_sizes\['ghost'\] is not a layer",
    ),
    ("spec_sizes missing", lambda d: d.pop("spec_sizes"), "the key 'spec_sizes' is missing"),
    (
        "allocated bytes",
        lambda d: d["workers"][0].update(allocated_bytes=1),
        r"workers\[0\].allocated_bytes = 1 does not match",
    ),
    ("waste total", lambda d: d["waste"].update(real_bytes=5), "waste.real_bytes = 5 does not match"),
    (
        "efficiency",
        lambda d: d["waste"]["workers"][0].update(efficiency=1.0),
        r"waste.workers\[0\].efficiency = 1.0 does not match",
    ),
]


@pytest.mark.parametrize(("change", "message"), [t[1:] for t in TAMPERED], ids=[t[0] for t in TAMPERED])
def test_a_tampered_v2_document_is_refused(change: Callable[[dict[str, Any]], None], message: str) -> None:
    document = json.loads(two_workers().to_json())
    Plan.from_dict(copy.deepcopy(document))  # the untouched document reads
    change(document)
    with pytest.raises(ModelFileError, match=message):
        Plan.from_dict(document)


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("not an object", lambda d: [d], r"plan = \[.* is not allowed: expected `object`, got `array`"),
    (
        "unknown schema",
        lambda d: {**d, "schema": "kvrules.plan/v9"},
        "schema = 'kvrules.plan/v9' is not allowed: one of",
    ),
    (
        "workers not a list",
        lambda d: {**d, "workers": 5},
        "workers = 5 is not allowed: expected `array`, got `int`",
    ),
    (
        "negative tensor",
        lambda d: d["workers"][0]["tensors"][0].update(size=-5) or d,
        r"tensors\[0\].size = -5",
    ),
    (
        "tensor name",
        lambda d: d["workers"][0]["tensors"][0].update(shared_by=[0]) or d,
        r"shared_by\[0\] = 0",
    ),
    (
        "worker groups",
        lambda d: (d["workers"][0]["groups"].pop(), d)[1],
        r"workers\[0\].groups has \d+ entries for \d+ groups",
    ),
    (
        "stray worker layer",
        lambda d: d["workers"][0]["groups"][0].append("ghost") or d,
        r"workers\[0\].groups\[0\] names layer 'ghost', which the group does not hold",
    ),
    (
        "decision stage",
        lambda d: d["decisions"][0].update(stage="cook") or d,
        r"decisions\[0\].stage = 'cook'",
    ),
    ("decision layer", lambda d: d["decisions"][0].update(layer=7) or d, r"decisions\[0\].layer = 7"),
    (
        "decision details",
        lambda d: d["decisions"][0].update(details=[1]) or d,
        r"decisions\[0\].details = \[1\]",
    ),
    ("concurrency", lambda d: {**d, "max_concurrency": "many"}, "max_concurrency = 'many'"),
    ("eagle flag", lambda d: d["groups"][0].update(is_eagle_group=1) or d, r"groups\[0\].is_eagle_group = 1"),
    ("num_blocks", lambda d: {**d, "num_blocks": 10**400}, "num_blocks = <int of about 401 digits>"),
    (
        "config",
        lambda d: {**d, "config": None},
        "config = None is not allowed: expected `object`, got `null`",
    ),
]


@pytest.mark.parametrize(("change", "message"), [t[1:] for t in MALFORMED], ids=[t[0] for t in MALFORMED])
def test_a_malformed_document_is_a_model_file_error(
    change: Callable[[dict[str, Any]], Any], message: str
) -> None:
    document = change(json.loads(two_workers().to_json()))
    with pytest.raises(ModelFileError, match=message):
        Plan.from_dict(document)


# -- the JSON text -----------------------------------------------------------------------------
def test_to_json_writes_every_decision_of_a_large_plan() -> None:
    plan = PLANNERS[DEFAULT_SET].plan(hybrid(6000), 64 * GiB, EngineConfig(max_model_len=4096))
    assert len(plan.decisions) > 6000  # every decision, declined ones too
    assert json.loads(plan.to_json()) == plan.to_dict()


def test_indent_is_an_option_checked_like_any_argument() -> None:
    plan = PLANNERS["vllm"].plan(hybrid(8), GiB, EngineConfig(max_model_len=4096))
    assert "\n" not in plan.to_json() and plan.to_json(indent=0).startswith('{"schema": ')
    assert plan.to_json(indent=2).startswith('{\n  "schema": ')
    for bad in (-1, 1.5, "  ", True):
        with pytest.raises(ModelFileError, match=r"to_json\(indent=...\) = .* is not allowed"):
            plan.to_json(indent=bad)  # type: ignore[arg-type]


#: layer names JSON writes as they are, and ones it escapes (quote, backslash, control, non-ASCII)
PLAIN_NAME = st.text(st.sampled_from("ab.0_-: /[]{},"), min_size=1, max_size=6)
ODD_NAME = st.text(st.sampled_from('ab"\\\t\x7f\x00é\u2603\U0001f600'), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(st.one_of(PLAIN_NAME, ODD_NAME), min_size=2, max_size=12, unique=True),
    strategies=st.sampled_from(["vllm", DEFAULT_SET]),
    split=st.integers(min_value=0, max_value=12),
)
def test_json_text_is_json_dumps_whatever_the_layer_names(
    names: list[str], strategies: str, split: int
) -> None:
    """Names that need escaping or not, in specs, groups, tensors and decisions, compact and
    indented, mixed across workers: the text decodes to ``to_dict()``, non-ASCII as UTF-8."""
    kinds = hybrid(8)
    mamba, full = kinds["model.layers.0"], kinds["model.layers.3"]
    specs = {name: full if i % 3 == 2 else mamba for i, name in enumerate(names)}
    cut = max(1, min(split, len(names) - 1))
    workers = [dict(list(specs.items())[:cut]), dict(list(specs.items())[cut:])]
    config = EngineConfig(max_model_len=4096)
    for given_specs in (specs, workers):
        plan = PLANNERS[strategies].plan(given_specs, [8 * GiB] * (1 if given_specs is specs else 2), config)
        expected = plan.to_dict()
        assert json.loads(plan.to_json()) == expected == json.loads(plan.to_json(indent=1))
        assert Plan.from_json(plan.to_json()).to_json() == plan.to_json()


def test_layer_names_that_need_escaping_survive() -> None:
    """Layer names JSON escapes (quotes, backslashes, control characters) read back as they were."""
    specs = hybrid(4)
    mamba, full = specs["model.layers.0"], specs["model.layers.3"]
    names = ['quote"layer": null', "back\\slash", "ünï\u2603", "tab\tnew\nline"]
    plan = PLANNERS["vllm"].plan(
        {**dict.fromkeys(names, mamba), "attn": full}, GiB, EngineConfig(max_model_len=4096)
    )
    assert [d.layer for d in plan.decisions if d.rule == "mamba-pad"] == names
    assert_json_forms(plan)
