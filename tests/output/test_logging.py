"""Where kvrules' log events go: never stdout or stderr by itself (house convention item 11).

The authority is the first test: a plan in a fresh interpreter with nothing configured prints
nothing at all. Then: the stdlib ``kvrules`` logger when the application turns logging on, the
application's structlog when it configured structlog, and the :mod:`kvrules.logs` unit contract.

``structlog.is_configured()`` stays True after a ``capture_logs()`` block exits, so every test
that needs the unconfigured route calls ``structlog.reset_defaults()`` first (``conftest.py`` also
resets after every test).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

import kvrules
from kvrules import logs
from kvrules.decisions import DecisionLog
from kvrules.plugin.manager import BUILTIN_PLUGINS, get_plugin_manager

ROOT = Path(__file__).resolve().parents[2]

PLAN = (
    "import kvrules\n"
    "s = kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype='bfloat16')\n"
    "p = kvrules.plan({'a': s}, 1 << 30, kvrules.EngineConfig(max_model_len=4096))\n"
)

SPEC = kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
CFG = kvrules.EngineConfig(max_model_len=4096)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter from the repository root (so this tree's kvrules is used).

    The environment is this one without the ``PYTHON*`` tweaks (warnings, dev mode, ...) that
    would make the interpreter itself write to stderr, and without ``KVRULES_TRACE`` (which prints
    hook calls on purpose); ``PYTHONPATH`` is kept, it only decides where imports come from.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("PYTHON") and k != "PYTHONPATH") and k != "KVRULES_TRACE"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


def _kvrules_lines(stderr: str, level: str) -> list[str]:
    """The lines ``logging.basicConfig``'s default format wrote for the ``kvrules`` logger at ``level``."""
    return [line for line in stderr.splitlines() if line.startswith(f"{level}:kvrules:")]


# -- (1) the authority: nothing configured, nothing written ------------------------------------
def test_a_plan_with_nothing_configured_writes_nothing() -> None:
    out = _run(PLAN)
    assert out.stdout == ""
    assert out.stderr == ""


def test_a_program_that_prints_the_plan_json_can_be_piped_into_a_parser() -> None:
    out = _run(PLAN + "print(p.to_json())\n")
    assert json.loads(out.stdout)["num_blocks"] > 0
    assert out.stderr == ""


# -- (2), (3) the stdlib logger, when the application asks for it -------------------------------
def test_logging_at_info_gets_the_summary_on_stderr_and_no_decisions() -> None:
    out = _run("import logging\nlogging.basicConfig(level=logging.INFO)\n" + PLAN)
    assert out.stdout == ""
    [line] = _kvrules_lines(out.stderr, "INFO")
    assert line.startswith("INFO:kvrules:kvrules.plan.finished layers=1 groups=1 workers=1 num_blocks=")
    assert "route=uniform-spec" in line and "strategy_set=" in line
    assert "kvrules.decision" not in out.stderr
    assert _kvrules_lines(out.stderr, "DEBUG") == []


def test_logging_at_debug_gets_every_decision() -> None:
    out = _run(
        "import logging\nlogging.basicConfig(level=logging.DEBUG)\n" + PLAN + "print(len(p.decisions))\n"
    )
    debug = _kvrules_lines(out.stderr, "DEBUG")
    decisions = [line for line in debug if line.startswith("DEBUG:kvrules:kvrules.decision ")]
    assert len(decisions) == int(out.stdout) > 0
    assert "DEBUG:kvrules:kvrules.decision stage=route rule=uniform-spec outcome=applied layer=None" in (
        " ".join(decisions)
    )
    assert any(line.startswith("DEBUG:kvrules:kvrules.plugin.loaded plugin=") for line in debug)
    assert len(_kvrules_lines(out.stderr, "INFO")) == 1  # the summary


def test_a_handler_gets_the_structured_decisions_back(caplog: pytest.LogCaptureFixture) -> None:
    structlog.reset_defaults()
    with caplog.at_level(logging.DEBUG, logger="kvrules"):
        plan = kvrules.Planner("vllm").plan({"a": SPEC}, 1 << 30, CFG)
    records = [r for r in caplog.records if r.name == "kvrules" and r.kvrules_event == "kvrules.decision"]
    assert [r.kvrules_fields for r in records] == [d.to_dict() for d in plan.decisions]
    assert {r.levelno for r in records} == {logging.DEBUG}
    assert records[0].funcName == "add"  # the emitting kvrules function, not kvrules.logs
    assert records[0].module == "decisions"


