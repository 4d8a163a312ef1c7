"""Hostile input at the edge (files, configs, flags): one regression test per defect class of the
reliability campaign (D1-D3, D5-D7, D12-D14, D16-D18) and per silently accepted value.

Every case is a :class:`kvrules.KVRulesError` from the API, and exit code 2 with one line
``kvrules: error: ...`` (no traceback) from the command line, run in-process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kvrules
from kvrules import ConfigError, EngineConfig, ModelFileError, PluginError, SpecError
from kvrules.cli.main import main
from kvrules.hf import HFOptions, build_hf_model
from kvrules.hf.config import MAX_HF_LAYERS, HFConfig
from kvrules.jsonfile import MAX_NESTING, loads
from kvrules.model import load_model_file
from kvrules.units import parse_int, parse_size
from kvrules.values import MAX_BYTES

F = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
ENGINE = {"max_model_len": 4096}
EXAMPLES = Path(kvrules.__file__).parent / "examples" / "hf"
BIG = "9" * 400
ARABIC_4096 = "\u0664\u0660\u0669\u0666"  # ٤٠٩٦

#: a small Falcon-H1 config (attention and Mamba2 in every layer), built through mamba_expand
FALCON_H1 = {
    "model_type": "falcon_h1",
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "hidden_size": 1024,
    "mamba_expand": 2,
    "mamba_d_ssm": None,  # derive it from mamba_expand (the class default 1024 would not match the heads)
    "mamba_n_groups": 1,
    "mamba_n_heads": 32,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_d_conv": 4,
}


def model(**extra: Any) -> dict[str, Any]:
    return {"layers": {"a": F}, "engine": ENGINE, "available_memory": "1GiB", **extra}


def write(tmp_path: Path, content: Any, name: str = "m.json") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def hf_dir(tmp_path: Path, example: str, **changes: Any) -> Path:
    """A copy of a shipped example config with ``changes`` (a value ``None`` removes the key)."""
    config = json.loads((EXAMPLES / example / "config.json").read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    folder = tmp_path / example
    folder.mkdir()
    write(folder, config, "config.json")
    return folder


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``kvrules ARGV``; it must exit 2 with one ``kvrules: error:`` line; returns that line."""
    code = main(list(argv))
    _, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvrules: error: "), err
    return lines[0]


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, *words: str) -> None:
    """A model file with ``content``: ModelFileError from the API, exit 2 from ``kvrules plan``."""
    path = write(
        tmp_path, content, "m.toml" if isinstance(content, str) and content.startswith("x =") else "m.json"
    )
    with pytest.raises(ModelFileError) as info:
        load_model_file(path)
    for word in (str(path), *words):
        assert word in str(info.value)
    line = cli(capsys, "plan", str(path))
    for word in (str(path), *words):
        assert word in line


# -- D1: not UTF-8 ----------------------------------------------------------------------------


def test_d1_model_file_not_utf8_names_the_byte_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused(tmp_path, capsys, b'{"layers": {"a": {"type": "full\xff"}}}', "not valid UTF-8", "byte offset 31")


def test_d1_utf16_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(model())
    refused(tmp_path, capsys, text.encode("utf-16"), "UTF-16", "byte offset 0")
    refused(tmp_path, capsys, text.encode("utf-16-le"), "NUL byte at byte offset 1")


def test_d1_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbf" + json.dumps(model()).encode())
    assert list(load_model_file(path).specs) == ["a"]


def test_d1_hf_config_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_bytes(b'{"model_type": "qwen3\xff"}')
    with pytest.raises(ModelFileError, match="byte offset 21"):
        build_hf_model(tmp_path)
    line = cli(capsys, "plan", "--hf-config", str(tmp_path), "--memory", "1GiB")
    assert "not valid UTF-8 at byte offset 21" in line and "config.json" in line


# -- D2: nesting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"layers": ' + '{"a": ' * 70 + "1" + "}" * 70 + "}",
        "x = " + "[" * 5000 + "]" * 5000,
        "x = " + "{a = " * 100 + "1" + "}" * 100,
    ],
    ids=["json-arrays", "json-objects", "toml-arrays", "toml-inline-tables"],
)
def test_d2_deep_nesting_is_refused_before_decoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    refused(tmp_path, capsys, content, "levels deep", f"at most {MAX_NESTING} levels")


