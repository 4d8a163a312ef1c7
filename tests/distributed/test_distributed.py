"""plan_across_ranks on 4 CPU processes (torch.multiprocessing, gloo on 127.0.0.1).

One spawn of 4 ranks runs every scenario in order (see tests/dist_workers.py); the tests read
what each rank reported. Ranks join with a 20 s timeout and the parent gives up after 90 s, so
a hang fails the suite instead of blocking it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import dist_workers
import pytest

import kvrules
from kvrules import EngineConfig, KVRulesPluginManager, Planner, get_plugin_manager
from kvrules.distributed import plan_digest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)

WORLD = 4
SCENARIOS = [
    "pipeline",
    "worker-plan",
    "contradiction",
    "bad-input",
    "settings-differ",
    "plugins-differ",
    "absent-rank",
]
DEADLINE = 90.0


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each of the 4 ranks reported, scenario by scenario."""
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ranks")
    context = mp.start_processes(
        dist_workers.run,
        args=(WORLD, dist_workers.free_port(), str(out), SCENARIOS),
        nprocs=WORLD,
        join=False,
        start_method=dist_workers.start_method(),
    )
    deadline = time.monotonic() + DEADLINE
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the ranks did not finish within {DEADLINE} s (a hang)")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def single_process_plan() -> kvrules.Plan:
    config = EngineConfig.from_dict(dist_workers.CONFIG)
    workers = dist_workers.stages(48, WORLD)
    return Planner(plugin_manager=get_plugin_manager(autoload=False)).plan(
        workers, list(dist_workers.MEMORY[:WORLD]), config
    )


def test_every_rank_holds_the_identical_plan(ranks: list[dict[str, Any]]) -> None:
    results = [r["pipeline"] for r in ranks]
    assert all("error" not in r for r in results), results
    digests = {r["digest"] for r in results}
    assert len(digests) == 1
    assert {r["extra"]["distributed"]["digest"] for r in results} == digests
    assert {r["extra"]["distributed"]["ranks"] for r in results} == {WORLD}
    local = single_process_plan()
    assert digests == {plan_digest(local)}  # the same plan as one process makes


def test_the_smallest_num_blocks_everywhere(ranks: list[dict[str, Any]]) -> None:
    own = ranks[0]["pipeline"]["own"]
    assert len(set(own)) == WORLD  # different memory per rank gives different block counts
    for rank, report in enumerate(ranks):
        worker = report["worker-plan"]
        assert worker["num_blocks"] == min(own)
        assert worker["own"] == own[rank]
        assert worker["tensors"] > 0


def test_a_contradicting_rank_fails_every_rank_alike(ranks: list[dict[str, Any]]) -> None:
    results = [r["contradiction"] for r in ranks]
    assert {r["error"] for r in results} == {"GroupingError"}
    messages = {r["message"] for r in results}
    assert len(messages) == 1
    (message,) = messages
    assert message.startswith(f"planning across {WORLD} ranks (worker i is rank i): ")
    assert "layer 'model.layers.0.self_attn' has different specs on worker 0" in message
    assert f"and worker {WORLD - 1}" in message
    assert max(r["seconds"] for r in results) < 20  # well within the group's timeout


def test_invalid_input_on_one_rank_fails_every_rank_alike(ranks: list[dict[str, Any]]) -> None:
    results = [r["bad-input"] for r in ranks]
    assert {r["error"] for r in results} == {"ConfigError"}
    assert len({r["message"] for r in results}) == 1
    assert results[0]["message"].startswith("rank 2: local_specs must map layer names to specs, got list")


def test_different_settings_or_rules_fail_every_rank_alike(ranks: list[dict[str, Any]]) -> None:
    settings = [r["settings-differ"] for r in ranks]
    assert {r["error"] for r in settings} == {"ConfigError"} and len({r["message"] for r in settings}) == 1
    assert "max_model_len: rank 0 has 32768, rank 1 has 16384" in settings[0]["message"]
    rules = [r["plugins-differ"] for r in ranks]
    assert {r["error"] for r in rules} == {"PluginError"} and len({r["message"] for r in rules}) == 1
    assert "only on rank 0: block-scale (plugin 'page-unify'" in rules[0]["message"]


