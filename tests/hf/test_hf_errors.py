"""Bad Hugging Face input: a ModelFileError naming the file and the field; exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvrules import ConfigError, KVRulesError, ModelFileError, PluginError
from kvrules.cli.main import main
from kvrules.hf import HFOptions, build_hf_model

GOOD = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}

#: a decoder only the generic architecture claims (read by the built-in reader: no config class)
GENERIC = {"model_type": "my_decoder", "num_hidden_layers": 8, "num_attention_heads": 8, "hidden_size": 1024}


def write(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["plan", *argv, "--memory", "1GiB", "--max-model-len", "4096"])
    _, err = capsys.readouterr()
    return code, err


CASES: list[tuple[str, Any, dict[str, Any], list[str]]] = [
    ("invalid JSON", '{"model_type": "llama",', {}, ["invalid JSON", "line 1"]),
    ("not an object", "[1, 2]", {}, ["must be an object"]),
    (  # a model type no config class knows: no class default fills the gap
        "missing field",
        {"model_type": "my_decoder", "num_hidden_layers": 8, "num_attention_heads": 8},
        {},
        ["'hidden_size'", "missing", "head_dim"],
    ),
    ("negative heads", {**GOOD, "num_key_value_heads": -2}, {}, ["'num_key_value_heads'", "-2", ">= 1"]),
    ("not an integer", {**GOOD, "num_hidden_layers": "48"}, {}, ["'num_hidden_layers'", "integer"]),
    (
        "tp does not divide heads",
        GOOD,
        {"tensor_parallel_size": 3},
        ["'num_attention_heads'", "16", "tensor_parallel_size 3"],
    ),
    (
        "tp does not divide kv heads",
        {**GOOD, "num_key_value_heads": 6},
        {"tensor_parallel_size": 4},
        ["'num_key_value_heads'", "6"],
    ),
    (
        "tp does not divide GDN heads",
        {**GOOD, "linear_num_value_heads": 36},
        {"tensor_parallel_size": 8},
        ["'linear_num_value_heads'", "36"],
    ),
    (
        "bad layer_types",
        {**GENERIC, "layer_types": ["full_attention"] * 7 + ["mystery"]},
        {},
        ["'layer_types'", "mystery"],
    ),
    (
        "short layer_types",
        {**GENERIC, "layer_types": ["full_attention"]},
        {},
        ["'layer_types'", "has 1 entries"],
    ),
    (
        "unknown architecture",
        {"model_type": "mystery", "architectures": ["MysteryForCausalLM"]},
        {},
        ["mystery", "Supported: ", "qwen3-next", "kvrules_register_architectures"],
    ),
]


@pytest.mark.parametrize(("what", "data", "options", "words"), CASES, ids=[c[0] for c in CASES])
def test_api_error_names_file_and_field(
    tmp_path: Path, what: str, data: Any, options: dict[str, Any], words: list[str]
) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ModelFileError) as info:
        build_hf_model(path, None, HFOptions(**options))
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(("what", "data", "options", "words"), CASES, ids=[c[0] for c in CASES])
def test_cli_exit_code_2_without_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    data: Any,
    options: dict[str, Any],
    words: list[str],
) -> None:
    path = write(tmp_path, data)
    flags = ["--tp", str(options["tensor_parallel_size"])] if options else []
    code, err = cli(capsys, "--hf-config", str(path), *flags)
    assert code == 2
    assert "Traceback" not in err
    assert err.startswith("kvrules: error: ") and str(path) in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(ModelFileError, match="not found"):
        build_hf_model(missing)
    code, err = cli(capsys, "--hf-config", str(missing))
    assert code == 2 and str(missing) in err and "Traceback" not in err


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"no config\.json"):
        build_hf_model(tmp_path)


def test_a_directory_is_accepted(tmp_path: Path) -> None:
    write(tmp_path, GOOD)
    assert len(build_hf_model(tmp_path).specs) == 8


def test_the_draft_file_is_named(tmp_path: Path) -> None:
    target = write(tmp_path, GOOD)
    draft = write(
        tmp_path, {"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 0}, "draft.json"
    )
    with pytest.raises(ModelFileError, match=r"draft\.json.*'num_attention_heads'"):
        build_hf_model(target, draft)


def test_option_errors_are_config_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    code, err = cli(capsys, "--hf-config", str(path), "--mamba-block-size", "64")
    assert code == 2 and "mamba_cache_mode 'all'" in err
    with pytest.raises(ConfigError):
        HFOptions(tensor_parallel_size=-1)


def test_hf_flags_need_an_hf_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = cli(capsys, "--example", "llama3-8b", "--tp", "2")
    assert code == 2 and "--tensor-parallel-size" in err and "--hf-config" in err


def test_a_broken_architecture_plugin_is_named() -> None:
    import kvrules
    from kvrules.hf import Architecture

    class Broken(Architecture):
        def build(self, config: Any, settings: Any) -> Any:
            raise RuntimeError("boom")

    class Plugin:
        name = "test-broken-arch"

        @kvrules.hookimpl
        def kvrules_register_architectures(self, registry: Any) -> None:
            registry.add(Broken(name="broken", priority=10_000, model_types=("qwen3_next",)))

    pm = kvrules.get_plugin_manager(autoload=False, plugins=[Plugin()])
    with pytest.raises(PluginError, match=r"architecture .broken..*RuntimeError in build: boom"):
        build_hf_model(GOOD, plugin_manager=pm)


def test_every_error_is_a_kvrules_error() -> None:
    assert issubclass(ModelFileError, KVRulesError) and issubclass(ConfigError, KVRulesError)


# -- the config readers (kvrules/hf/config.py, kvrules/hf/transformers_config.py) ----------------
def test_transformers_refusal_is_exit_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers", exc_type=ImportError)
    path = write(tmp_path, {**GOOD, "layer_types": ["full_attention"] * 7 + ["mystery"]})
    code, err = cli(capsys, "--hf-config", str(path), "--hf-reader", "transformers")
    assert code == 2
    assert err.startswith(f"kvrules: error: {path}: field 'layer_types' (entry 7 is 'mystery')")
    assert "Traceback" not in err
    # the built-in reader (auto's choice for this model type) leaves the refusal to the architecture
    code, err = cli(capsys, "--hf-config", str(path))
    assert code == 2
    assert err.startswith(f"kvrules: error: {path}: field 'layer_types' entry 7 is 'mystery'")


def test_huge_layer_count_is_refused_before_any_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvrules.hf import transformers_config

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("transformers was handed a 10**7-layer config")

    monkeypatch.setattr(transformers_config, "read_with_transformers", never)
    path = write(tmp_path, {"model_type": "gemma3_text", "num_hidden_layers": 10**7})
    code, err = cli(capsys, "--hf-config", str(path))
    assert code == 2 and "'num_hidden_layers' is 10000000; it must be <= 100,000" in err


def test_class_default_head_dim_reaches_the_specs() -> None:
    config = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "hidden_size": 3840,
        "num_attention_heads": 16,
    }
    model = build_hf_model(config)
    assert {getattr(spec, "head_size", None) for spec in model.specs.values()} == {
        256
    }  # Gemma3TextConfig's, not 3840 / 16
    assert model.target.config.origin("head_dim") == "class default"
    assert "head_dim = 256 (Gemma3TextConfig default)" in model.target.config.reading_note()


def test_braces_in_a_model_name_are_text_not_a_format() -> None:
    """A decline's reason quotes the model's class name as it is: braces in it are text
    (fuzz seed 12, HF configs input 414 ended in a ValueError from str.format)."""
    model = build_hf_model({**GENERIC, "architectures": ["My{Decoder}ForCausalLM"]})
    declined = [d.reason for d in model.decisions if d.stage == "arch" and d.outcome == "declined"]
    assert declined and all(r.startswith("target My{Decoder}ForCausalLM: ") for r in declined)
