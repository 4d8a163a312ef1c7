"""Deprecated 0.1 import path: use ``kvrules.model`` (model files) and ``kvrules.examples``
(the built-in examples); removed in kvrules 0.3."""

import warnings

from kvrules.examples import example_names, load_example
from kvrules.model import ModelFile, load_model_file, parse_model

__all__ = ["ModelFile", "example_names", "load_example", "load_model_file", "parse_model"]

warnings.warn(
    "kvrules.modelfile is deprecated since kvrules 0.2 and is removed in 0.3; import from kvrules.model "
    "(ModelFile, load_model_file, parse_model) or kvrules.examples (example_names, load_example) instead",
    DeprecationWarning,
    stacklevel=2,
)
