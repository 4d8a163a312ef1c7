"""The front door on the command line: plan --hf-config, specs, examples, sweep, --log-format json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as run

from kvrules.cli.progress import Progress
from kvrules.hf.examples import hf_example_names, load_hf_example_info

QWEN = Path(load_hf_example_info("hf-qwen3-coder-next").path)


PAIR = (
    "--hf-config", str(QWEN / "config.json"), "--draft", str(QWEN / "draft.json"), "--kv-cache-dtype", "fp8",
    "--tp", "1", "--num-speculative-tokens", "4", "--memory", "70GiB", "--max-model-len", "262144",
)  # fmt: skip


def test_plan_the_43626_pair(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", *PAIR, "--strategies", "vllm")
    assert code == 0, err
    assert "KV-cache groups (7)" in out
    assert "summary: 7 KV-cache groups, 84 layers" in out
    assert "hybrid-align" in out and "mamba-pad" in out
    assert "1,163,264 (50.0%)" in out  # the padded Mamba pages in the summary table
    assert "num_blocks 2,692" in out


def test_plan_json_carries_the_front_door_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *PAIR, "--strategies", "vllm", "--json")
    assert code == 0
    data = json.loads(out)
    stages = [d["stage"] for d in data["decisions"]]
    assert stages[0] == "arch" and "align" in stages and "unify" in stages
    assert stages.index("align") < stages.index("unify")
    assert data["config"]["max_model_len"] == 262144


def test_log_format_json_streams_every_decision(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", *PAIR, "--strategies", "vllm", "--log-format", "json")
    assert code == 0
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    decisions = [e for e in events if e["event"] == "kvrules.decision"]
    arch = [e for e in decisions if e["stage"] == "arch"]
    assert {e["outcome"] for e in arch} == {"applied", "declined"}
    assert any(e["stage"] == "align" and e["rule"] == "hybrid-align" for e in decisions)
    pad = next(e for e in decisions if e["rule"] == "mamba-pad")
    assert pad["after"]["page_size_bytes"] == 2_326_528
    assert set(pad) >= {"stage", "rule", "outcome", "layer", "reason", "before", "after", "padding_bytes"}


def test_a_directory_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--hf-config", str(QWEN), "--memory", "70GiB", "--json")
    assert code == 0
    assert json.loads(out)["max_model_len"] == 262144  # from max_position_embeddings


def test_mtp_draft_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = load_hf_example_info("hf-deepseek-v3").path
    code, out, _ = run(capsys, "plan", "--hf-config", path, "--draft", "mtp", "--memory", "40GiB", "--json")
    assert code == 0
    data = json.loads(out)
    assert "draft.model.layers.61.self_attn.attn" in data["specs"]


def test_specs_prints_and_writes_a_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "specs.json"
    code, out, _ = run(
        capsys, "specs", "--hf-config", str(QWEN), "--kv-cache-dtype", "fp8", "-o", str(target)
    )
    assert code == 0
    assert "gdn_attention (3,8192) (32,128,128) bfloat16/bfloat16" in out
    assert "1072" in out and "hybrid-align" in out
    written = json.loads(target.read_text())
    assert len(written["layers"]) == 48
    assert written["engine"]["max_model_len"] == 262144
    code, out, _ = run(capsys, "plan", str(target), "--memory", "20GiB", "--json", "--strategies", "vllm")
    assert code == 0 and json.loads(out)["num_blocks"] > 0


def test_specs_json_and_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "specs", "--example", "hf-jamba-v0.1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["layers"]["model.layers.4.attn"]["block_size"] == 80
    assert data["available_memory"] == [20 << 30]


def test_examples_lists_the_hf_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "examples")
    assert code == 0
    for name in hf_example_names():
        assert name in out
    for name in ("hf-qwen3-coder-next", "hf-gemma-3-27b", "hf-gpt-oss-20b-eagle", "hf-deepseek-v3",
                 "hf-nemotron-nano-9b-v2", "hf-jamba-v0.1"):  # fmt: skip
        assert name in hf_example_names()


def test_plan_an_hf_example_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "--example", "hf-qwen3-coder-next", "--tp", "4", "--json", "--strategies", "vllm"
    )
    assert code == 0
    data = json.loads(out)
    assert data["specs"]["model.layers.0.linear_attn"]["block_size"] == 576


def test_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "sweep", "--example", "hf-qwen3-coder-next", "--tp", "1,3,4", "--kv-cache-dtype", "auto,fp8",
        "--strategies", "vllm",
    )  # fmt: skip
    assert code == 0
    assert "6 combinations" in out
    assert out.count(" ok") == 4 and out.count("error: ") == 2  # TP 3 does not divide 16 heads
    assert "\r" not in err  # no progress line when stderr is not a terminal
    code, out, _ = run(
        capsys, "sweep", "--example", "hf-jamba-v0.1", "--kv-cache-dtype", "auto,fp8", "--json"
    )
    rows = json.loads(out)
    assert [r["block_size"] for r in rows] == [80, 160]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    quiet = io.StringIO()
    with Progress(3, "x", stream=quiet) as bar:
        for _ in range(3):
            bar.update()
    assert quiet.getvalue() == ""
    tty = _Tty()
    with Progress(2, "sweep", stream=tty) as bar:
        bar.update("a")
        assert "sweep [1/2]" in tty.getvalue() and tty.getvalue().startswith("\r")
        bar.update("b")
    assert tty.getvalue().endswith("\r")  # the line is cleared at the end


def test_strategies_lists_the_architectures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "strategies")
    assert code == 0
    assert "architectures (Hugging Face configs, asked in this order):" in out
    assert "qwen3-next" in out and "hybrid-align" in out


# -- --hf-reader (issue 26 item 2) ---------------------------------------------------------------
QWEN3_NEXT = Path(__file__).resolve().parents[1] / "data" / "hf" / "Qwen__Qwen3-Next-80B-A3B-Instruct"


def _reading(capsys: pytest.CaptureFixture[str], command: str, *flags: str) -> tuple[str, dict[str, object]]:
    """The ``arch`` decision's reading note and the JSON document of ``command`` on Qwen3-Next."""
    code, out, err = run(
        capsys, command, "--hf-config", str(QWEN3_NEXT), "--memory", "40GiB", "--json", *flags
    )
    assert code == 0, err
    data = json.loads(out)
    decisions = data["decisions"] if "decisions" in data else data["sets"][0]["decisions"]
    note = next(d["reason"] for d in decisions if d["stage"] == "arch" and "read by the" in d["reason"])
    return note, data