def test_d2_the_nesting_bound_is_exact() -> None:
    value = loads("[" * MAX_NESTING + "]" * MAX_NESTING, "m.json", "json")
    for _ in range(MAX_NESTING - 1):
        value = value[0]
    assert value == []
    toml = loads("x = " + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1), "m.toml", "toml")
    assert isinstance(toml["x"], list)
    with pytest.raises(ModelFileError, match=f"nested {MAX_NESTING + 1} levels deep"):
        loads("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1), "m.json", "json")


def test_d2_toml_dotted_keys_nest_too() -> None:
    with pytest.raises(ModelFileError, match="at most 64 levels"):
        loads("[" + ".".join(["t"] * 200) + "]\nx = 1\n", "deep.toml", "toml")


def test_d2_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"description": "[" * 500, "layers": {"a": F}})
    assert loads(text, "m.json", "json")["description"] == "[" * 500
    assert loads('x = "[[[[[[[[" # ' + "[" * 100 + "\n", "m.toml", "toml") == {"x": "[[[[[[[["}


def test_d2_deep_hf_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "[" * 100_000 + "]" * 100_000, "config.json")
    with pytest.raises(ModelFileError, match="levels deep"):
        build_hf_model(tmp_path)
    assert "levels deep" in cli(capsys, "plan", "--hf-config", str(tmp_path), "--memory", "1GiB")


# -- duplicate keys, other unreadable documents ---------------------------------------------------


def test_duplicate_json_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = json.dumps(F)
    text = f'{{"layers": {{"a": {spec}, "a": {spec}}}, "engine": {{"max_model_len": 4096}}}}'
    refused(tmp_path, capsys, text, "key 'a' appears twice")


def test_duplicate_key_in_hf_config(tmp_path: Path) -> None:
    write(
        tmp_path, '{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 200}', "config.json"
    )
    with pytest.raises(ModelFileError, match="'num_hidden_layers' appears twice"):
        build_hf_model(tmp_path)


def test_integer_beyond_the_decoders_digit_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(tmp_path, capsys, '{"available_memory": ' + "1" * 5000 + "}", "invalid JSON")


def test_paths_must_be_paths() -> None:
    with pytest.raises(ModelFileError, match="the model file must be given as a path, got int"):
        load_model_file(5)  # type: ignore[arg-type]
    with pytest.raises(ModelFileError, match="Hugging Face config must be given as a path"):
        HFConfig.load(None)  # type: ignore[arg-type]


def test_model_file_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "it is a directory" in cli(capsys, "plan", str(tmp_path))


# -- D3: spec type not a string -------------------------------------------------------------------


@pytest.mark.parametrize("bad", [["full_attention"], {"a": 1}, 5])
def test_d3_spec_type_must_be_a_string(bad: Any) -> None:
    with pytest.raises(SpecError, match=r"'type' = .* must be a string naming a spec type"):
        kvrules.spec_from_dict({"type": bad})
    member = {"type": "uniform_type", "block_size": 16, "kv_cache_specs": {"a": {**F, "type": bad}}}
    with pytest.raises(SpecError, match="layer 'a': 'type'"):
        kvrules.spec_from_dict(member)


def test_d3_in_a_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(
        tmp_path, capsys, {"layers": {"a": {"type": ["full_attention"]}}}, "layer 'a'", "must be a string"
    )


def test_d3_spec_keys_and_member_names_must_be_strings() -> None:
    with pytest.raises(SpecError, match="unknown key 5"):
        kvrules.spec_from_dict({**F, 5: 1})  # type: ignore[dict-item]
    with pytest.raises(SpecError, match="kv_cache_specs member name"):
        kvrules.spec_from_dict({"type": "uniform_type", "block_size": 16, "kv_cache_specs": {7: F}})


# -- D5: workers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [[[["a"]]], [[{"a": 1}]], [[1]], ["a"], []])
def test_d5_workers_must_list_layer_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: Any
) -> None:
    refused(tmp_path, capsys, model(workers=workers), "'workers'")


def test_d5_a_layer_twice_on_one_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(tmp_path, capsys, model(workers=[["a", "a"]]), "lists layer 'a' twice")


