"""Parameter counts against published totals (tests/data/fit/published_params.json).

The expected figure is the published one, never one of kvrules' formulas: kvrules' exact count,
rounded the way the publisher rounded it, must equal the published figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvrules.sizing.params import count_params

DATA = Path(__file__).parent.parent / "data"
PUBLISHED = json.loads((DATA / "fit" / "published_params.json").read_text(encoding="utf-8"))


def _entries(unsure: bool) -> list[dict[str, Any]]:
    return [m for m in PUBLISHED["models"] if bool(m["unsure"]) is unsure]


@pytest.mark.parametrize("entry", _entries(False), ids=lambda m: m["config"])
def test_count_matches_published_total(entry: dict[str, Any]) -> None:
    count = count_params(DATA / "hf" / entry["config"] / "config.json")
    rounded = round(count.total / PUBLISHED["unit"], entry["digits"])
    assert rounded == entry["published"], (entry["source"], count.total)


def test_every_entry_names_a_stored_config_and_a_source() -> None:
    for entry in PUBLISHED["models"]:
        assert (DATA / "hf" / entry["config"] / "config.json").is_file(), entry["config"]
        assert entry["source"].startswith("https://"), entry["config"]
        assert entry["quote"], entry["config"]


@pytest.mark.parametrize("entry", _entries(True), ids=lambda m: m["config"])
def test_unsure_totals_within_one_percent(entry: dict[str, Any]) -> None:
    """Unsure figures (second-hand or coarsely rounded) are counted apart: within 1 %."""
    count = count_params(DATA / "hf" / entry["config"] / "config.json")
    published = entry["published"] * PUBLISHED["unit"]
    assert abs(count.total - published) <= 0.01 * published, (entry["source"], count.total)