def test_an_absent_rank_fails_the_others_within_the_timeout(ranks: list[dict[str, Any]]) -> None:
    present = [r["absent-rank"] for r in ranks[:-1]]
    assert ranks[-1]["absent-rank"] == {"skipped": True}
    assert {r["error"] for r in present} == {"DistributedPlanError"}
    assert all("gathering every rank's specs failed" in r["message"] for r in present)
    assert max(r["seconds"] for r in present) < 15


def test_without_an_initialised_group_it_says_what_to_do() -> None:
    from kvrules.distributed import plan_across_ranks

    if dist.is_initialized():  # pragma: no cover - never in this suite
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(kvrules.ConfigError, match="init_process_group"):
        plan_across_ranks({}, 0, EngineConfig(max_model_len=16))


@pytest.mark.kvrules_pm(autoload=False)
def test_digest_is_stable_and_sensitive(kvrules_pm: KVRulesPluginManager) -> None:
    plan = single_process_plan()
    assert plan_digest(plan) == plan_digest(single_process_plan())
    smaller = Planner(plugin_manager=kvrules_pm).plan(
        dist_workers.stages(48, WORLD), [1 << 30] * WORLD, EngineConfig.from_dict(dist_workers.CONFIG)
    )
    assert plan_digest(smaller) != plan_digest(plan)


@pytest.mark.kvrules_pm(autoload=False)
def test_spec_payloads_round_trip_and_deduplicate(kvrules_pm: KVRulesPluginManager) -> None:
    from kvrules.distributed import decode_specs, encode_specs

    specs = dist_workers.model(60)
    payload = encode_specs(specs)
    assert len(payload["table"]) == 2  # two distinct specs for 60 layers
    json.dumps(payload)
    cache: dict[str, Any] = {}
    types = kvrules_pm.registries.spec_types.classes
    assert decode_specs(payload, types, cache) == specs
    assert len(cache) == 2


@pytest.mark.kvrules_pm(autoload=False)
def test_every_rank_builds_the_same_error_from_the_gathered_payloads(
    kvrules_pm: KVRulesPluginManager,
) -> None:
    """The local half of the protocol, without processes: what every rank computes from the gather."""
    from kvrules.distributed import _check_agreement, _payload, _plan_gathered

    planner = Planner(plugin_manager=kvrules_pm)
    config = EngineConfig.from_dict(dist_workers.CONFIG)
    stages = dist_workers.stages(48, 2)
    payloads = [{"ok": _payload(stage, 1 << 20, config, planner)} for stage in stages]
    with pytest.raises(kvrules.CapacityError) as info:
        _plan_gathered(payloads, planner)
    assert str(info.value).startswith("planning across 2 ranks (worker i is rank i): To serve one request")
    assert info.value.available_bytes == 1 << 20 and info.value.needed_bytes > 0
    other = {"ok": _payload(stages[1], 1 << 30, EngineConfig(max_model_len=1024), planner)}
    with pytest.raises(kvrules.ConfigError, match="max_model_len: rank 0 has 32768, rank 1 has 1024"):
        _check_agreement([payloads[0]["ok"], other["ok"]])
    failed = [payloads[0], {"error": ["SpecError", "layer 'x': unknown spec type 'kpool_tail'"]}]
    with pytest.raises(kvrules.SpecError, match=r"^rank 1: layer 'x': unknown spec type 'kpool_tail'$"):
        _plan_gathered(failed, planner)


def test_disagreement_is_described_alike_on_every_rank() -> None:
    from kvrules.distributed import DistributedPlanError, _raise_gathered

    mixed = [
        {"rank": 0, "digest": "", "error": ["SpecError", "unknown spec type 'kpool_tail'"]},
        {"rank": 1, "digest": "ab" * 32, "error": None},
    ]
    with pytest.raises(DistributedPlanError, match=r"1 of 2 ranks could not plan \(ranks 1 could\)"):
        _raise_gathered(mixed, 2)
    differ = [{"rank": r, "digest": d * 64, "error": None} for r, d in enumerate("aab")]
    with pytest.raises(DistributedPlanError, match=r"ranks 0, 1: aaaaaaaaaaaa; ranks 2: bbbbbbbbbbbb"):
        _raise_gathered(differ, 3)