# -- D6: engine settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("prefixes", [5, "draft.", {"draft.": 1}, [1], [""]])
def test_d6_draft_layer_prefixes_must_be_a_list_of_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefixes: Any
) -> None:
    with pytest.raises(ConfigError, match="draft_layer_prefixes"):
        EngineConfig(max_model_len=8, draft_layer_prefixes=prefixes)
    refused(
        tmp_path,
        capsys,
        model(engine={**ENGINE, "draft_layer_prefixes": prefixes}),
        "engine",
        "draft_layer_prefixes",
    )


def test_d6_a_prefix_list_is_normalised_to_a_tuple() -> None:
    config = EngineConfig.from_dict({"max_model_len": 8, "draft_layer_prefixes": ["mtp."]})
    assert config.draft_layer_prefixes == ("mtp.",)
    assert not config.is_draft_layer("model.layers.0")


@pytest.mark.parametrize("data", [None, [1], "max_model_len", 5])
def test_d6_from_dict_of_a_non_mapping(data: Any) -> None:
    with pytest.raises(ConfigError, match="engine settings must be a mapping"):
        EngineConfig.from_dict(data)


def test_d6_from_dict_with_non_string_keys() -> None:
    with pytest.raises(ConfigError, match="unknown engine setting"):
        EngineConfig.from_dict({"max_model_len": 8, 1: 2})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_model_len", 0),
        ("max_model_len", 10**400),
        ("max_model_len", 4096.0),
        ("max_model_len", "4096"),
        ("max_model_len", True),
        ("max_num_batched_tokens", -1),
        ("max_num_batched_tokens", (1 << 40) + 1),
        ("max_num_encoder_input_tokens", -1),
        ("num_gpu_blocks_override", 0),
        ("num_gpu_blocks_override", 10**30),
        ("decode_context_parallel_size", 0),
        ("prefill_context_parallel_size", 2**40),
        ("extra_retained_tokens", -1),
        ("disable_hybrid_kv_cache_manager", 1),
        ("auto_fit_max_model_len", "yes"),
        ("speculative_method", 5),
        ("speculative_method", " "),
    ],
)
def test_d6_every_engine_field_is_checked(field: str, value: Any) -> None:
    values: dict[str, Any] = {"max_model_len": 8, field: value}
    with pytest.raises(ConfigError, match=f"EngineConfig.{field}="):
        EngineConfig(**values)
    with pytest.raises(ConfigError, match=f"EngineConfig.{field}="):
        EngineConfig.from_dict(values)


def test_d6_numpy_integers_are_normalised() -> None:
    config = EngineConfig(max_model_len=np.int64(4096), num_gpu_blocks_override=np.int32(10))  # type: ignore[arg-type]
    assert type(config.max_model_len) is int and type(config.num_gpu_blocks_override) is int
    assert config == EngineConfig(max_model_len=4096, num_gpu_blocks_override=10)


# -- D7: sizes and integer flags ----------------------------------------------------------------------


@pytest.mark.parametrize("text", [BIG, BIG + "GiB", "1" + "0" * 400, "8388608TiB", str(MAX_BYTES + 1)])
def test_d7_huge_sizes_are_refused_exactly(text: str) -> None:
    with pytest.raises(ConfigError, match="sizes are whole numbers of bytes from 0 to 9223372036854775807"):
        parse_size(text)


def test_d7_sizes_are_exact() -> None:
    assert parse_size(str(MAX_BYTES)) == MAX_BYTES
    assert parse_size("8388607TiB") == 8388607 << 40
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("0.001KB") == 1
    assert parse_size("9007199254740993") == 9007199254740993  # 2**53 + 1: a float would round it
    with pytest.raises(ConfigError, match="not a whole number"):
        parse_size("0.5B")


@pytest.mark.parametrize("value", [1.5e9, float("inf"), True, -1, None, "\u0664GiB", "\uff11GiB"])
def test_d7_sizes_are_integers_or_ascii_text(value: Any) -> None:
    with pytest.raises(ConfigError, match="size"):
        parse_size(value)


def test_d7_memory_flag_and_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = cli(capsys, "plan", "--example", "llama3-8b", "--memory", BIG)
    assert "sizes are whole numbers of bytes" in line
    refused(
        tmp_path,
        capsys,
        model(available_memory="1" + "0" * 400),
        "available_memory",
        "sizes are whole numbers",
    )
    refused(tmp_path, capsys, model(available_memory=10**30), "available_memory")


