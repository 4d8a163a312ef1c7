"""The command line: plan (table and JSON), strategies, examples, and clean errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as run

from kvrules import CapacityError, EngineConfig, Planner
from kvrules.cli.common import cli_fix
from kvrules.cli.main import main
from kvrules.errors import Fix, fix_sentence
from kvrules.examples import example_names, load_example


def test_plan_example_prints_groups_tensors_and_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--example", "issue-43626", "--strategies", "vllm")
    assert code == 0
    assert "KV-cache groups (7)" in out
    assert "mamba-pad" in out and "block-scale" in out
    assert "num_blocks 1538" in out and "efficiency" in out


def test_plan_json_is_the_whole_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--example", "gemma3-27b", "--json", "--strategies", "vllm")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "kvrules.plan/v2"
    assert data["num_blocks"] == 16384 and len(data["groups"]) == 7


def test_plan_flags_override_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "--example",
        "gemma3-27b",
        "--workers",
        "2",
        "--memory",
        "20GiB,10GiB",
        "--max-model-len",
        "auto",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert [w["own_num_blocks"] for w in data["workers"]] == [32768, 16384]
    assert data["num_blocks"] == 16384


def test_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = {
        "layers": {
            "l0": {
                "type": "full_attention",
                "block_size": 16,
                "num_kv_heads": 8,
                "head_size": 128,
                "dtype": "bfloat16",
            },
            "l1": {
                "type": "sliding_window",
                "block_size": 16,
                "num_kv_heads": 8,
                "head_size": 128,
                "dtype": "bfloat16",
                "sliding_window": 128,
            },
        },
        "engine": {"max_model_len": 8192},
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    code, out, _ = run(capsys, "plan", str(path), "--memory", "1GiB")
    assert code == 0 and "route: unified-page" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the model file"),
        ("{not json", "invalid JSON"),
        (
            '{"layers": {"l0": {"type": "full_attention", "block_size": 16}}}',
            "layer 'l0': type 'full_attention' needs field(s)",
        ),
        (
            '{"layers": {"l0": {"type": "mamba", "block_size": 16, "shapes": [[3, 4]], "dtypes": ["bf17"]}}}',
            "bf17",
        ),
        ('{"layers": {}, "wrkers": []}', "unknown top-level key(s) 'wrkers'"),
    ],
)
def test_bad_model_files_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "model.json"
    if content is not None:
        path.write_text(content)
    code, _, err = run(capsys, "plan", str(path), "--memory", "1GiB", "--max-model-len", "1024")
    assert code == 2
    assert message in err and str(path) in err
    assert "Traceback" not in err


def test_capacity_error_exit_2_with_the_fix_in_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--memory", "1GiB")
    assert code == 2
    assert "The largest max_model_len that fits is 8192." in err
    assert "To fix it: pass --max-model-len 8192, give a larger --memory or pass --max-model-len auto." in err
    assert "auto_fit_max_model_len" not in err and "available_memory" not in err


def test_capacity_error_without_a_fitting_length_suggests_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--memory", "1MiB")
    assert code == 2
    assert err.rstrip().endswith("Not even a 1-token request fits. To fix it: give a larger --memory.")


def test_capacity_error_in_python_terms() -> None:
    model = load_example("llama3-8b")
    with pytest.raises(CapacityError) as info:
        Planner().plan(model.specs, 1 << 30, EngineConfig(max_model_len=131072))
    error = info.value
    assert error.fixes == (
        Fix("max_model_len", 8192),
        Fix("available_memory"),
        Fix("auto_fit_max_model_len", True),
    )
    assert str(error).endswith(
        "The largest max_model_len that fits is 8192. To fix it: set max_model_len=8192, give a "
        "larger available_memory or set auto_fit_max_model_len=True."
    )
    assert str(error) == f"{error.reason} {fix_sentence(error.fixes)}"
    assert "--" not in str(error)
    assert error.explained(cli_fix).endswith(
        "To fix it: pass --max-model-len 8192, give a larger --memory or pass --max-model-len auto."
    )
    assert error.max_fitting_len == 8192  # the figures stay as they were


def test_the_fix_it_suggests_works() -> None:
    model = load_example("llama3-8b")
    with pytest.raises(CapacityError) as info:
        Planner().plan(model.specs, 1 << 30, EngineConfig(max_model_len=131072))
    for fix in info.value.fixes:
        if fix.value is not None:
            config = EngineConfig.from_dict({"max_model_len": 131072, fix.setting: fix.value})
            assert Planner().plan(model.specs, 1 << 30, config).capacity_tokens > 0


def test_cli_fix_words() -> None:
    assert cli_fix(Fix("max_model_len", 4096)) == "pass --max-model-len 4096"
    assert cli_fix(Fix("auto_fit_max_model_len", True)) == "pass --max-model-len auto"
    assert cli_fix(Fix("available_memory")) == "give a larger --memory"
    assert cli_fix(Fix("block_size", 64)) == "set block_size=64"  # no flag: the Python words
    assert fix_sentence([]) == ""


def test_help_texts_name_what_the_flags_take(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--block NAME" in text and "plugin name or a distribution name" in text
    assert "block a plugin by name" not in text
    assert "-NAME removes rule NAME" in text and "--strategies=-NAME" in text


def test_a_dash_value_hint_names_the_flag_used(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "-o", "-plan.json")
    assert code == 2 and "a value starting with '-' must be joined to its flag: --output=-plan.json" in err
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--memory")
    assert code == 2 and "expected one argument" in err and "joined" not in err  # no value at all


def test_strategies_lists_every_rule_with_provider(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "strategies")
    assert code == 0
    for name in (
        "mamba-pad",
        "block-scale",
        "stride-pad",
        "unified-page",
        "vllm-group-size",
        "packed",
        "hybrid-disabled",
    ):
        assert name in out
    assert "plugin 'page-unify' (kvrules" in out
    assert "presets:" in out and "vllm" in out


def test_examples_lists_the_builtin_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "examples")
    assert code == 0
    for name in example_names():
        assert name in out


def test_unknown_strategy_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--strategies", "fastest")
    assert code == 2 and "unknown strategy set 'fastest'" in err


def test_log_format_json_streams_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "issue-43626", "--log-format", "json")
    assert code == 0
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(e["event"] == "kvrules.decision" and e["rule"] == "mamba-pad" for e in events)
    assert any(e["event"] == "kvrules.plan.finished" for e in events)
