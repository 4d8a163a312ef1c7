"""Mutations of JSON documents (model files, Hugging Face configs), as replayable data.

A mutation is a small dict (``{"op": "set", "at": 17, "value": ...}``); :func:`apply` replays a
list of them on a decoded document, then on its bytes. Because mutations are data, a failing
input shrinks by dropping mutations, and the reproducer prints as JSON.

Tree ops pick their node by ``at`` modulo the number of candidate nodes at the time they apply:
``set`` (a hostile value), ``delete``, ``rename`` (a key), ``dup`` (a duplicate key), ``swap``
(the value's JSON type), ``deep`` (deep nesting), ``copy`` (a layer copied many times), ``top``
(a top-level key added), ``wrap`` (a layer made a uniform-type group), ``field`` (a named config field or engine setting set), ``scale`` (an integer leaf multiplied: benign). Byte ops apply to the serialised text: ``flip``, ``insert`` (invalid
UTF-8, a BOM, a stray bracket), ``truncate``, ``encode`` (UTF-16/32, latin-1).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from fuzz.draw import Draw

Path = tuple[Any, ...]


class Raw(str):
    """JSON text written as it is (``1e400``, ``NaN``, 400 digits, deep nesting)."""


class Dup(list):  # type: ignore[type-arg]
    """An object written with the ``(key, value)`` pairs it holds, duplicates kept."""


def dumps(node: Any) -> str:
    """``node`` as JSON text, with :class:`Raw` and :class:`Dup` nodes as they are."""
    if isinstance(node, Raw):
        return str(node)
    if isinstance(node, Dup):
        return "{" + ", ".join(f"{json.dumps(k)}: {dumps(v)}" for k, v in node) + "}"
    if isinstance(node, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dumps(v)}" for k, v in node.items()) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(dumps(v) for v in node) + "]"
    return json.dumps(node)


def _toml_value(node: Any) -> str:
    if isinstance(node, Raw):
        return str(node)
    if isinstance(node, Dup):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in node) + "}"
    if isinstance(node, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in node.items()) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_toml_value(v) for v in node) + "]"
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(node), repr(node))
    if node is None:
        return '""'
    return json.dumps(node)


def toml_dumps(node: Any) -> str:
    """``node`` as TOML: one ``key = value`` line per top-level key, inline tables below
    (``null`` becomes ``""``; a top level that is not an object becomes ``value = ...``)."""
    if not isinstance(node, dict) or isinstance(node, Dup):
        return f"value = {_toml_value(node)}\n"
    return "".join(f"{json.dumps(str(k))} = {_toml_value(v)}\n" for k, v in node.items())


#: hostile JSON values (Raw: text no Python value would serialise to)
VALUES: tuple[Any, ...] = (
    0,
    -1,
    1.5,
    3.9,
    True,
    False,
    None,
    "",
    "16",
    [],
    {},
    [[]],
    2**63,
    2**64,
    2**31,
    Raw("1e400"),
    Raw("-1e400"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("9" * 400),
    Raw("1" + "0" * 5000),
    Raw('"\\ud800"'),
    Raw('"\\u0000"'),
    "bfloat16",
    "full_attention",
    {"type": []},
    ["full_attention"],
    1e-300,
    -0.0,
)
#: big counts (a model of 10**7 layers): rare, they may be slow where unbounded
BIG: tuple[Any, ...] = (10**7, 10**9, 10**30, 2**40)
DEPTHS = (50, 65, 1000, 100_000)
INSERTS = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x00", b'"', b"{", b"]", b",", b"\\")
ENCODINGS = ("utf-16", "utf-32", "latin-1", "utf-8-sig")
TOP = {
    "workers": ([[["a"]]], [], "x", [[1]], [{"a": 1}], [[]], [None], {"a": 1}),
    "engine": ({"max_model_len": Raw("9" * 400)}, {"draft_layer_prefixes": 5}, [], "x", {"max_model_len": 0}),
    "available_memory": (Raw("1" + "0" * 400), "9" * 400 + "GiB", -1, [], [None], "1.5", 1.5, "40GiB,40GiB"),
    "description": (5, None, [], "\ud800"),
    "layers": ([], {}, None, "x"),
    "bogus": (1,),
}


def paths(node: Any, here: Path = ()) -> list[Path]:
    """Every path below ``node`` (not the root), depth first."""
    out: list[Path] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*here, key))
            out.extend(paths(value, (*here, key)))
    elif isinstance(node, list) and not isinstance(node, Dup):
        for index, value in enumerate(node):
            out.append((*here, index))
            out.extend(paths(value, (*here, index)))
    return out


def _parent(doc: Any, path: Path) -> Any:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node


def _swapped(value: Any) -> Any:
    """``value`` as another JSON type."""
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, str):
        return [value]
    if value is None:
        return {}
    return str(value)


def _set(doc: Any, path: Path, value: Any) -> Any:
    if not path:
        return value
    _parent(doc, path)[path[-1]] = value
    return doc


def _rename(doc: Any, path: Path, name: str) -> None:
    parent = _parent(doc, path)
    if isinstance(parent, dict) and not isinstance(parent, Dup):
        items = [(name if k == path[-1] else k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)


def _dup(doc: Any, path: Path, value: Any) -> Any:
    parent = _parent(doc, path)
    if not isinstance(parent, dict):
        return doc
    pairs = Dup([*parent.items(), (path[-1], value)])
    return _set(doc, path[:-1], pairs) if path[:-1] else pairs


def _copy_layer(doc: Any, count: int) -> None:
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if isinstance(layers, dict) and layers:
        name, spec = next(iter(layers.items()))
        for i in range(count):
            layers[f"{name}.copy{i}"] = copy.deepcopy(spec)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at_node(doc: Any, path: Path, op: dict[str, Any]) -> Any:
    """``doc`` after the node op ``op`` on the node at ``path``."""
    kind = op["op"]
    value = _parent(doc, path)[path[-1]]
    if kind == "delete":
        del _parent(doc, path)[path[-1]]
        return doc
    if kind == "rename":
        _rename(doc, path, op["name"])
        return doc
    if kind == "dup":
        return _dup(doc, path, op["value"])
    if kind == "scale":
        num, den = op["by"]
        return _set(doc, path, max(1, value * num // den))
    if kind == "swap":
        return _set(doc, path, _swapped(value))
    if kind == "deep":
        depth = op["depth"]
        nested = "[" * depth + "]" * depth if op["list"] else '{"a": ' * depth + "1" + "}" * depth
        return _set(doc, path, Raw(nested))
    return _set(doc, path, op["value"])  # set


def _field(doc: Any, op: dict[str, Any]) -> None:
    """Set the field ``op["key"]`` (in ``text_config`` when the field lives there, else at the
    top level; in ``engine`` for a model file's engine setting)."""
    if not isinstance(doc, dict):
        return
    key = op["key"]
    for section in ("text_config", "engine"):
        inner = doc.get(section)
        if isinstance(inner, dict) and (key in inner or (section == "engine" and key in ENGINE_KEYS)):
            inner[key] = op["value"]
            return
    doc[key] = op["value"]


def _wrap_layer(doc: Any, op: dict[str, Any]) -> None:
    """Make one layer of a model file a ``uniform_type`` group of members named ``op["names"]``
    (``{layer}``: the layer's own name), each with the layer's spec."""
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, dict) or not layers:
        return
    name = list(layers)[op["at"] % len(layers)]
    spec = layers[name]
    block = spec.get("block_size", 16) if isinstance(spec, dict) else 16
    members = {str(m).replace("{layer}", name): copy.deepcopy(spec) for m in op["names"]}
    layers[name] = {"type": "uniform_type", "block_size": block, "kv_cache_specs": members}


