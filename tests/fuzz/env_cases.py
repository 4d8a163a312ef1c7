"""Environment values under fuzz (issue 25 R7): every variable kvrules reads, set to drawn values
(empty, whitespace, case variants, ``maybe``, unicode look-alikes, undecodable bytes, very long),
for commands that read them. A boolean switch that is read must mean what the documentation
says (:data:`kvrules.switches.ON` / :data:`~kvrules.switches.OFF`) or end in exit 2 with a
``kvrules: error:`` line naming the variable; never a traceback. A case is data::

    {"env": {"KVRULES_TRACE": " On "}, "command": "plan", "patcher": True}

``patcher``: a third-party distribution (a dist-info folder put on ``sys.path`` in the child)
whose entry point patches a kvrules class when loaded, so ``KVRULES_STRICT_PLUGINS`` and
``KVRULES_DISABLE_PLUGIN_AUTOLOAD`` have something to decide. :func:`run_env_case` runs the
command in a forked child (:mod:`fuzz.forked`) with the environment set there, then checks the
meaning: a patch warning or refusal exactly when autoload is on, trace lines exactly when
``KVRULES_TRACE`` is on.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from fuzz.cli_cases import WARM_UP
from fuzz.draw import Draw
from fuzz.forked import classify, fork_main, warm_up
from fuzz.outcome import BROKEN, ERROR, OK, Outcome
from kvrules.integrations.vllm033 import STRATEGIES_ENV
from kvrules.integrations.vllm_fallback import STRICT_ENV as VLLM_STRICT_ENV
from kvrules.plugin.manager import AUTOLOAD_ENV, TRACE_ENV
from kvrules.plugin.patches import STRICT_ENV
from kvrules.switches import OFF, ON

Case = dict[str, Any]

BOOLEANS = (AUTOLOAD_ENV, TRACE_ENV, STRICT_ENV, VLLM_STRICT_ENV)
VARIABLES = (*BOOLEANS, STRATEGIES_ENV)
VALUES = (
    "",
    " ",
    "0",
    "1",
    "FALSE",
    "False",
    "true",
    " yes ",
    "On",
    "OFF",
    "no",
    "\t0\n",
    "maybe",
    "é",
    "\u0661",  # ARABIC-INDIC DIGIT ONE
    "\uff11",  # FULLWIDTH DIGIT ONE
    "\uff54\uff52\uff55\uff45",  # fullwidth "true"
    "\u200b1",
    "truee",
    "0x1",
    "y",
    "-1",
    "2",
    "None",
    "\udcff",  # the undecodable byte 0xff, as os.environ holds it
    "a" * 5000,
    "vllm",
    "default",
    "auto",
    "vllm,default",
    "nope",
    ",",
    "vllm-0.33, auto",
)
ALPHABET = "01tfTFyYnNoO \t\u00e9\u0131\u0130\u017f\u212a,-"
COMMANDS: dict[str, list[str]] = {
    "plan": ["plan", "--example", "llama3-8b", "--json"],
    "plan-no-autoload": ["plan", "--example", "llama3-8b", "--no-autoload"],
    "strategies": ["strategies"],
    "specs": ["specs", "--example", "hf-jamba-v0.1"],
    "vllm-plugin": [],
}
PATCHER = "fuzz-patcher"
PATCHER_MODULE = "kvrules_fuzz_patcher"


def _value(draw: Draw) -> str:
    if draw.chance(75):
        return draw.choice(VALUES)
    return "".join(draw.choice(ALPHABET) for _ in range(draw.integer(0, 8)))


def env_case(draw: Draw) -> Case:
    """Some of kvrules' variables set to drawn values, a command, and maybe a patching plugin."""
    names = draw.sample(VARIABLES, len(VARIABLES))
    return {
        "env": {name: _value(draw) for name in names},
        "command": draw.choice(sorted(COMMANDS)),
        "patcher": draw.chance(40),
    }


def install_patcher(root: Path) -> Path:
    """A folder that, on ``sys.path``, is an installed distribution ``kvrules-fuzz-patcher``
    whose ``kvrules.plugins`` entry point adds a method to :class:`kvrules.FullAttentionSpec`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{PATCHER_MODULE}.py").write_text(
        '"""A plugin that patches kvrules when imported."""\n'
        "import kvrules\n\n"
        "kvrules.FullAttentionSpec.kvrules_fuzz_helper = lambda self: 1\n",
        encoding="utf-8",
    )
    info = root / "kvrules_fuzz_patcher-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvrules-fuzz-patcher\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[kvrules.plugins]\n{PATCHER} = {PATCHER_MODULE}\n")
    return root


def _boolean(value: str) -> bool | None:
    text = value.strip().lower()
    return True if text in ON else False if text in OFF else None


def _vllm_plugin(argv: list[str]) -> int:
    """What an engine process does: vLLM's general-plugin hook, then a plan with the active set;
    a KVRulesError is reported as the command line would."""
    import kvrules
    from kvrules.integrations import vllm, vllm033

    try:
        vllm.vllm_general_plugin()
        specs = {"a": kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")}
        config = kvrules.EngineConfig(max_model_len=4096)
        kvrules.Planner(vllm033.active_strategies()).plan(specs, 1 << 30, config)
    except kvrules.KVRulesError as exc:
        print(f"kvrules: error: {exc}", file=sys.stderr)
        return 2
    return 0


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """Python's own way of showing a warning: on stderr (whatever pytest recorded it with)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _target(case: Case, patcher: Path | None) -> Any:
    def run(argv: list[str]) -> int:
        from kvrules.plugin.manager import reset_default_manager

        os.environ.update(case["env"])
        reset_default_manager()  # the warm parent's manager read the environment before
        # warnings shown on stderr as in a fresh interpreter (pytest records them instead)
        warnings.resetwarnings()
        warnings.showwarning = show_warning
        if patcher is not None:
            sys.path.insert(0, str(patcher))
        if case["command"] == "vllm-plugin":
            return _vllm_plugin(argv)
        from kvrules.cli.main import main

        return main(argv)

    return run


