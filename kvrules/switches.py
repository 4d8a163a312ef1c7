"""Reading kvrules' environment switches (architecture section 8).

A boolean switch is on for ``1``, ``true``, ``yes`` or ``on`` and off for ``0``, ``false``,
``no``, ``off``, the empty string or an unset variable (case-insensitive, surrounding spaces
ignored); any other value is a :class:`~kvrules.ConfigError` naming the variable, so a typo
never silently means "off". kvrules only reads the environment, never writes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvrules.errors import ConfigError

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off", "")


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the boolean switch ``name`` is on (``environ``: ``os.environ`` by default).

    :raises ConfigError: the value is neither on nor off (naming the variable and the value).
    """
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ConfigError(
        f"environment variable {name}={raw!r} is not a boolean: use one of "
        f"{', '.join(ON)} to turn it on, or one of {', '.join(v or repr(v) for v in OFF)} (or unset it) "
        "to turn it off"
    )


__all__ = ["OFF", "ON", "flag"]