def test_arabic_indic_digits_are_not_4096(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="ASCII digits"):
        parse_int(ARABIC_4096, "--max-model-len", minimum=1, maximum=1 << 40)
    path = write(tmp_path, model())
    line = cli(capsys, "plan", str(path), "--max-model-len", ARABIC_4096)
    assert "--max-model-len" in line and "ASCII digits 0-9" in line


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("plan", "--max-model-len", BIG),
        ("plan", "--max-num-batched-tokens", BIG),
        ("plan", "--num-gpu-blocks-override", BIG),
        ("plan", "--workers", BIG),
        ("plan", "--workers", "\u0662"),
        ("compare", "--max-model-len", BIG),
        ("allocate", "--worker", BIG),
        ("plan", "--tp", BIG),
        ("plan", "--block-size", "\u0661\u0666"),
        ("plan", "--mamba-block-size", BIG),
        ("plan", "--num-speculative-tokens", BIG),
        ("specs", "--max-model-len", BIG),
        ("sweep", "--block-size", BIG),
        ("plan", "--max-model-len", "1e3"),
        ("plan", "--max-num-batched-tokens", "-1"),
    ],
)
def test_d7_every_integer_flag_is_bounded_and_ascii(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flag: str, value: str
) -> None:
    line = cli(capsys, command, str(write(tmp_path, model())), flag, value)
    assert f"argument {flag}" in line and "is not allowed: an integer from" in line


@pytest.mark.parametrize("flag", ["--tp", "--num-speculative-tokens"])
def test_d7_sweep_integer_lists(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    line = cli(capsys, "sweep", "--example", "hf-qwen3-coder-next", "--memory", "80GiB", flag, f"1,{BIG}")
    assert flag in line and "is not allowed" in line
    line = cli(capsys, "sweep", "--example", "hf-qwen3-coder-next", "--memory", "80GiB", flag, "\u0662")
    assert "ASCII digits" in line


def test_allocate_fraction_in_ascii_digits_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, model())
    line = cli(capsys, "allocate", str(path), "--device", "meta", "--memory", "\u0660.\u0669")
    assert "size" in line and "ASCII digits" in line


# -- D12: uniform_type layers in model files ------------------------------------------------------


def test_d12_uniform_type_members_must_be_the_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for members in ({"x": F, "y": F}, {"x": F}):
        layer = {"type": "uniform_type", "block_size": 16, "kv_cache_specs": members}
        refused(
            tmp_path,
            capsys,
            model(layers={"a": layer}),
            "layer 'a'",
            "exactly one member named like its layer",
        )


def test_d12_a_uniform_type_layer_of_itself_plans(tmp_path: Path) -> None:
    layer = {"type": "uniform_type", "block_size": 16, "kv_cache_specs": {"a": F}}
    path = write(tmp_path, model(layers={"a": layer}))
    loaded = load_model_file(path)
    plan = kvrules.Planner("vllm").plan(
        loaded.worker_specs(), loaded.available_memory or [], EngineConfig.from_dict(loaded.engine)
    )
    assert [g.layer_names for g in plan.groups] == [("a",)]


# -- D13: lone surrogates ------------------------------------------------------------------------------


def test_d13_lone_surrogate_layer_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(model()).replace('"a"', '"\\ud800"', 1)
    refused(tmp_path, capsys, text, "'\\ud800'", "not valid Unicode")


def test_d13_lone_surrogate_anywhere_in_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(model(description="x")).replace('"x"', '"\\udc00x"')
    refused(tmp_path, capsys, text, "description", "not valid Unicode")


def test_d13_surrogate_pairs_and_real_unicode_are_fine(tmp_path: Path) -> None:
    text = json.dumps(model(layers={"\U0001f600.attn": F, "κ.attn": F}))
    assert list(load_model_file(write(tmp_path, text)).specs) == ["\U0001f600.attn", "κ.attn"]


def test_d13_empty_or_unprintable_layer_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="layer name"):
        load_model_file(write(tmp_path, model(layers={"": F})))


# -- D14: output paths -----------------------------------------------------------------------------------


def test_d14_output_to_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, model())
    assert "is a directory" in cli(capsys, "plan", str(path), "-o", str(tmp_path))
    missing = tmp_path / "nope" / "x.json"
    assert "does not exist" in cli(capsys, "plan", str(path), "-o", str(missing))
    assert "does not exist" in cli(capsys, "plan", str(path), "--picture", str(missing.with_suffix(".svg")))