# -- (4) the application's structlog -----------------------------------------------------------
def test_structlog_capture_gets_whole_events() -> None:
    with capture_logs() as events:
        plan = kvrules.Planner("vllm").plan({"a": SPEC}, 1 << 30, CFG)
    decisions = [e for e in events if e["event"] == "kvrules.decision"]
    assert decisions == [
        {"event": "kvrules.decision", "log_level": "debug", **d.to_dict()} for d in plan.decisions
    ]
    assert {
        "event": "kvrules.decision",
        "log_level": "debug",
        "stage": "route",
        "rule": "uniform-spec",
        "outcome": "applied",
        "layer": None,
        "reason": "all 1 layers share one spec.",
        "before": None,
        "after": None,
        "padding_bytes": 0,
    } in decisions
    [finished] = [e for e in events if e["event"] == "kvrules.plan.finished"]
    assert finished == {
        "event": "kvrules.plan.finished",
        "log_level": "info",
        "layers": 1,
        "groups": 1,
        "workers": 1,
        "num_blocks": plan.num_blocks,
        "max_concurrency": round(plan.max_concurrency, 4),
        "capacity_tokens": plan.capacity_tokens,
        "max_model_len": 4096,
        "route": "uniform-spec",
        "strategy_set": "vllm-0.28",
    }
    assert structlog.is_configured()  # still, after the block: reset before the next in-process test
    structlog.reset_defaults()


def test_plugin_loaded_events_go_through_structlog() -> None:
    with capture_logs() as events:
        get_plugin_manager(autoload=False)
    loaded = [e for e in events if e["event"] == "kvrules.plugin.loaded"]
    assert {e["plugin"] for e in loaded} == set(BUILTIN_PLUGINS)
    assert all(set(e) == {"event", "log_level", "plugin", "distribution"} for e in loaded)
    assert all(e["log_level"] == "debug" for e in loaded)
    structlog.reset_defaults()


def test_structlog_filtering_debug_out_skips_the_decisions() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    with capture_logs() as events:
        kvrules.Planner("vllm").plan({"a": SPEC}, 1 << 30, CFG)
    assert [e["event"] for e in events] == ["kvrules.plan.finished"]
    structlog.reset_defaults()


