"""What kvrules says on vLLM's own log (the stdlib logger ``vllm.kvrules``, which vLLM's log
handlers format): vLLM's operators read vLLM's log, so the decisions vLLM itself reports there
are repeated, one line each, whichever line kvrules plans on.

- ``hybrid-disabled`` and ``full-allocation-fallback`` at WARNING (with vLLM's note that only
  allocation changes);
- ``auto-fit`` and ``num-gpu-blocks-override`` at INFO.

Importing this module never imports vLLM.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kvrules.decisions import Decision

#: the logger vLLM's handlers format (vLLM configures the ``vllm`` tree)
vllm_log = logging.getLogger("vllm.kvrules")

LEVELS = {
    "hybrid-disabled": logging.WARNING,
    "full-allocation-fallback": logging.WARNING,
    "auto-fit": logging.INFO,
    "num-gpu-blocks-override": logging.INFO,
}
NOTES = {
    "hybrid-disabled": " Memory savings of sliding-window and chunked layers are off; their compute is unchanged.",
    "full-allocation-fallback": " Only allocation changes: sliding-window attention compute is unchanged.",
}


def forward(decisions: Iterable[Decision]) -> None:
    """Repeat the applied model-level decisions vLLM reports in its own log on ``vllm.kvrules``."""
    for decision in decisions:
        level = LEVELS.get(decision.rule)
        if level is None or decision.outcome != "applied" or decision.layer is not None:
            continue
        vllm_log.log(level, "kvrules %s: %s%s", decision.rule, decision.reason, NOTES.get(decision.rule, ""))


__all__ = ["LEVELS", "NOTES", "forward", "vllm_log"]