def test_d14_specs_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = cli(capsys, "specs", "--example", "hf-qwen3-coder-next", "-o", str(tmp_path / "no" / "m.json"))
    assert "-o" in line and "does not exist" in line


def test_d14_a_failed_write_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: Path, *args: Any, **kwargs: Any) -> int:
        raise OSError(28, "No space left on device")

    path = write(tmp_path, model())
    monkeypatch.setattr(Path, "write_text", full_disk)
    line = cli(capsys, "plan", str(path), "-o", str(tmp_path / "plan.json"))
    assert "cannot write the file (No space left on device)" in line


def test_d14_output_still_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", str(write(tmp_path, model())), "-o", str(out), "--json"]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text(encoding="utf-8"))["num_blocks"] > 0


# -- D16: HF layer counts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "changes", "draft", "field"),
    [
        (
            "qwen3-coder-next",
            {"num_hidden_layers": 1_000_000, "layer_types": None},
            None,
            "num_hidden_layers",
        ),
        ("qwen3-coder-next", {"num_hidden_layers": 10**30, "layer_types": None}, None, "num_hidden_layers"),
        ("deepseek-v3", {"num_nextn_predict_layers": 10**9}, "mtp", "num_nextn_predict_layers"),
        ("qwen3-coder-next", {"mtp_num_hidden_layers": 1_000_000}, "mtp", "mtp_num_hidden_layers"),
    ],
)
def test_d16_huge_layer_counts_are_refused_before_building(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    example: str,
    changes: dict[str, Any],
    draft: str | None,
    field: str,
) -> None:
    folder = hf_dir(tmp_path, example, **changes)
    with pytest.raises(ModelFileError, match=f"'{field}' is .*; it must be <= {MAX_HF_LAYERS:,}"):
        build_hf_model(folder, draft)
    argv = ["plan", "--hf-config", str(folder), "--memory", "80GiB", *(["--draft", draft] if draft else [])]
    assert field in cli(capsys, *argv)


def test_d16_an_architecture_that_counts_too_many_mtp_layers_is_named() -> None:
    from kvrules.hf import Architecture, layers

    @dataclass(frozen=True)
    class Counting(Architecture):
        name: str = "counting"
        priority: int = 10_000
        model_types: tuple[str, ...] = ("deepseek_v3",)

        def build(self, config: Any, settings: Any) -> Any:
            return {"model.layers.0.self_attn.attn": layers.full_attention(settings, 1, 128)}

        def mtp_layer_count(self, config: Any) -> int:
            return 10**9

    class Plugin:
        name = "test-counting-arch"

        @kvrules.hookimpl
        def kvrules_register_architectures(self, registry: Any) -> None:
            registry.add(Counting())

    pm = kvrules.get_plugin_manager(autoload=False, plugins=[Plugin()])
    target = EXAMPLES / "deepseek-v3"
    with pytest.raises(
        PluginError, match=r"'counting'.*test-counting-arch.*mtp_layer_count\(\) with 1,000,000,000"
    ):
        build_hf_model(target, "mtp", plugin_manager=pm)


def test_d16_a_huge_draft_config(tmp_path: Path) -> None:
    draft = json.loads((EXAMPLES / "qwen3-coder-next" / "draft.json").read_text(encoding="utf-8"))
    draft["num_hidden_layers"] = 10**30
    with pytest.raises(ModelFileError, match=r"draft\.json: field 'num_hidden_layers'"):
        build_hf_model(EXAMPLES / "qwen3-coder-next", write(tmp_path, draft, "draft.json"))


def test_d16_layer_types_longer_than_the_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = json.loads((EXAMPLES / "qwen3-coder-next" / "config.json").read_text(encoding="utf-8"))
    folder = hf_dir(tmp_path, "qwen3-coder-next", layer_types=[*config["layer_types"], "full_attention"])
    message = "'layer_types' has 49 entries; it needs exactly one per layer (num_hidden_layers = 48)"
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_hf_model(folder)
    assert message in cli(capsys, "plan", "--hf-config", str(folder), "--memory", "80GiB")


