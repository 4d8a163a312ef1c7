"""The two Hugging Face config readers (kvrules/hf/config.py): transformers' config classes and
the built-in class-default table (kvrules/hf/defaults.py) agree, limits run first, refusals name
the field, and nothing reaches the network.

The transformers side is skipped when transformers is absent (the ``dev`` extra installs it).
"""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvrules import ConfigError, ModelFileError
from kvrules.hf import build_hf_model, defaults
from kvrules.hf import transformers_config as tf
from kvrules.hf.config import (
    BUILTIN,
    CHANGED,
    CLASS_DEFAULT,
    FILE,
    MAX_HF_LAYERS,
    TRANSFORMERS,
    HFConfig,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DIRS = (ROOT / "kvrules" / "examples" / "hf", ROOT / "tests" / "data" / "hf")


def _shipped() -> Iterator[Path]:
    for folder in SHIPPED_DIRS:
        for path in sorted(folder.glob("*/*.json")):
            if path.name != "example.json":
                yield path


def _configs() -> list[Path]:
    """Every config.json (and draft config) kvrules ships, examples and test corpus."""
    out = []
    for path in _shipped():
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "model_type" in data:
            out.append(path)
    return out


SHIPPED = _configs()


def _plain(value: Any) -> Any:
    """Tuples as lists (transformers keeps some sequences as tuples)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fields(config: HFConfig) -> dict[str, Any]:
    return {key: _plain(config.get(key)) for key in defaults.CACHE_FIELDS}


def _disagreements(data: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    builtin = _fields(HFConfig(data, "<builtin>", reader="builtin"))
    ours = _fields(HFConfig(data, "<transformers>", reader="transformers"))
    return {k: (builtin[k], ours[k]) for k in defaults.CACHE_FIELDS if builtin[k] != ours[k]}


@pytest.fixture
def transformers() -> Any:
    return pytest.importorskip("transformers", exc_type=ImportError)


# -- agreement ------------------------------------------------------------------------------
def test_kvrules_ships_configs() -> None:
    assert len(SHIPPED) >= 6  # the examples at least; the corpus adds ~60


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_readers_agree_on_every_shipped_config(transformers: Any, path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert _disagreements(data) == {}


def _both_know(data: dict[str, Any]) -> bool:
    """The built-in table has the config's (text) model type and transformers a class for it."""
    config = HFConfig(data, "<x>")
    return config.builtin_knows and tf.transformers_class(config.model_type) is not None


def _built(data: dict[str, Any], reader: str) -> tuple[Any, list[str]]:
    """The specs ``build_hf_model`` makes of ``data`` read by ``reader`` (or the error it raises),
    and every decision's sentence with the reader's own description cut out."""
    config = HFConfig(data, "<config>", reader=reader)
    try:
        model = build_hf_model(config)
    except ModelFileError as exc:
        return str(exc), []
    said = config.reading.describe()
    assert said in " ".join(d.reason for d in model.decisions)  # the plan still names the reader
    return model.specs, [d.reason.replace(said, "<reader>") for d in model.decisions]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_readers_build_the_same_specs_from_every_shipped_config(transformers: Any, path: Path) -> None:
    """Same specs and the same decisions, but for the reader's name, from either reader (what lets
    ``reader="auto"`` take the built-in reader for every model type it knows)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not _both_know(data):
        pytest.skip(f"model type {data.get('model_type')!r} is read by one reader only")
    builtin, transformers_built = _built(data, "builtin"), _built(data, "transformers")
    assert builtin[0] == transformers_built[0]
    assert builtin[1] == transformers_built[1]


def test_most_shipped_configs_are_read_by_both() -> None:
    both = [p for p in SHIPPED if _both_know(json.loads(p.read_text(encoding="utf-8")))]
    assert len(both) >= 50, "the spec agreement above must cover most of the corpus"


#: model types whose class the defaults table mirrors and transformers can build offline
TABLE_TYPES = sorted(t for t in defaults.CLASS_DEFAULTS if t not in defaults.REMOTE_CODE_MODEL_TYPES)

#: small variations of a bare config, so rules that depend on other fields are exercised too
VARIANTS: list[dict[str, Any]] = [
    {},
    {"num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 16},
    {"num_hidden_layers": 6, "use_sliding_window": True, "sliding_window": 512, "max_window_layers": 2},
    {"num_hidden_layers": 12, "sliding_window_pattern": 3, "num_key_value_heads": None},
    {"num_hidden_layers": 8, "no_rope_layers": [], "full_attention_interval": 2},
]


@pytest.mark.parametrize("model_type", TABLE_TYPES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_defaults_table_matches_transformers_classes(
    transformers: Any, model_type: str, variant: int
) -> None:
    data = {"model_type": model_type, **VARIANTS[variant]}
    try:
        HFConfig(data, "<transformers>", reader="transformers").get("num_hidden_layers")
    except ModelFileError:  # the class refuses this variant (e.g. a null count it types as int)
        _fields(HFConfig(data, "<builtin>", reader="builtin"))  # the built-in reader still answers
        return
    assert _disagreements(data) == {}


def test_a_key_the_class_does_not_declare_wins_in_both_readers(transformers: Any) -> None:
    # Zamba2Config derives mamba_headdim and attention_head_dim, then sets the file's own value
    # of such an undeclared key over it (so the zamba2 architecture can refuse a mismatch)
    data = {"model_type": "zamba2", "hidden_size": 2560, "n_mamba_heads": 80, "mamba_headdim": 32}
    for extra in ({}, {"attention_head_dim": 100}, {"head_dim": 100}, {"mamba_headdim": None}):
        assert _disagreements({**data, **extra}) == {}
    assert HFConfig(data, "z.json", reader="builtin").origin("mamba_headdim") == FILE


@pytest.mark.parametrize("wrapper", sorted(defaults.TEXT_MODEL_TYPES))
def test_wrapper_text_config_defaults_agree(transformers: Any, wrapper: str) -> None:
    data = {"model_type": wrapper, "text_config": {"num_hidden_layers": 8, "hidden_size": 2048}}
    assert _disagreements(data) == {}


# -- the defaults, in both readers -------------------------------------------------------
@pytest.fixture(params=["builtin", "transformers"])
def reader(request: pytest.FixtureRequest) -> str:
    if request.param == "transformers":
        pytest.importorskip("transformers", exc_type=ImportError)
    return str(request.param)


def test_gemma3_head_dim_is_the_class_default(reader: str) -> None:
    # gemma-3-12b-it: hidden 3840 / 16 heads = 240, but Gemma3TextConfig (and vLLM) use 256
    data = {
        "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16},
    }
    config = HFConfig(data, "g.json", reader=reader)
    assert config.get("head_dim") == 256
    assert config.origin("head_dim") == CLASS_DEFAULT
    assert "text_config.head_dim = 256 (Gemma3TextConfig default)" in config.reading_note()


def test_gemma3_text_config_without_heads(reader: str) -> None:
    data = {"model_type": "gemma3", "text_config": {"num_hidden_layers": 34, "hidden_size": 2560}}
    config = HFConfig(data, "g.json", reader=reader)
    assert (config.get("num_attention_heads"), config.get("num_key_value_heads"), config.get("head_dim")) == (
        8,
        4,
        256,
    )
    types = config.get("layer_types")
    assert len(types) == 34 and types[5] == "full_attention" and types[4] == "sliding_attention"


def test_llama4_empty_no_rope_layers_means_the_default_pattern(reader: str) -> None:
    data = {"model_type": "llama4", "text_config": {"num_hidden_layers": 8, "no_rope_layers": []}}
    config = HFConfig(data, "l.json", reader=reader)
    assert config.get("no_rope_layers") == [1, 1, 1, 0, 1, 1, 1, 0]
    assert config.origin("no_rope_layers") == CHANGED
    assert "replaced the file's []" in config.describe_value("no_rope_layers")


def test_mistral_sliding_window_default(reader: str) -> None:
    config = HFConfig({"model_type": "mistral", "num_hidden_layers": 2}, "m.json", reader=reader)
    assert config.get("sliding_window") == 4096
    assert config.origin("sliding_window") == CLASS_DEFAULT
    nulled = HFConfig({"model_type": "mistral", "sliding_window": None}, "m.json", reader=reader)
    assert nulled.get("sliding_window") is None  # an explicit null is meant


def test_qwen2_window_only_with_use_sliding_window(reader: str) -> None:
    data = {
        "model_type": "qwen2",
        "sliding_window": 131072,
        "use_sliding_window": False,
        "num_hidden_layers": 4,
    }
    config = HFConfig(data, "q.json", reader=reader)
    assert config.get("sliding_window") is None
    assert config.get("layer_types") == ["full_attention"] * 4


def test_kv_heads_default_to_attention_heads(reader: str) -> None:
    config = HFConfig(
        {"model_type": "llama", "num_attention_heads": 12, "hidden_size": 768}, "l.json", reader=reader
    )
    assert (config.get("num_key_value_heads"), config.get("head_dim")) == (12, 64)


def test_renamed_key_is_read_and_named_as_spelled(reader: str) -> None:
    config = HFConfig({"model_type": "deepseek_v3", "num_mtp_layers": 2}, "d.json", reader=reader)
    assert config.get("num_nextn_predict_layers") == 2
    assert config.origin("num_nextn_predict_layers") == FILE
    assert config.where("num_nextn_predict_layers") == "num_mtp_layers"
    assert (
        config.first_present(("mtp_num_hidden_layers", "num_nextn_predict_layers"))
        == "num_nextn_predict_layers"
    )


def test_nemotron_h_as_transformers_5_saves_it(reader: str) -> None:
    data = {"model_type": "nemotron_h", "layers_block_type": ["mamba", "attention", "mlp", "moe", "mamba"]}
    config = HFConfig(data, "n.json", reader=reader)
    assert config.get("num_hidden_layers") == 5
    assert config.get("hybrid_override_pattern") == "M*-EM"


def test_file_values_win_and_say_so(reader: str) -> None:
    config = HFConfig({"model_type": "gemma3_text", "head_dim": 128}, "g.json", reader=reader)
    assert config.get("head_dim") == 128
    assert config.origin("head_dim") == FILE
    assert config.describe_value("head_dim") == "head_dim = 128 (from the file)"


def test_unknown_model_type_reads_the_file_only(reader: str) -> None:
    config = HFConfig({"model_type": "no_such_model", "head_dim": 64}, "u.json", reader=reader)
    assert config.get("head_dim") == 64
    assert config.get("num_key_value_heads") is None
    assert config.reading.reader == BUILTIN


# -- which reader, and why --------------------------------------------------------------------
def test_auto_reads_every_type_the_builtin_reader_knows_without_transformers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("auto asked transformers about a model type the built-in reader knows")

    monkeypatch.setattr(tf, "transformers_installed", never)
    monkeypatch.setattr(tf, "read_with_transformers", never)
    for model_type in sorted(defaults.CLASS_DEFAULTS):
        config = HFConfig({"model_type": model_type}, "x.json")
        assert config.builtin_knows
        assert config.reading.reader == BUILTIN
        assert config.reading.class_name == defaults.CLASS_DEFAULTS[model_type].class_name
    wrapper = HFConfig({"model_type": "gemma3", "text_config": {"hidden_size": 2560}}, "g.json")
    assert wrapper.get("head_dim") == 256
    note = wrapper.reading_note()
    assert note.startswith("read by the built-in reader (Gemma3TextConfig): model type 'gemma3_text' is in")
    assert f"transformers {defaults.DEFAULTS_VERSION}'s class defaults" in note


def test_auto_reads_other_types_with_transformers(transformers: Any) -> None:
    config = HFConfig({"model_type": "gpt_neox"}, "g.json")
    assert not config.builtin_knows
    assert config.reading.reader == TRANSFORMERS
    assert config.reading.class_name == "GPTNeoXConfig"
    assert f"transformers {transformers.__version__}" in config.reading_note()
    asked = HFConfig({"model_type": "llama"}, "l.json", reader="transformers")
    assert (asked.reading.reader, asked.reading.class_name) == (TRANSFORMERS, "LlamaConfig")


def test_auto_without_transformers_reads_every_type_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tf, "transformers_installed", lambda: False)
    config = HFConfig({"model_type": "gpt_neox", "head_dim": 64}, "g.json")
    assert config.get("head_dim") == 64
    assert config.reading.reader == BUILTIN
    assert "transformers is not installed" in config.reading_note()
    with pytest.raises(ConfigError, match="needs transformers"):
        _ = HFConfig({"model_type": "llama"}, "l.json", reader="transformers").reading


def test_auto_does_not_import_transformers_for_known_types() -> None:
    code = (
        "import sys\n"
        "from kvrules.hf import model_from_hf\n"
        f"model = model_from_hf({str(ROOT / 'tests' / 'data' / 'hf' / 'Qwen__Qwen3-Next-80B-A3B-Instruct')!r})\n"
        "assert model.hf.target.config.reading.reader == 'built-in', model.hf.target.config.reading\n"
        "assert 'transformers' not in sys.modules, 'transformers imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_unknown_reader_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"reader='pytorch'.*auto, transformers, builtin"):
        HFConfig({}, "x.json", reader="pytorch")


@pytest.mark.parametrize("model_type", defaults.REMOTE_CODE_MODEL_TYPES)
def test_remote_code_types_go_to_the_builtin_reader(
    transformers: Any, monkeypatch: pytest.MonkeyPatch, model_type: str
) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("transformers was asked to read a remote-code model type")

    monkeypatch.setattr(tf, "read_with_transformers", never)
    assert tf.transformers_class(model_type) is None
    config = HFConfig({"model_type": model_type, "num_hidden_layers": 3}, "r.json", reader="transformers")
    assert config.get("num_hidden_layers") == 3
    assert config.reading.reader == BUILTIN
    assert "remote code" in config.reading.why


def test_remote_code_types_have_builtin_defaults() -> None:
    internlm3 = HFConfig(
        {"model_type": "internlm3", "hidden_size": 4096, "num_attention_heads": 32}, "i.json"
    )
    assert (internlm3.get("head_dim"), internlm3.get("num_key_value_heads")) == (128, 32)
    kimi = HFConfig({"model_type": "kimi_k2"}, "k.json")
    assert (kimi.get("kv_lora_rank"), kimi.get("qk_rope_head_dim")) == (512, 64)


# -- limits first, refusals named ----------------------------------------------------------------
def test_huge_layer_count_is_refused_before_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(tf, "read_with_transformers", lambda *a, **k: calls.append(a))
    for model_type in ("gemma3_text", "llama4_text"):
        config = HFConfig({"model_type": model_type, "num_hidden_layers": 10**7}, "big.json", reader="auto")
        with pytest.raises(
            ModelFileError, match=r"big.json: field 'num_hidden_layers' is 10000000; it must be <= 100,000"
        ):
            config.get("head_dim")
    assert calls == []


def test_huge_per_layer_list_is_refused_before_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(tf, "read_with_transformers", lambda *a, **k: calls.append(a))
    data = {"model_type": "qwen3", "text_config": {"layer_types": ["full_attention"] * (MAX_HF_LAYERS + 1)}}
    with pytest.raises(ModelFileError, match=r"'text_config.layer_types' has 100,001 entries"):
        HFConfig(data, "big.json").get("num_hidden_layers")
    assert calls == []


def test_nan_count_is_refused_before_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(tf, "read_with_transformers", lambda *a, **k: calls.append(a))
    config = HFConfig({"model_type": "llama", "num_attention_heads": math.nan}, "nan.json")
    with pytest.raises(
        ModelFileError, match=r"^nan.json: field 'num_attention_heads' is nan; it must be an integer$"
    ):
        config.get("head_dim")
    assert calls == []


def test_transformers_type_error_names_the_field(transformers: Any) -> None:
    config = HFConfig({"model_type": "llama", "vocab_size": 1.5}, "v.json", reader="transformers")
    with pytest.raises(ModelFileError) as info:
        config.get("head_dim")
    text = str(info.value)
    assert text.startswith("v.json: field 'vocab_size' is refused by transformers' LlamaConfig")
    assert "it must be an integer" in text


def test_layer_types_length_mismatch_is_refused_before_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(tf, "read_with_transformers", lambda *a, **k: calls.append(a))
    data = {
        "model_type": "gemma3",
        "text_config": {"num_hidden_layers": 4, "layer_types": ["full_attention"]},
    }
    message = r"'text_config.layer_types' has 1 entries; it needs exactly one per layer \(text_config.num_hidden_layers = 4\)"
    with pytest.raises(ModelFileError, match=message):
        HFConfig(data, "g.json").get("head_dim")
    assert calls == []


def test_layer_types_length_mismatch_with_the_class_default_names_the_field(transformers: Any) -> None:
    data = {
        "model_type": "gemma3",
        "text_config": {"layer_types": ["full_attention"]},
    }  # 26 layers by default
    with pytest.raises(
        ModelFileError, match=r"^g.json: field 'text_config.layer_types' is refused by transformers'"
    ):
        HFConfig(data, "g.json", reader="transformers").get("head_dim")


def test_unknown_layer_kind_names_the_entry(transformers: Any) -> None:
    data = {
        "model_type": "qwen3",
        "num_hidden_layers": 3,
        "layer_types": ["full_attention", "mystery", "full_attention"],
    }
    with pytest.raises(
        ModelFileError, match=r"^q.json: field 'layer_types' \(entry 1 is 'mystery'\) is refused"
    ):
        HFConfig(data, "q.json", reader="transformers").get("head_dim")


def test_pattern_transformers_cannot_map_names_the_field(transformers: Any) -> None:
    data = {"model_type": "nemotron_h", "hybrid_override_pattern": "M*X"}
    with pytest.raises(ModelFileError, match=r"^n.json: field 'hybrid_override_pattern' is refused"):
        HFConfig(data, "n.json", reader="transformers").get("num_hidden_layers")


def test_any_transformers_exception_becomes_a_model_file_error(
    transformers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BrokenConfig:
        @staticmethod
        def from_dict(data: Any) -> Any:
            raise RuntimeError("something inside transformers")

    monkeypatch.setattr(tf, "transformers_class", lambda model_type: BrokenConfig)
    with pytest.raises(
        ModelFileError, match=r"^x.json: transformers' BrokenConfig cannot read the config: something"
    ):
        HFConfig({"model_type": "llama"}, "x.json", reader="transformers").get("head_dim")


# -- offline, lazy -------------------------------------------------------------------------------
def test_no_network_when_reading(transformers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network access while reading a config")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for model_type in ("llama", "gemma3", "qwen3_next", "deepseek_v3"):
        assert HFConfig({"model_type": model_type}, "x.json", reader="transformers").get("num_hidden_layers")
    import os

    assert os.environ.get("HF_HUB_OFFLINE") is None  # offline per call, never through the environment


def test_importing_kvrules_does_not_import_transformers() -> None:
    code = (
        "import sys, kvrules, kvrules.hf, kvrules.cli.main\n"
        "from kvrules.hf.config import HFConfig\n"
        "HFConfig({'model_type': 'llama'}, 'x', reader='builtin').get('head_dim')\n"
        "assert 'transformers' not in sys.modules, 'transformers imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_reading_happens_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = HFConfig._read

    def counted(self: HFConfig) -> Any:
        calls.append(self.source)
        return original(self)

    monkeypatch.setattr(HFConfig, "_read", counted)
    config = HFConfig({"model_type": "llama"}, "x.json", reader="builtin")
    for key in defaults.CACHE_FIELDS:
        config.get(key)
    assert calls == ["x.json"]


#: fields the architectures read that do not shape the cache (identity, dtypes, encoder flags)
NOT_CACHE_FIELDS = frozenset({"is_encoder_decoder", "torch_dtype", "dtype", "model_type", "architectures"})
_ACCESS = re.compile(
    r"\b(?:config|cfg|dcfg)\.(?:integer|opt_int|number|flag|string|sequence|get|has|raw|given|first_present)"
    r"\(\s*(\(?[^)]*)"
)


def _first_argument_keys(arguments: str) -> list[str]:
    """The field names of an accessor's first argument: one literal, or a tuple of them."""
    first = arguments.strip()
    part = first[1:].split(")")[0] if first.startswith("(") else first.split(",")[0]
    return re.findall(r"""["']([a-z][A-Za-z0-9_]*)["']""", part)


def test_the_registry_names_every_field_the_architectures_read() -> None:
    sources = [*sorted((ROOT / "plugins").glob("*.py")), *sorted((ROOT / "kvrules" / "hf").glob("*.py"))]
    read: dict[str, str] = {}
    for path in sources:
        for call in _ACCESS.finditer(path.read_text(encoding="utf-8")):
            for key in _first_argument_keys(call.group(1)):
                read.setdefault(key, path.name)
    assert "num_hidden_layers" in read  # the scan finds the accessors
    missing = {k: f for k, f in read.items() if k not in defaults.CACHE_FIELDS and k not in NOT_CACHE_FIELDS}
    assert missing == {}, "add these to kvrules.hf.defaults.CACHE_FIELDS (with their class defaults)"


@pytest.mark.parametrize("reader", ["builtin", "transformers"])
def test_a_non_finite_float_as_transformers_saves_it_is_read(reader: str, tmp_path: Path) -> None:
    """transformers 5 writes Mamba2's ``time_step_limit`` ``(0.0, inf)`` as ``[0.0, {"__float__":
    "Infinity"}]``; both readers take such a file (transformers refused it when handed the raw
    object: "doesn't match any type in (list[float], ...)")."""
    if reader == "transformers":
        pytest.importorskip("transformers")
    data = json.loads(
        (ROOT / "tests" / "data" / "hf" / "state-spaces__mamba2-2.7b" / "config.json").read_text()
    )
    data["time_step_limit"] = [0.0, {"__float__": "Infinity"}]
    (tmp_path / "config.json").write_text(json.dumps(data))
    config = HFConfig.load(tmp_path, reader=reader)
    assert config.integer("num_hidden_layers") == data["num_hidden_layers"]


def test_special_floats_decodes_only_the_tagged_objects() -> None:
    decoded = tf.special_floats({"a": [0.0, {"__float__": "Infinity"}], "b": {"__float__": "-Infinity"}})
    assert decoded["a"][1] == math.inf and decoded["b"] == -math.inf
    assert math.isnan(tf.special_floats({"__float__": "NaN"}))
    untouched = {"__float__": "many"}, {"__float__": "Infinity", "other": 1}
    assert [tf.special_floats(v) for v in untouched] == list(untouched)
