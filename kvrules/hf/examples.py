"""Built-in Hugging Face examples: real ``config.json`` files shipped in ``kvrules/examples/hf/``.

Each example is a folder with ``config.json``, optionally ``draft.json``, and ``example.json``
(``description``, ``draft`` — a file name or ``"mtp"`` — ``options`` for :class:`HFOptions`,
``available_memory`` and ``engine`` settings). Example names are the folder names prefixed
``hf-`` (``hf-qwen3-coder-next``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from kvrules.errors import ModelFileError
from kvrules.hf.build import MTP, HFModelFile, build_hf_model
from kvrules.hf.config import HFConfig
from kvrules.hf.options import HFOptions
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.plugin.presets import StrategySpec
from kvrules.units import parse_size

PREFIX = "hf-"


def _root() -> Traversable:
    return resources.files("kvrules") / "examples" / "hf"


def hf_example_names() -> list[str]:
    """Names of the built-in Hugging Face examples (``hf-...``)."""
    root = _root()
    if not root.is_dir():
        return []
    return sorted(PREFIX + p.name for p in root.iterdir() if p.is_dir() and (p / "example.json").is_file())


def _read(folder: Traversable, name: str, what: str) -> dict[str, Any]:
    item = folder / name
    try:
        data = json.loads(item.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{item}: cannot read the {what}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{item}: the {what} must be a JSON object")
    return data


@dataclass(frozen=True)
class HFExample:
    """One built-in example: the configs and the settings it is planned with."""

    name: str
    description: str
    config: HFConfig
    draft: HFConfig | str | None
    options: HFOptions
    available_memory: list[int] | None
    engine: dict[str, Any]

    @property
    def path(self) -> str:
        """The folder holding ``config.json`` (usable as ``--hf-config``)."""
        return str(_root() / self.name[len(PREFIX) :])


def load_hf_example_info(
    name: str, overrides: Mapping[str, Any] | None = None, *, reader: str = "auto"
) -> HFExample:
    """The example ``name`` with ``overrides`` applied to its options, its configs read by
    ``reader`` (:data:`~kvrules.hf.config.READERS`).

    :raises ModelFileError: an unknown name (listing the available ones).
    """
    if name not in hf_example_names():
        raise ModelFileError(
            f"unknown Hugging Face example {name!r}; available: {', '.join(hf_example_names())}"
        )
    folder = _root() / name[len(PREFIX) :]
    spec = _read(folder, "example.json", "example settings")
    config = HFConfig(_read(folder, "config.json", "config"), str(folder / "config.json"), reader=reader)
    draft_name = spec.get("draft")
    draft: HFConfig | str | None = None
    if draft_name == MTP:
        draft = MTP
    elif isinstance(draft_name, str):
        draft = HFConfig(_read(folder, draft_name, "draft config"), str(folder / draft_name), reader=reader)
    values = dict(spec.get("options", {}))
    values.update(overrides or {})
    memory = spec.get("available_memory")
    return HFExample(
        name=name,
        description=str(spec.get("description", "")),
        config=config,
        draft=draft,
        options=HFOptions.from_dict(values),
        available_memory=[parse_size(m) for m in memory] if memory else None,
        engine=dict(spec.get("engine", {})),
    )


def load_hf_example(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
    reader: str = "auto",
) -> HFModelFile:
    """Build the example ``name`` into a model file (its memory and engine settings included;
    ``reader`` as :func:`load_hf_example_info` takes it)."""
    example = load_hf_example_info(name, overrides, reader=reader)
    model = build_hf_model(
        example.config, example.draft, example.options, strategies=strategies, plugin_manager=plugin_manager
    )
    out = model.to_model_file(example.available_memory)
    out.engine = {**out.engine, **example.engine}
    if example.options.max_model_len is not None:
        out.engine["max_model_len"] = example.options.max_model_len
    out.description = example.description
    return out