# -- (5) kvrules.logs --------------------------------------------------------------------------
def test_configured_structlog_gets_the_events_and_the_stdlib_logger_nothing(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvrules")
    with capture_logs() as events:
        logs.info("kvrules.test.info", a=1, b={"c": [2]})
        logs.debug("kvrules.test.debug", layer=None)
    assert events == [
        {"event": "kvrules.test.info", "log_level": "info", "a": 1, "b": {"c": [2]}},
        {"event": "kvrules.test.debug", "log_level": "debug", "layer": None},
    ]
    assert [r for r in caplog.records if r.name == "kvrules"] == []
    assert capsys.readouterr() == ("", "")
    structlog.reset_defaults()


def test_unconfigured_structlog_routes_to_the_stdlib_logger(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    structlog.reset_defaults()
    with caplog.at_level(logging.DEBUG, logger="kvrules"):
        logs.info("kvrules.test.info", layers=84, route="unified-page", reason="two words", none=None)
        logs.debug("kvrules.test.debug", before={"block_size": 16})
    info, debug = [r for r in caplog.records if r.name == "kvrules"]
    assert (info.levelno, info.getMessage()) == (
        logging.INFO,
        "kvrules.test.info layers=84 route=unified-page reason='two words' none=None",
    )
    assert info.kvrules_event == "kvrules.test.info"
    assert info.kvrules_fields == {"layers": 84, "route": "unified-page", "reason": "two words", "none": None}
    assert info.funcName == "test_unconfigured_structlog_routes_to_the_stdlib_logger"
    assert (debug.levelno, debug.getMessage()) == (
        logging.DEBUG,
        "kvrules.test.debug before={'block_size': 16}",
    )
    assert debug.kvrules_fields == {"before": {"block_size": 16}}
    assert capsys.readouterr() == ("", "")  # structlog's default printer was never used


def test_the_stdlib_logger_is_silent_until_enabled(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    structlog.reset_defaults()
    caplog.set_level(logging.WARNING, logger="kvrules")
    logs.info("kvrules.test.info", a=1)
    logs.debug("kvrules.test.debug", a=1)
    assert caplog.records == []
    assert capsys.readouterr() == ("", "")
    caplog.set_level(logging.INFO, logger="kvrules")
    logs.debug("kvrules.test.debug", a=1)
    logs.info("kvrules.test.info", a=1)
    assert [r.kvrules_event for r in caplog.records] == ["kvrules.test.info"]


def test_the_route_is_decided_at_each_call(caplog: pytest.LogCaptureFixture) -> None:
    structlog.reset_defaults()
    caplog.set_level(logging.INFO, logger="kvrules")
    logs.info("kvrules.test.one")
    with capture_logs() as events:
        logs.info("kvrules.test.two")
    structlog.reset_defaults()
    logs.info("kvrules.test.three")
    assert [r.kvrules_event for r in caplog.records] == ["kvrules.test.one", "kvrules.test.three"]
    assert [e["event"] for e in events] == ["kvrules.test.two"]


def test_the_kvrules_logger_has_only_a_null_handler() -> None:
    logger = logging.getLogger("kvrules")
    assert [type(h) for h in logger.handlers] == [logging.NullHandler]
    assert logger.propagate


def test_listening(caplog: pytest.LogCaptureFixture) -> None:
    structlog.reset_defaults()
    caplog.set_level(logging.WARNING, logger="kvrules")
    assert not logs.listening()
    assert not logs.listening(logging.INFO)
    caplog.set_level(logging.INFO, logger="kvrules")
    assert logs.listening(logging.INFO) and not logs.listening(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kvrules")
    assert logs.listening()
    caplog.set_level(logging.WARNING, logger="kvrules")
    with capture_logs():  # configures structlog; its default wrapper passes every level
        assert logs.listening(logging.DEBUG)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    assert logs.listening(logging.WARNING) and not logs.listening(logging.INFO)
    structlog.reset_defaults()


def test_emitter_is_none_when_nobody_listens(caplog: pytest.LogCaptureFixture) -> None:
    structlog.reset_defaults()
    caplog.set_level(logging.INFO, logger="kvrules")
    assert logs.emitter(logging.DEBUG) is None
    assert DecisionLog()._emit is None
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    assert logs.emitter(logging.DEBUG) is None
    assert logs.emitter(logging.INFO) is not None
    structlog.reset_defaults()


def test_emitter_keeps_the_route_it_was_given(caplog: pytest.LogCaptureFixture) -> None:
    structlog.reset_defaults()
    caplog.set_level(logging.DEBUG, logger="kvrules")
    to_stdlib = logs.emitter(logging.DEBUG)
    assert to_stdlib is not None
    with capture_logs() as events:
        to_structlog = logs.emitter(logging.DEBUG)
        assert to_structlog is not None
        to_stdlib("kvrules.test.stdlib", n=1)
        to_structlog("kvrules.test.structlog", n=2)
    assert events == [{"event": "kvrules.test.structlog", "log_level": "debug", "n": 2}]
    [record] = [r for r in caplog.records if r.name == "kvrules"]
    assert (record.levelno, record.getMessage(), record.kvrules_fields) == (
        logging.DEBUG,
        "kvrules.test.stdlib n=1",
        {"n": 1},
    )
    assert record.funcName == "test_emitter_keeps_the_route_it_was_given"
    structlog.reset_defaults()


def test_emitter_rejects_a_level_without_a_name() -> None:
    with pytest.raises(ValueError, match="level 15"):
        logs.emitter(15)


def test_logs_is_a_leaf_module() -> None:
    source = Path(logs.__file__).read_text()
    imports = [line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert set(imports) == {"__future__", "logging", "re", "sys", "typing"}


def test_importing_kvrules_does_not_import_structlog() -> None:
    """structlog (with rich, 0.2-0.35 s) is the application's to import: every vLLM process
    imports kvrules through its general plugin."""
    code = "import sys, kvrules, kvrules.integrations.vllm; sys.exit('structlog' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_structlog_configured_after_kvrules_was_imported_is_used() -> None:
    code = (
        "import kvrules.logs as logs, structlog, structlog.testing\n"
        "with structlog.testing.capture_logs() as seen:\n"
        "    logs.info('kvrules.test', a=1)\n"
        "assert seen == [{'event': 'kvrules.test', 'a': 1, 'log_level': 'info'}], seen\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
