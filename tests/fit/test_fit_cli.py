"""``kvrules fit`` on the command line: the text answer, ``--json`` (schema ``kvrules.fit/v1``),
the strategy sets compared, and clean errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as run

HF = Path(__file__).parent.parent / "data" / "hf"
NEXT = str(HF / "Qwen__Qwen3-Next-80B-A3B-Instruct")
LLAMA = str(HF / "meta-llama__Llama-3.1-8B")


def test_the_80b_text_answer_says_no_and_names_the_nearest_tp(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--hf-config", NEXT, "--gpu", "H100", "--max-model-len", "32768")
    assert code == 0
    assert "kvrules fit: Qwen3NextForCausalLM on H100-SXM-80GB" in out
    assert "does not fit: weights" in out
    assert "nearest settings that fit:" in out and "tensor-parallel size 4" in out
    assert "runtime memory is an estimate" in out


def test_json_has_the_documented_fields_and_embeds_plans(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "fit", "--hf-config", LLAMA, "--gpu", "L40S", "--max-model-len", "8192", "--tp", "2", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "kvrules.fit/v1"
    for key in (
        "parameters",
        "weights_bytes_per_gpu",
        "runtime_bytes_per_gpu",
        "kv_cache_bytes_per_gpu",
        "fits",
        "max_concurrency",
        "max_model_len_fits",
    ):
        assert key in data
    assert data["fits"] and data["settings"]["tp"] == 2
    assert [a["strategy_set"] for a in data["answers"]] == ["default", "vllm-0.33"]
    assert all(a["plan"]["schema"] == "kvrules.plan/v2" for a in data["answers"])


def test_mxfp4_backend_is_auto_unless_told(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fit", "--hf-config", LLAMA, "--gpu", "L40S", "--max-model-len", "8192", "--json"]
    code, out, _ = run(capsys, *base)
    assert code == 0 and json.loads(out)["settings"]["mxfp4_backend"] == "marlin"  # Ada: vLLM's Marlin
    code, out, _ = run(capsys, *base, "--mxfp4-backend", "triton")
    assert code == 0 and json.loads(out)["settings"]["mxfp4_backend"] == "triton"


def test_vllm_line_and_strategies_choose_the_sets(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fit", "--hf-config", LLAMA, "--gpu", "L40S", "--max-model-len", "8192", "--json"]
    code, out, _ = run(capsys, *base, "--vllm-line", "0.28")
    assert code == 0 and [a["strategy_set"] for a in json.loads(out)["answers"]] == ["default", "vllm-0.28"]
    code, out, _ = run(capsys, *base, "--strategies", "vllm-0.33")
    assert code == 0 and [a["strategy_set"] for a in json.loads(out)["answers"]] == ["vllm-0.33"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hf-config", LLAMA], "--gpu"),
        (["--hf-config", LLAMA, "--gpu", "Voodoo-5"], "not in kvrules' catalog"),
        (["--hf-config", LLAMA, "--gpu", "H100", "--gpu-memory-utilization", "2"], "not in (0, 1]"),
        (
            ["--hf-config", LLAMA, "--gpu", "H100", "--vllm-line", "0.33", "--strategies", "default"],
            "not both",
        ),
        (["--hf-config", str(HF / "Qwen__Qwen3-8B"), "--gpu", "H100"], "--allow-assumed-sizes"),
        (["--hf-config", LLAMA, "--gpu", "H100", "--mxfp4-backend", "cutlass"], "invalid choice"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run(capsys, "fit", *args)
    assert code == 2 and message in err and "Traceback" not in err


def test_picture_draws_the_first_plan_that_fits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "fit.svg"
    code, _, _ = run(
        capsys, "fit", "--hf-config", NEXT, "--gpu", "H100", "--max-model-len", "32768", "--picture", str(out)
    )
    assert code == 0 and out.read_text().lstrip().startswith("<?xml")  # TP 4, the nearest setting, drawn


def test_picture_with_nothing_that_fits_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "fit.svg"
    code, _, err = run(capsys, "fit", "--hf-config", NEXT, "--gpu-memory", "4GiB", "--picture", str(out))
    assert code == 2 and "nothing fits" in err and not out.exists()


def test_the_reader_can_be_chosen(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fit", "--hf-config", LLAMA, "--gpu", "L40S", "--max-model-len", "8192", "--json"]
    code, out, _ = run(capsys, *base, "--hf-reader", "builtin")
    assert code == 0
    builtin = json.loads(out)
    notes = " ".join(d["reason"] for d in builtin["answers"][0]["plan"]["decisions"] if d["stage"] == "arch")
    assert "built-in" in notes
    code, _, err = run(capsys, *base, "--hf-reader", "magic")
    assert code == 2 and "--hf-reader" in err


def test_a_model_type_fit_cannot_count_is_named_with_those_it_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "rwkv", "hidden_size": 64, "num_hidden_layers": 2}))
    code, _, err = run(capsys, "fit", "--hf-config", str(config), "--gpu", "H100")
    assert code == 2 and "'rwkv', which kvrules cannot count" in err
    assert "zamba2" in err and "kimi_linear" in err