def _tree_op(doc: Any, op: dict[str, Any]) -> Any:
    """``doc`` after one tree op (it may be replaced entirely)."""
    kind = op["op"]
    if kind == "wrap":
        _wrap_layer(doc, op)
        return doc
    if kind == "field":
        _field(doc, op)
        return doc
    if kind == "top":
        if isinstance(doc, dict):
            doc[op["key"]] = op["value"]
        return doc
    if kind == "copy":
        _copy_layer(doc, op["count"])
        return doc
    candidates = paths(doc)
    if kind == "scale":
        candidates = [p for p in candidates if _is_int(_parent(doc, p)[p[-1]])]
    if not candidates:
        return doc
    return _at_node(doc, candidates[op["at"] % len(candidates)], op)


def _byte_op(data: bytes, op: dict[str, Any]) -> bytes:
    kind = op["op"]
    at = op["at"] % (len(data) + 1)
    if kind == "flip" and data:
        at %= len(data)
        return data[:at] + bytes([op["byte"]]) + data[at + 1 :]
    if kind == "insert":
        return data[:at] + op["bytes"] + data[at:]
    if kind == "truncate":
        return data[:at]
    if kind == "encode":
        try:
            return data.decode("utf-8").encode(op["encoding"])
        except (UnicodeDecodeError, UnicodeEncodeError):
            return data
    return data


BYTE_OPS = frozenset({"flip", "insert", "truncate", "encode"})