# -- D17: bad HF input is the file's fault, not a built-in plugin's -----------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("mamba_expand", float("nan"), "finite"),
        ("mamba_expand", float("inf"), "finite"),
        ("mamba_expand", True, "positive number"),
        ("mamba_expand", 10**400, "positive number <="),
        ("head_dim", 10**400, "it must be <="),
        ("head_dim", 128.0, "it must be an integer"),
        ("head_dim", 127.5, "it must be an integer"),
        ("head_dim", True, "it must be an integer"),
        ("num_key_value_heads", float("nan"), "it must be an integer"),
        ("max_position_embeddings", 10**400, "it must be <="),
    ],
)
def test_d17_bad_numbers_name_the_file_and_field(field: str, value: Any, words: str) -> None:
    with pytest.raises(ModelFileError) as info:
        build_hf_model({**FALCON_H1, field: value})
    message = str(info.value)
    assert f"field '{field}'" in message and words in message
    assert "plugin" not in message


def test_d17_nan_in_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, json.dumps(FALCON_H1).replace('"mamba_expand": 2', '"mamba_expand": NaN'), "config.json")
    line = cli(capsys, "plan", "--hf-config", str(tmp_path), "--memory", "1GiB", "--max-model-len", "4096")
    assert "field 'mamba_expand' is nan" in line and "plugin" not in line


def test_d17_falcon_h1_still_builds_from_mamba_expand() -> None:
    specs = build_hf_model(FALCON_H1).specs
    assert len(specs) == 8


def test_hf_config_integer_bounds_are_per_field() -> None:
    config = HFConfig(
        {"num_hidden_layers": MAX_HF_LAYERS, "sliding_window": 1 << 40, "head_dim": 1 << 33}, "c"
    )
    assert config.integer("num_hidden_layers") == MAX_HF_LAYERS
    assert config.integer("sliding_window") == 1 << 40
    with pytest.raises(ModelFileError, match="'head_dim' is 8589934592; it must be <= 4,294,967,296"):
        config.integer("head_dim")
    assert config.integer("head_dim", maximum=1 << 40) == 1 << 33


@pytest.mark.parametrize("dtype", ["bool", "int8", "float8_e4m3fn", "float64", ["bfloat16"]])
def test_torch_dtype_must_be_a_model_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: Any
) -> None:
    folder = hf_dir(tmp_path, "qwen3-coder-next", torch_dtype=dtype)
    with pytest.raises(
        ModelFileError, match=r"'torch_dtype' is .*not a model dtype.*bfloat16, float16, float32"
    ):
        build_hf_model(folder)
    assert "torch_dtype" in cli(capsys, "plan", "--hf-config", str(folder), "--memory", "80GiB")


@pytest.mark.parametrize("dtype", ["int8", "bool", "uint8", "float8_e5m2"])
def test_dtype_option_must_be_a_model_dtype(capsys: pytest.CaptureFixture[str], dtype: str) -> None:
    with pytest.raises(ConfigError, match="not a model dtype; use auto or one of bfloat16, float16, float32"):
        HFOptions(dtype=dtype)
    line = cli(
        capsys,
        "plan",
        "--hf-config",
        str(EXAMPLES / "qwen3-coder-next"),
        "--memory",
        "80GiB",
        "--dtype",
        dtype,
    )
    assert "not a model dtype" in line


def test_dtype_aliases_still_work() -> None:
    assert HFOptions(dtype="bf16").dtype == "bfloat16" and HFOptions(dtype="half").dtype == "float16"


@pytest.mark.parametrize(
    "changes",
    [
        {"tensor_parallel_size": 0},
        {"tensor_parallel_size": 10**400},
        {"block_size": 1.5},
        {"num_speculative_tokens": -1},
        {"max_model_len": 10**30},
        {"kv_cache_dtype": ["fp8"]},
    ],
)
def test_hf_options_are_bounded(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        HFOptions(**changes)


# -- D18: Python API inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategies", [5, 1.5, [1], ["vllm", None], {"vllm": 1}, [""]])
def test_d18_planner_strategies_type(strategies: Any) -> None:
    with pytest.raises(PluginError, match=r"strategies = .* is not allowed: give None .* a preset name"):
        kvrules.Planner(strategies)


def test_d18_unify_needs_a_mapping() -> None:
    with pytest.raises(SpecError, match="specs must be a mapping of layer name to spec"):
        kvrules.Planner("vllm").unify(None)  # type: ignore[arg-type]


# -- usage errors ---------------------------------------------------------------------------------------------


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unrecognized arguments" in cli(capsys, "plan", "--no-such-flag")
    assert "kvrules plan --help" in cli(capsys, "plan", "--kv-cache-dtype", "int4")
