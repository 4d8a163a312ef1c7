"""``kvrules plan --picture``: a drawing of the memory layout for every built-in example."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from kvrules import EngineConfig, KVRulesError, Planner
from kvrules.cli.main import main
from kvrules.examples import example_names, load_example
from kvrules.report.picture import PictureError, draw_layout

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("name", example_names())
def test_every_example_draws_a_picture(name: str, tmp_path: Path) -> None:
    model = load_example(name)
    plan = Planner().plan(
        model.worker_specs(), model.available_memory or [40 << 30], EngineConfig.from_dict(model.engine)
    )
    path = draw_layout(plan, tmp_path / f"{name}.svg", title=name, max_rows=6)
    text = path.read_text()
    assert len(text) > 5_000 and "tensor 0" in text and name in text


def test_plan_picture_flag_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "layout.png"
    code = main(["plan", "--example", "hf-qwen3-coder-next", "--strategies", "vllm", "--picture", str(path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def small_plan() -> Any:
    model = load_example("hf-qwen3-coder-next")
    return Planner("vllm").plan(model.specs, 70 << 30, EngineConfig(max_model_len=262144))


def test_svg_marks_padding_and_has_a_legend(tmp_path: Path) -> None:
    path = draw_layout(small_plan(), tmp_path / "layout.svg", title="issue 43626")
    text = path.read_text()
    assert text.lstrip().startswith(("<?xml", "<svg"))
    for word in ("padding", "mamba", "full_attention", "draft layer", "tensor 11", "issue 43626"):
        assert word in text


def test_empty_slots_are_drawn(tmp_path: Path) -> None:
    model = load_example("gemma3-27b")  # 52 sliding layers in groups of 10: 8 padding slots
    plan = Planner("vllm").plan(model.specs, 20 << 30, EngineConfig(max_model_len=131072))
    assert "empty slot" in draw_layout(plan, tmp_path / "g.svg").read_text()


def test_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(PictureError, match=r"\.svg"):
        draw_layout(small_plan(), tmp_path / "layout.gif")


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PictureError, match=r"pip install kvrules\[plot\]") as info:
        draw_layout(small_plan(), tmp_path / "layout.png")
    assert isinstance(info.value, KVRulesError)
