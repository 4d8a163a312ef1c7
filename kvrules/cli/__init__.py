"""The ``kvrules`` command line (``kvrules.cli.main``); :func:`main` is the console script."""

from kvrules.cli.main import main

__all__ = ["main"]
