"""Defects the round-2 long campaign (``benchmarks/fuzz.py``, seed 0) found, replayed as they
were drawn."""

from __future__ import annotations

from fuzz.plugin_cases import PLUGIN, run_plugin_case


def test_a_spec_type_answering_wrongly_in_the_waste_report_is_blamed_on_it() -> None:
    # plugins:1219, shrunk: a third-party spec type inside a uniform-type group answers
    # blocks_per_request() = None on its second call, which the waste report made outside the
    # asker; the bare SpecAnswerError named the spec type but no plugin
    case = {
        "base": "vllm",
        "faults": [{"point": "spec-type", "method": "blocks_per_request", "fault": "none", "call": 2}],
        "model": "uniform",
    }
    outcome = run_plugin_case(case)
    assert (outcome.kind, outcome.error_type) == ("error", "PluginError"), outcome
    assert f"plugin {PLUGIN!r}" in outcome.detail
    assert "blocks_per_request" in outcome.detail