def _reads(case: Case) -> tuple[list[str], bool, bool]:
    """The boolean variables ``case`` reads, in order, up to the first that stops the run (one
    that is not a boolean, ``KVRULES_VLLM_STRICT`` on without vLLM, ``KVRULES_STRICT_PLUGINS``
    on with a patch); whether autoload is on (the patch is seen) and whether the run stops at
    ``KVRULES_VLLM_STRICT``."""
    env = case["env"]
    reads: list[str] = []

    def read(name: str) -> bool | None:
        reads.append(name)
        return _boolean(env.get(name, ""))

    if case["command"] == "vllm-plugin" and env.get(STRATEGIES_ENV, "").strip():
        strict = read(VLLM_STRICT_ENV)
        if strict is None or strict:
            return reads, False, strict is True
    autoload = False
    if case["command"] != "plan-no-autoload":
        value = read(AUTOLOAD_ENV)
        if value is None:
            return reads, False, False
        autoload = value is False
    if autoload and case["patcher"] and read(STRICT_ENV) is not False:
        return reads, autoload, False  # not a boolean, or on: the patch is refused
    read(TRACE_ENV)
    return reads, autoload, False


def _meaning(case: Case, report: dict[str, Any], outcome: Outcome) -> Outcome:
    """``outcome``, or ``broken`` where the run did not do what the variables say."""
    stderr = str(report.get("stderr", ""))
    errors = [line for line in stderr.splitlines() if line.startswith("kvrules") and ": error: " in line]
    reads, autoload, no_vllm = _reads(case)
    env = case["env"]
    invalid = [name for name in reads if _boolean(env.get(name, "")) is None]
    if invalid:
        if outcome.kind != ERROR or not any(invalid[0] in line for line in errors):
            return Outcome(
                BROKEN,
                f"{invalid[0]} is read and invalid, yet: {outcome.kind} {outcome.detail}",
                "Env",
                "invalid-accepted",
            )
        return outcome
    if any(f"variable {name}=" in line for line in errors for name in BOOLEANS):
        return Outcome(BROKEN, f"valid switches refused: {outcome.detail}", "Env", "valid-refused")
    if no_vllm:
        if outcome.kind != ERROR:
            return Outcome(
                BROKEN,
                f"{VLLM_STRICT_ENV} on without vLLM, yet: {outcome.kind}",
                "Env",
                "vllm-strict-ignored",
            )
        return outcome
    if autoload and case["patcher"] and _boolean(env.get(STRICT_ENV, "")):
        if outcome.kind != ERROR or not any(PATCHER in line for line in errors):
            return Outcome(
                BROKEN, f"strict, a patch, yet: {outcome.kind} {outcome.detail}", "Env", "strict-ignored"
            )
        return outcome
    if case["command"] == "vllm-plugin":
        return outcome  # the drawn strategy set itself may be refused (exit 2)
    if outcome.kind != OK:
        return Outcome(BROKEN, f"valid switches, yet: {outcome.kind} {outcome.detail}", "Env", "valid-failed")
    trace = bool(_boolean(env.get(TRACE_ENV, "")))
    if ("kvrules trace:" in stderr) != trace:
        shown = "missing" if trace else "shown"
        return Outcome(BROKEN, f"{TRACE_ENV} {'on' if trace else 'off'}, trace lines {shown}", "Env", "trace")
    if (PATCHER in stderr) != (autoload and case["patcher"]):
        shown = "missing" if autoload else "shown"
        return Outcome(
            BROKEN, f"autoload {'on' if autoload else 'off'}, patch warning {shown}", "Env", "autoload"
        )
    return outcome


def run_env_case(case: Case, work: Path) -> Outcome:
    """``case``'s command in a forked child with its environment (see the module doc)."""
    warm_up(WARM_UP)
    patcher = install_patcher(work / "patcher") if case["patcher"] else None
    report = fork_main(COMMANDS[case["command"]], target=_target(case, patcher))
    outcome = classify(report)
    if outcome.kind in (OK, ERROR):
        return _meaning(case, report, outcome)
    return outcome


def shrink_env(case: Case, run: Any, seconds: float = 0) -> tuple[Case, Outcome]:
    """Drop variables (and the patcher) one by one while it fails for the same cause."""
    target = run(case)
    for name in list(case["env"]):
        candidate = {**case, "env": {k: v for k, v in case["env"].items() if k != name}}
        if run(candidate).cause == target.cause:
            case = candidate
    if case["patcher"] and run({**case, "patcher": False}).cause == target.cause:
        case = {**case, "patcher": False}
    return case, run(case)


def show_env(case: Case) -> str:
    """``case`` as one JSON line (long values cut)."""
    env = {k: (v if len(v) <= 40 else v[:20] + f"... ({len(v)} chars)") for k, v in case["env"].items()}
    return json.dumps({**case, "env": env}, ensure_ascii=True)


__all__ = ["VARIABLES", "env_case", "install_patcher", "run_env_case", "show_env", "shrink_env"]