def apply(doc: Any, ops: Sequence[dict[str, Any]], *, toml: bool = False) -> bytes:
    """The bytes of ``doc`` (not changed: copied) after ``ops``: tree ops first, then byte ops
    (``toml``: written as TOML rather than JSON)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if op["op"] not in BYTE_OPS:
            doc = _tree_op(doc, op)
    data = (toml_dumps(doc) if toml else dumps(doc)).encode("utf-8", "surrogatepass")
    for op in ops:
        if op["op"] in BYTE_OPS:
            data = _byte_op(data, op)
    return data


def _rename_to(draw: Draw, name_hint: str) -> str:
    return draw.choice((name_hint + "x", "", "\ud800", " type", "TYPE", "type", "block_size", "layers"))


#: fields a targeted ``field`` op sets: Hugging Face config counts and sizes, engine settings
HF_KEYS = (
    "num_hidden_layers",
    "num_key_value_heads",
    "num_attention_heads",
    "head_dim",
    "hidden_size",
    "max_position_embeddings",
    "sliding_window",
    "layer_types",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "linear_conv_kernel_dim",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "mamba_expand",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "torch_dtype",
    "model_type",
    "architectures",
    "text_config",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "sliding_window_pattern",
    "attn_layer_period",
    "attn_layer_offset",
    "hybrid_override_pattern",
    "full_attention_interval",
)
ENGINE_KEYS = (
    "max_model_len",
    "max_num_batched_tokens",
    "num_gpu_blocks_override",
    "draft_layer_prefixes",
    "decode_context_parallel_size",
    "auto_fit_max_model_len",
    "speculative_method",
    "max_num_encoder_input_tokens",
)

#: member names of a layer made a ``uniform_type`` group (``{layer}``: the layer's own name)
WRAP_NAMES = (["{layer}"], ["x"], ["x", "y"], ["{layer}", "{layer}.b"], [])

#: plausible values: a mutation that keeps the document valid most of the time
BENIGN: tuple[Any, ...] = (16, 32, 64, 128, 256, 1, 2, 4096, "bfloat16", "float32", "fp8", 131072, "80GiB")


def field_mutation(draw: Draw, keys: Sequence[str], big: bool = False) -> dict[str, Any]:
    """A hostile value (a big count when ``big``) for one of ``keys``."""
    value = draw.choice(BIG) if big and draw.chance(50) else draw.choice(VALUES)
    return {"op": "field", "key": draw.choice(keys), "value": value}


def mutation(draw: Draw, big: bool = False, mild: bool = False) -> dict[str, Any]:
    """One mutation (``big``: counts of 10**7 and more are possible); a third are benign
    (a plausible value set somewhere), all of them when ``mild``."""
    if mild or draw.chance(33):
        if draw.chance(70):
            return {
                "op": "scale",
                "at": draw.integer(0, 1 << 16),
                "by": draw.choice(((2, 1), (1, 2), (4, 1), (3, 1))),
            }
        return {"op": "set", "at": draw.integer(0, 1 << 16), "value": draw.choice(BENIGN)}
    kind = draw.choice(
        (
            "set",
            "set",
            "set",
            "delete",
            "rename",
            "dup",
            "swap",
            "top",
            "flip",
            "insert",
            "deep",
            "truncate",
            "encode",
            "copy",
            "wrap",
        )
    )
    at = draw.integer(0, 1 << 16)
    values = VALUES + BIG if big else VALUES
    if kind in ("set", "dup"):
        return {"op": kind, "at": at, "value": draw.choice(values)}
    if kind == "rename":
        return {"op": kind, "at": at, "name": _rename_to(draw, "k")}
    if kind == "top":
        key = draw.choice(sorted(TOP))
        return {"op": kind, "key": key, "value": draw.choice(TOP[key])}
    if kind == "flip":
        return {"op": kind, "at": at, "byte": draw.choice((0xFF, 0x00, 0x80, 0xC3, draw.integer(0, 255)))}
    if kind == "insert":
        return {"op": kind, "at": at, "bytes": draw.choice(INSERTS)}
    if kind == "deep":
        return {"op": kind, "at": at, "depth": draw.choice(DEPTHS), "list": draw.boolean()}
    if kind == "encode":
        return {"op": kind, "at": 0, "encoding": draw.choice(ENCODINGS)}
    if kind == "copy":
        return {"op": kind, "count": draw.choice((2, 100, 3000))}
    if kind == "wrap":
        return {"op": kind, "at": at, "names": draw.choice(WRAP_NAMES)}
    return {"op": kind, "at": at}


def mutations(draw: Draw, most: int = 4, big: bool = False, mild: bool = False) -> list[dict[str, Any]]:
    """One to ``most`` mutations (``mild``: benign ones only)."""
    return [mutation(draw, big, mild) for _ in range(draw.integer(1, most))]


def shown_op(op: dict[str, Any]) -> dict[str, Any]:
    """``op`` with long raw values shortened, for reports."""
    out = dict(op)
    for key in ("value", "bytes"):
        text = repr(out.get(key)) if key in out else ""
        if len(text) > 60:
            out[key] = text[:40] + f"... ({len(text)} chars)"
        elif key in out and isinstance(out[key], bytes):
            out[key] = text
    return out


__all__ = ["Dup", "Raw", "apply", "dumps", "toml_dumps", "mutation", "mutations", "paths", "shown_op"]
