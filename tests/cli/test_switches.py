"""Boolean environment switches read as architecture section 8 reads them."""

from __future__ import annotations

import pytest

from kvrules import ConfigError
from kvrules.switches import flag


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " yes ", "On"])
def test_on_values(value: str) -> None:
    assert flag("KVRULES_X", {"KVRULES_X": value}) is True


@pytest.mark.parametrize("value", ["0", "false", "No", "off", "", "  "])
def test_off_values_and_unset(value: str) -> None:
    assert flag("KVRULES_X", {"KVRULES_X": value}) is False
    assert flag("KVRULES_X", {}) is False


@pytest.mark.parametrize("value", ["2", "enabled", "ja", "true!"])
def test_anything_else_is_an_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"KVRULES_X={value!r} is not a boolean"):
        flag("KVRULES_X", {"KVRULES_X": value})


def test_the_process_environment_is_read_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("KVRULES_X", "yes")
    before = dict(os.environ)
    assert flag("KVRULES_X") is True
    assert dict(os.environ) == before
