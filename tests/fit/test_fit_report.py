"""``kvrules.fit()`` end to end: the KV budget is what weights and runtime leave, the embedded plan
is the planner's own plan of that budget, the nearest settings are planned for real, and the
report matches its schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

import kvrules
from kvrules import ConfigError, EngineConfig, Planner
from kvrules.hf.build import model_from_hf
from kvrules.hf.options import HFOptions
from kvrules.plan import plan_json_schema
from kvrules.sizing.fit import FitOptions, FitReport, fit, fit_json_schema

HF = Path(__file__).parent.parent / "data" / "hf"
NEXT = HF / "Qwen__Qwen3-Next-80B-A3B-Instruct"
LLAMA = HF / "meta-llama__Llama-3.1-8B"
GIB = 1 << 30


@pytest.fixture(scope="module")
def next_on_h100() -> FitReport:
    return fit(NEXT, gpu="H100", max_model_len=32768)


def validate(report: FitReport) -> None:
    plan_schema = plan_json_schema()
    registry: Registry = Registry().with_resource("kvrules.plan/v2", Resource.from_contents(plan_schema))
    jsonschema.Draft202012Validator(fit_json_schema(), registry=registry).validate(report.to_dict())


def test_80b_does_not_fit_one_80gb_gpu_and_tp4_is_the_nearest(next_on_h100: FitReport) -> None:
    report = next_on_h100
    assert not report.fits and report.kv_cache_bytes_per_gpu < 0
    assert all(not a.fits and a.plan is None for a in report.answers)
    changes = [a.change for a in report.nearest]
    # fp8 KV and a shorter length cannot make room for bf16 weights
    assert changes == ["tensor-parallel size 4", "fp8 weights at tensor-parallel size 2"]
    tp4, fp8 = report.nearest[0].report, report.nearest[1].report
    assert tp4.fits and tp4.options.tp == 4
    tp2 = fit(NEXT, gpu="H100", max_model_len=32768, tp=2)
    assert not tp2.fits and tp2.weights_bytes_per_gpu > tp2.usable_bytes  # the smallest that fits is 4
    assert fp8.fits and fp8.options.tp == 2 and fp8.params.scheme.describe().startswith("fp8")
    assert fp8.weights_bytes_per_gpu < 0.55 * tp2.weights_bytes_per_gpu  # 1 byte a weight, scales apart
    validate(report)


def test_where_no_tp_up_to_8_fits_pipeline_stages_at_tp8_are_the_nearest() -> None:
    # DeepSeek-V3's fp8 checkpoint (~629 GiB) leaves no KV cache on 8 GPUs of 80 GB; 16 fit
    report = fit(HF / "deepseek-ai__DeepSeek-V3", gpu="H100")
    tp8 = fit(HF / "deepseek-ai__DeepSeek-V3", gpu="H100", tp=8)
    assert not report.fits and not tp8.fits
    assert tp8.weights_bytes_per_gpu + tp8.runtime.total_bytes > tp8.usable_bytes
    changes = [a.change for a in report.nearest]
    assert changes[0] == "tensor-parallel size 8, pipeline-parallel size 2 (16 GPUs)", changes
    pp2 = report.nearest[0].report
    assert pp2.fits and (pp2.options.tp, pp2.options.pp) == (8, 2)
    # two stages halve the fullest rank's weights, give or take the embedding and the head
    assert 0.45 * tp8.weights_bytes_per_gpu < pp2.weights_bytes_per_gpu < 0.6 * tp8.weights_bytes_per_gpu
    validate(report)


def test_a_quantised_checkpoint_is_not_offered_fp8_weights() -> None:
    report = fit(HF / "openai__gpt-oss-120b", gpu="L40S", allow_assumed_sizes=True, max_model_len=8192)
    assert not report.fits
    assert not [a for a in report.nearest if a.change.startswith("fp8 weights")]


def test_the_budget_is_what_weights_and_runtime_leave(next_on_h100: FitReport) -> None:
    tp4 = next_on_h100.nearest[0].report
    usable = int(tp4.gpu.total_bytes * 0.9)
    assert tp4.usable_bytes == usable
    assert tp4.kv_cache_bytes_per_gpu == usable - tp4.weights_bytes_per_gpu - tp4.runtime.total_bytes


def test_each_answer_is_the_planners_own_plan_of_the_budget(next_on_h100: FitReport) -> None:
    tp4 = next_on_h100.nearest[0].report
    for answer in tp4.answers:
        model = model_from_hf(
            NEXT, None, HFOptions(tensor_parallel_size=4, max_model_len=32768), strategies=answer.strategy_set
        )
        config = EngineConfig.from_dict({**model.engine, "max_num_batched_tokens": 8192})
        expected = Planner(answer.strategy_set).plan(model.specs, tp4.kv_cache_bytes_per_gpu, config)
        assert answer.plan is not None and model.hf is not None
        got, want = answer.plan.to_dict(), expected.to_dict()
        # the front door's decisions (architecture, alignment) come first, as `kvrules plan` shows them
        assert got.pop("decisions") == [d.to_dict() for d in model.hf.decisions] + want.pop("decisions")
        assert got == want
        assert answer.max_concurrency == expected.max_concurrency
        assert answer.max_model_len_fits == 262144  # the model's own limit: more fits at TP 4


def test_overhead_replaces_the_estimate() -> None:
    report = fit(LLAMA, gpu_memory="48GiB", max_model_len=8192, overhead="2GiB", strategies=("vllm-0.33",))
    assert report.runtime.components == {"overhead": 2 * GIB} and not report.runtime.estimated
    assert report.kv_cache_bytes_per_gpu == int(48 * GIB * 0.9) - report.weights_bytes_per_gpu - 2 * GIB
    assert "estimate" not in " ".join(report.notes)


def test_a_shorter_length_fp8_and_no_draft_are_offered_when_they_fit() -> None:
    # Llama-3.1-8B: about 15 GiB of weights; one 131,072-token request needs 16 GiB of bf16 KV
    # cache (32 layers x 8 KV heads x 128 x 2 x 2 B per token) or 8 GiB in fp8; 30 GiB x 0.9
    # leaves about 11 GiB after 1 GiB of overhead: fp8 fits, bf16 does not
    report = fit(LLAMA, gpu_memory="30GiB", overhead="1GiB", strategies=("vllm-0.33",))
    assert not report.fits
    longest = report.answers[0].max_model_len_fits
    assert 0 < longest < 131072
    changes = {a.change: a.report for a in report.nearest}
    assert f"max_model_len {longest:,}" in changes and changes[f"max_model_len {longest:,}"].fits
    assert changes["fp8 KV cache"].options.kv_cache_dtype == "fp8" and changes["fp8 KV cache"].fits
    validate(report)


def test_a_draft_adds_its_weights_on_the_last_stage_and_no_draft_is_an_alternative() -> None:
    draft = HF / "meta-llama__Llama-3.2-1B"
    alone = fit(LLAMA, gpu_memory="24GiB", max_model_len=8192, overhead="1GiB", strategies=("vllm-0.33",))
    both = fit(
        LLAMA, draft, gpu_memory="24GiB", max_model_len=8192, overhead="1GiB", strategies=("vllm-0.33",)
    )
    assert both.draft_params is not None
    assert both.weights_bytes_per_gpu > alone.weights_bytes_per_gpu
    assert both.kv_cache_bytes_per_gpu < alone.kv_cache_bytes_per_gpu
    staged = fit(
        LLAMA, draft, gpu_memory="24GiB", pp=2, max_model_len=8192, overhead="1GiB", strategies=("vllm-0.33",)
    )
    first, last = staged.weights
    assert last > first  # the draft sits on the last pipeline stage
    plan = staged.answers[0].plan
    assert plan is not None and len(plan.workers) == 2
    drafts = [n for n in plan.workers[-1].layer_names() if n.startswith("draft")]
    assert drafts and not [n for n in plan.workers[0].layer_names() if n.startswith("draft")]


def test_a_trimmed_config_is_refused_unless_asked() -> None:
    trimmed = HF / "Qwen__Qwen3-8B"  # keeps the KV fields, leaves out intermediate_size
    with pytest.raises(ConfigError, match=r"intermediate_size.*a guess"):
        fit(trimmed, gpu="H100")
    report = fit(trimmed, gpu="H100", allow_assumed_sizes=True, max_model_len=8192, strategies=("vllm-0.33",))
    assert any("intermediate_size" in n for n in report.notes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "either gpu=NAME"),
        ({"gpu": "H100", "gpu_memory": "80GiB"}, "either gpu=NAME"),
        ({"gpu": "Voodoo-5"}, "not in kvrules' catalog"),
        ({"gpu": "H100", "gpu_memory_utilization": 1.5}, r"in \(0, 1\]"),
        ({"gpu": "H100", "tp": 0}, "positive integer"),
        ({"gpu": "H100", "kv_cache_dtype": "int3"}, "kv_cache_dtype"),
        ({"gpu": "H100", "strategies": ()}, "at least one strategy set"),
        ({"gpu": "H100", "mxfp4_backend": "cutlass"}, "mxfp4_backend='cutlass' must be auto or one of"),
    ],
)
def test_bad_options_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fit(LLAMA, **kwargs)  # type: ignore[arg-type]


def test_the_package_level_function_and_options_object_agree() -> None:
    options = FitOptions(gpu="L40S", max_model_len=8192, strategies=("vllm-0.33",))
    a = kvrules.fit(LLAMA, options=options)
    b = fit(LLAMA, None, options)
    assert a.to_dict() == b.to_dict()


def test_the_served_parameters_hold_the_vision_tower_vllm_loads() -> None:
    """Qwen3.5-0.8B (tests/fit/test_fit_hybrid_counts.py derives its parts by hand): language
    model 752,393,024, MTP 20,452,864, vision tower 100,592,896. vLLM loads the language model
    and the tower; the MTP layers only when they are the draft."""
    qwen35 = HF / "Qwen__Qwen3.5-0.8B"
    assert fit(qwen35, gpu="H100").to_dict()["parameters_served"] == 752_393_024 + 100_592_896
    with_mtp = fit(qwen35, draft="mtp", gpu="H100").to_dict()["parameters_served"]
    assert with_mtp == 752_393_024 + 100_592_896 + 20_452_864


def _gpt_oss_120b() -> dict[str, Any]:
    config: dict[str, Any] = json.loads((HF / "openai__gpt-oss-120b" / "config.json").read_text())
    # the stored file keeps only the KV fields; the published config.json has intermediate_size 2880
    return {**config, "intermediate_size": 2880}


def test_mxfp4_experts_are_sized_for_the_backend_vllm_picks_on_the_gpu() -> None:
    def weights(**kwargs: Any) -> tuple[int, str, FitReport]:
        report = fit(_gpt_oss_120b(), max_model_len=8192, strategies=("vllm-0.33",), **kwargs)
        return report.weights_bytes_per_gpu, report.options.mxfp4_backend, report

    hopper, hopper_backend, _ = weights(gpu="H100")
    ampere, ampere_backend, report = weights(gpu="A100-80GB")
    assert (hopper_backend, ampere_backend) == ("triton", "marlin")
    # Marlin pads I 2880 -> 2944 and H 2880 -> 3072; triton keeps the scales twice and the biases
    # in float32: 4,608 experts x (14,431,744 - 14,060,160) bytes more for Marlin
    # (tests/fit/test_fit_shard.py works out both)
    assert ampere - hopper == 4608 * (14_431_744 - 14_060_160)
    assert any("marlin MoE backend" in n and "A100-80GB" in n for n in report.notes)
    assert report.to_dict()["settings"]["mxfp4_backend"] == "marlin"
    validate(report)
    asked, backend, _ = weights(gpu="H100", mxfp4_backend="marlin")
    assert (asked, backend) == (ampere, "marlin")
    by_size, backend, _ = weights(gpu_memory="80GiB")
    assert (by_size, backend) == (hopper, "triton")


def test_a_checkpoint_without_mxfp4_says_nothing_of_the_backend() -> None:
    report = fit(LLAMA, gpu="A100-80GB", max_model_len=8192, strategies=("vllm-0.33",))
    assert not any("mxfp4" in n for n in report.notes)
