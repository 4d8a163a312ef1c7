"""``kvrules plan --picture``: a drawing of the memory layout for every built-in example; identical
tensors drawn once as a band marked "x N", text legible at 1,000 pixels wide, long names elided
in the middle at word boundaries (the SVG is parsed, never matched as a picture)."""

from __future__ import annotations

import builtins
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvrules import EngineConfig, FullAttentionSpec, KVRulesError, Planner, SlidingWindowSpec
from kvrules.cli.main import main
from kvrules.examples import example_names, load_example
from kvrules.plan import Plan
from kvrules.report.names import ELLIPSIS, SEPARATORS, elide, span
from kvrules.report.picture import (
    FORMATS,
    MIN_TEXT_PX,
    NAME_LIMIT,
    SHOWN_WIDTH_PX,
    PictureError,
    check_format,
    draw_layout,
    formats_text,
)

pytest.importorskip("matplotlib")

SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path: Path) -> tuple[float, list[tuple[float, str]]]:
    """The SVG's width in user units and every text element as ``(font size, text)``."""
    root = ET.parse(path).getroot()
    width = float(root.attrib["viewBox"].split()[2])
    texts = []
    for element in root.iter(f"{SVG}text"):
        match = re.search(r"font-size:\s*([0-9.]+)px", element.attrib.get("style", ""))
        assert match is not None, f"text {element.text!r} has no font size"
        texts.append((float(match.group(1)), "".join(element.itertext())))
    return width, texts


def lane_texts(path: Path) -> list[str]:
    """The lane labels (``g0: ...``) of a picture."""
    return [text for _, text in svg_texts(path)[1] if re.match(r"g\d+: ", text)]


def example_plan(name: str) -> Plan:
    model = load_example(name)
    return Planner().plan(
        model.worker_specs(), model.available_memory or [40 << 30], EngineConfig.from_dict(model.engine)
    )


@pytest.mark.parametrize("name", example_names())
def test_every_example_draws_a_legible_picture(name: str, tmp_path: Path) -> None:
    path = draw_layout(example_plan(name), tmp_path / f"{name}.svg", title=name, max_rows=6)
    width, texts = svg_texts(path)
    assert any(text.startswith("tensor") for _, text in texts) and any(name in text for _, text in texts)
    assert lane_texts(path)
    least = MIN_TEXT_PX * width / SHOWN_WIDTH_PX  # user units that show as 10 px at 1000 px wide
    small = [(size, text) for size, text in texts if size < least]
    assert not small, f"text below {least:.2f} user units in a {width}-wide image: {small[:3]}"