def test_plan_reads_a_known_model_type_with_the_builtin_reader_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    note, auto = _reading(capsys, "plan")
    assert "read by the built-in reader (Qwen3NextConfig): model type 'qwen3_next' is in its table" in note
    note, builtin = _reading(capsys, "plan", "--hf-reader", "builtin")
    assert "read by the built-in reader (Qwen3NextConfig): the built-in reader was asked for" in note
    assert builtin["groups"] == auto["groups"] and builtin["num_blocks"] == auto["num_blocks"]


def test_hf_reader_transformers_reads_through_transformers(capsys: pytest.CaptureFixture[str]) -> None:
    transformers = pytest.importorskip("transformers", exc_type=ImportError)
    note, data = _reading(capsys, "plan", "--hf-reader", "transformers")
    assert (
        f"read by the transformers reader (Qwen3NextConfig): transformers {transformers.__version__}" in note
    )
    _, auto = _reading(capsys, "plan")
    assert data["groups"] == auto["groups"] and data["num_blocks"] == auto["num_blocks"]


def test_specs_takes_hf_reader(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "specs", "--hf-config", str(QWEN3_NEXT), "--hf-reader", "builtin")
    assert code == 0, err
    assert "read by the built-in reader (Qwen3NextConfig): the built-in reader was asked for" in out


def test_hf_reader_needs_a_hugging_face_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "gemma3-27b", "--hf-reader", "builtin")
    assert code == 2
    assert "--hf-reader applies only to a Hugging Face model" in err


def test_an_unknown_reader_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--hf-config", str(QWEN3_NEXT), "--hf-reader", "pytorch")
    assert code == 2
    assert "invalid choice: 'pytorch'" in err


def test_compare_takes_hf_reader(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--hf-config", str(QWEN3_NEXT), "--memory", "40GiB", "--json")
    code, out, err = run(capsys, "compare", *args, "--hf-reader", "builtin")
    assert code == 0, err
    assert json.loads(out) == json.loads(run(capsys, "compare", *args)[1])


def test_sweep_takes_hf_reader(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("sweep", "--hf-config", str(QWEN3_NEXT), "--memory", "40GiB", "--tp", "1,2", "--json")
    code, out, err = run(capsys, *args, "--hf-reader", "builtin")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 2 and all("error" not in row for row in rows)
    assert rows == json.loads(run(capsys, *args)[1])
    code, _, err = run(capsys, *args, "--hf-reader", "pytorch")
    assert code == 2 and "invalid choice: 'pytorch'" in err


@pytest.mark.parametrize(
    ("given", "named"),
    [(("--dtype", "bfloat16"), "--dtype"), (("--tp", "2"), "--tensor-parallel-size")],
)
def test_a_stray_hugging_face_flag_is_named_as_it_is_written(
    capsys: pytest.CaptureFixture[str], given: tuple[str, str], named: str
) -> None:
    code, _, err = run(capsys, "plan", "--example", "gemma3-27b", *given)
    assert code == 2
    assert f"{named} applies only to a Hugging Face model" in err
