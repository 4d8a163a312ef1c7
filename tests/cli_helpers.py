"""Running the ``kvrules`` command line in tests."""

from __future__ import annotations

import pytest

from kvrules.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``kvrules ARGV``: exit status, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