def test_plan_picture_flag_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "layout.png"
    code = main(["plan", "--example", "issue-43626", "--strategies", "vllm", "--picture", str(path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def small_plan() -> Any:
    model = load_example("issue-43626")
    return Planner("vllm").plan(model.specs, 70 << 30, EngineConfig(max_model_len=262144))


def test_svg_marks_padding_and_has_a_legend(tmp_path: Path) -> None:
    path = draw_layout(small_plan(), tmp_path / "layout.svg", title="issue 43626")
    text = " ".join(t for _, t in svg_texts(path)[1])
    for word in ("padding", "mamba", "full_attention", "draft layer", "tensors 0-11", "issue 43626"):
        assert word in text


def test_identical_tensors_are_one_band_marked_x_n(tmp_path: Path) -> None:
    plan = example_plan("issue-43626")  # 12 tensors, each shared by one layer of each of 7 groups
    assert len(plan.workers[0].tensors) == 12
    path = draw_layout(plan, tmp_path / "43626.svg")
    texts = [text for _, text in svg_texts(path)[1]]
    assert "tensors 0-11" in texts and any(t.startswith("x 12, ") for t in texts)
    assert not any(re.fullmatch(r"tensor \d+", t) for t in texts)
    lanes = lane_texts(path)
    assert len(lanes) == 7  # one band: one lane per group, not 12 x 7
    assert "g0: model.layers.{0..44..4}.linear_attn" in lanes
    assert "g4: draft.model.layers.{0..33..3}.self_attn.attn" in lanes


def test_only_identical_tensors_share_a_band(tmp_path: Path) -> None:
    model = load_example("gemma3-27b")  # 52 sliding layers in groups of 10: the last tensors differ
    plan = Planner("vllm").plan(model.specs, 20 << 30, EngineConfig(max_model_len=131072))
    path = draw_layout(plan, tmp_path / "g.svg")
    texts = [text for _, text in svg_texts(path)[1]]
    assert {"tensors 0-7", "tensor 8", "tensor 9"} <= set(texts)
    assert any(t.startswith("x 8, ") for t in texts)
    assert any("3 distinct tensors" in t for t in texts)
    assert sum(t.endswith("empty slot") for t in lane_texts(path)) == 8


def test_max_rows_counts_bands(tmp_path: Path) -> None:
    model = load_example("gemma3-27b")
    plan = Planner("vllm").plan(model.specs, 20 << 30, EngineConfig(max_model_len=131072))
    texts = [text for _, text in svg_texts(draw_layout(plan, tmp_path / "g.svg", max_rows=2))[1]]
    assert "tensor 8" in texts and "tensor 9" not in texts
    assert any("first 2 of 3 distinct tensors drawn" in t for t in texts)


LONG = "vision_language_model.text_decoder.transformer.blocks.{}.attention_mechanism.kv_cache_attn"


def long_named_plan(layers: int = 48) -> Plan:
    """48 layers (5 sliding-window : 1 full) whose names are 90 characters long."""
    specs = {
        LONG.format(i): (
            FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
            if i % 6 == 5
            else SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=4096)
        )
        for i in range(layers)
    }
    return Planner("vllm").plan(specs, 20 << 30, EngineConfig(max_model_len=131072))


def test_long_names_are_elided_in_the_middle(tmp_path: Path) -> None:
    lanes = lane_texts(draw_layout(long_named_plan(), tmp_path / "long.svg"))
    assert len(lanes) == 6
    for lane in lanes:
        label = lane.split(": ", 1)[1]
        assert len(label) <= NAME_LIMIT and ELLIPSIS in label
        assert label.startswith("vision") and label.endswith(".attention_mechanism.kv_cache_attn")
        assert re.search(r"\{\d+\.\.\d+\.\.6\}", label)  # the layer numbers survive the elision
    assert any("{0..42..6}" in lane for lane in lanes) and any("{5..47..6}" in lane for lane in lanes)


def test_one_layer_per_lane_keeps_its_number(tmp_path: Path) -> None:
    plan = long_named_plan(6)  # 5 sliding + 1 full: 6 groups of one layer, one tensor
    lanes = lane_texts(draw_layout(plan, tmp_path / "six.svg"))
    assert len(lanes) == 6
    for lane in lanes:
        number = re.search(r"(\d+)\.attention_mechanism\.kv_cache_attn$", lane)
        assert number is not None and ELLIPSIS in lane and len(lane.split(": ", 1)[1]) <= NAME_LIMIT
    assert sorted(int(re.findall(r"(\d+)\.attention", lane)[0]) for lane in lanes) == list(range(6))


@pytest.mark.parametrize("limit", [3, 8, 12, 20, 30, 48])
@pytest.mark.parametrize(
    "name",
    [
        "model.layers.0.self_attn.attn",
        "language_model.model.layers.47.self_attn.attn",
        LONG.format(12),
        "x" * 80,
        "a.b",
        "model-layers-12-mixer",
    ],
)
def test_elide_contract(name: str, limit: int) -> None:
    short = elide(name, limit)
    assert len(short) <= limit
    if len(name) <= limit:
        assert short == name
        return
    head, mark, tail = short.partition(ELLIPSIS)
    assert mark and name.startswith(head) and name.endswith(tail)
    last_word = re.split(f"[{re.escape(SEPARATORS)}]", name)[-1]
    if len(last_word) + len(ELLIPSIS) <= limit and last_word != name:  # a cut of whole words fits
        assert name[-len(tail) - 1] in SEPARATORS, "the tail starts a whole word"
        assert not head or name[len(head)] in SEPARATORS, "the head ends a whole word"


def test_elide_cuts_at_word_boundaries_and_keeps_layer_numbers() -> None:
    assert elide("model.layers.0.self_attn.attn … model.layers.47.self_attn.attn", 34) == (
        "model.layers.0…47.self_attn.attn"
    )
    short = elide(LONG.format(12), 52)
    assert "12" in short and short.endswith(".attention_mechanism.kv_cache_attn")
    head, _, tail = short.partition(ELLIPSIS)
    assert LONG.format(12)[len(head)] in SEPARATORS  # the head ends before a separator
    assert LONG.format(12)[-len(tail) - 1] in SEPARATORS  # the tail starts a word
    assert elide("x" * 80, 20) == "x" * 10 + ELLIPSIS + "x" * 9  # no separator: middle cut
    with pytest.raises(ValueError, match="at least 3"):
        elide("abc", 2)


def test_elide_of_a_huge_name_is_fast() -> None:
    assert len(elide("layer." * 20_000, NAME_LIMIT)) <= NAME_LIMIT


def test_span_of_alike_names() -> None:
    assert span(["model.layers.0.attn", "model.layers.4.attn", "model.layers.44.attn"]) == (
        "model.layers.{0,4,44}.attn"
    )
    assert span([f"model.layers.{i}.attn" for i in range(12)]) == "model.layers.{0..11}.attn"
    assert span([f"model.layers.{i}.attn" for i in range(0, 48, 4)]) == "model.layers.{0..44..4}.attn"
    assert span([f"m.{i}.attn" for i in (0, 1, 5, 9)]) == "m.{0,…,9}.attn"  # no step: not a range
    assert span(["m.a.attn", "m.b.attn"]) == "m.{a,b}.attn"
    assert span(["enc.0", "dec.5"]) == "enc.0 … dec.5"
    assert span(["a.b.c", "a.b.x.b.c"]) == "a.b.c … a.b.x.b.c"  # no middle in the first
    assert span(["only.one"]) == "only.one"
    with pytest.raises(ValueError, match="no names"):
        span([])


def test_empty_slots_are_drawn(tmp_path: Path) -> None:
    model = load_example("gemma3-27b")  # 52 sliding layers in groups of 10: 8 padding slots
    plan = Planner("vllm").plan(model.specs, 20 << 30, EngineConfig(max_model_len=131072))
    assert "empty slot" in draw_layout(plan, tmp_path / "g.svg").read_text()


def test_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(PictureError, match=re.escape(formats_text())):
        draw_layout(small_plan(), tmp_path / "layout.gif")


def test_formats_have_one_source_for_help_and_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert formats_text() == ".svg, .png or .pdf" and all(f in formats_text() for f in FORMATS)
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert formats_text() in " ".join(capsys.readouterr().out.split())
    with pytest.raises(PictureError, match=re.escape(formats_text())):
        check_format(tmp_path / "x.jpeg")
    assert check_format(tmp_path / "x.PDF").name == "x.PDF"


def test_cli_refuses_a_picture_suffix_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "layout.gif"
    code = main(["plan", "--example", "llama3-8b", "--memory", "1MiB", "--picture", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and formats_text() in err and "layout.gif" in err
    assert "max_model_len" not in err  # refused before the plan (which would not fit) is made
    assert not out.exists()


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
