"""Every fenced block of README.md runs, and what it shows is what kvrules prints.

The harness is generic (tests/plugins/test_plugin_docs.py uses it for docs/plugins*.md), so that a new
section's blocks are picked up without a new test. A fenced block is one of:

* **not run**: an HTML comment ``<!-- not-run: WHY; covered by PATH -->`` right before it; ``PATH``
  (relative to the repository root) must exist: the test or script that covers what the block does;
* **a file**: ``<!-- file: NAME -->`` right before it: written as ``NAME`` into the document's work
  directory before any block runs (JSON and TOML are parsed, Python is compiled);
* **Python** (```` ```python ````): executed in a fresh module, with the work directory as the
  current directory and first on ``sys.path``;
* **commands**: a block with ``$ `` prompt lines (any language: their following lines are the
  shown output), or a ``bash`` / ``sh`` / ``shell`` / ``console`` block, whose lines are commands
  (``\\`` continues a line; ``#`` starts a comment) with no shown output;
* **inert**: any other block without a language needing a marker (diagrams, plain text, tables).

``json``, ``toml``, ``python`` and shell blocks need one of the first four forms. Commands run in
the document's work directory, which links every top-level entry of the repository (so
``kvrules/examples/hf/...`` and ``examples/...`` work verbatim) and receives what commands write.
``kvrules ...`` runs in-process through :func:`kvrules.cli.main.main`; anything else runs with
bash, with the interpreter's ``bin`` directory first on ``PATH``. A shown output matches when it
equals the real output (stdout and stderr), with trailing spaces dropped and timings (``0.12 s``,
``0.5 ms``, ``1.20s``) normalised; a line ``...`` stands for any number of lines and ``...``
inside a line for any text. A command must exit 0 unless its shown output contains ``error``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

import kvrules
from kvrules import KVRulesPluginManager
from kvrules.cli.main import main as kvrules_main
from kvrules.plugin import RULE_KINDS
from kvrules.plugin.manager import BUILTIN_PLUGINS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})
MARKED_LANGS = SHELL_LANGS | {"python", "json", "toml"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*(not-run|file):\s*((?:(?!-->).)*?)\s*-->\s*\Z", re.S)
TIMING = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms|us|µs)\b")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document, with the marker comment right before it (if any)."""

    doc: Path
    line: int
    lang: str
    body: str
    marker: str | None = None
    argument: str = ""

    @property
    def where(self) -> str:
        shown = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{shown}:{self.line}"

    @property
    def kind(self) -> str:
        """``not-run``, ``file``, ``python``, ``commands`` or ``inert``."""
        if self.marker is not None:
            return self.marker
        if self.lang == "python":
            return "python"
        if self.lang in SHELL_LANGS or any(line.startswith("$ ") for line in self.body.splitlines()):
            return "commands"
        return "inert"


@dataclass(frozen=True)
class Command:
    """One shell command of a block and the output shown after it (``None``: none shown)."""

    text: str
    shown: str | None


def blocks(doc: Path) -> list[Block]:
    """Every fenced block of ``doc``, in order."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        marker = MARKER.search(before)
        line = before.count("\n") + 1
        kind, argument = (marker.group(1), marker.group(2)) if marker else (None, "")
        found.append(Block(doc, line, match.group(1), match.group(2), kind, argument))
    return found


def commands(block: Block) -> list[Command]:
    """The commands of a ``commands`` block (continuation lines joined)."""
    lines = block.body.splitlines()
    if not any(line.startswith("$ ") for line in lines):
        return [Command(text, None) for text in _joined(lines)]
    found: list[Command] = []
    for line in lines:
        if line.startswith("$ "):
            found.append(Command(line[2:], ""))
        elif found and found[-1].text.endswith("\\"):
            found[-1] = Command(found[-1].text[:-1] + " " + line.strip(), "")
        elif found:
            shown = found[-1].shown
            found[-1] = Command(found[-1].text, f"{shown}{line}\n")
    return found


def _joined(lines: list[str]) -> list[str]:
    out: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line and not pending:
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append(pending + line.strip())
        pending = ""
    return out


# -- matching ------------------------------------------------------------------------------------
def normalised(text: str) -> list[str]:
    """Lines without trailing spaces or trailing blank lines, timings replaced by ``<time>``."""
    lines = [TIMING.sub("<time>", line).rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_patterns(shown: str) -> list[str]:
    parts = []
    for line in normalised(shown):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return parts


def output_pattern(shown: str) -> re.Pattern[str]:
    """The regular expression a shown output stands for (see the module docstring)."""
    return re.compile("".join(_line_patterns(shown)))


def assert_output_matches(where: str, command: str, shown: str, actual: str) -> None:
    """The real ``actual`` output matches ``shown``; else name the first shown line that does not."""
    text = "".join(f"{line}\n" for line in normalised(actual))
    if output_pattern(shown).fullmatch(text):
        return
    parts = _line_patterns(shown)
    first = next((n for n in range(1, len(parts) + 1) if not re.match("".join(parts[:n]), text)), len(parts))
    line = normalised(shown)[first - 1] if parts else ""
    diff = "\n".join(
        difflib.unified_diff(normalised(shown), normalised(actual), "shown", "actual", lineterm="")
    )
    raise AssertionError(
        f"{where}: the output of `{command}` differs from what the document shows; first shown line "
        f"not matched (or extra output after the last): {first}: {line!r}\n{diff}"
    )


# -- running -------------------------------------------------------------------------------------
def make_workdir(docs: Sequence[Path], where: Path) -> Path:
    """``where`` with the file blocks of ``docs``, linking every other top-level entry of the repository."""
    where.mkdir(parents=True, exist_ok=True)
    files = [b for doc in docs for b in blocks(doc) if b.kind == "file"]
    for block in files:
        write_file_block(block, where)
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and not (where / entry.name).exists():
            (where / entry.name).symlink_to(entry)
    return where


def write_file_block(block: Block, where: Path) -> None:
    """Write a ``file`` block into ``where``; JSON and TOML must parse, Python must compile."""
    name = block.argument
    assert name and "/" not in name and not (where / name).exists(), f"{block.where}: {name!r} exists already"
    if name.endswith(".json") or block.lang == "json":
        json.loads(block.body)
    elif name.endswith(".toml") or block.lang == "toml":
        tomllib.loads(block.body)
    elif name.endswith(".py"):
        compile(block.body, f"{block.where} ({name})", "exec")
    (where / name).write_text(block.body, encoding="utf-8")


@contextlib.contextmanager
def isolated_logging() -> Iterator[None]:
    """Restore the root logger (a block may call ``logging.basicConfig``)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


def run_python(block: Block, workdir: Path) -> None:
    """Execute a Python block in a fresh module, in ``workdir``."""
    module = types.ModuleType(f"docblock_{block.doc.stem}_{block.line}".replace("-", "_"))
    before = set(sys.modules)
    with pytest.MonkeyPatch.context() as patch, isolated_logging():
        patch.chdir(workdir)
        patch.syspath_prepend(str(workdir))
        patch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
        try:
            exec(compile(block.body, block.where, "exec"), module.__dict__)
        finally:
            structlog.reset_defaults()
            kvrules.reset_default_manager()
            for name in set(sys.modules) - before:  # forget modules the block imported from workdir
                if str(workdir) in str(getattr(sys.modules[name], "__file__", "")):
                    del sys.modules[name]


def run_command(command: str, workdir: Path) -> tuple[int, str]:
    """Run one command in ``workdir``: exit status and output (stdout, then stderr)."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words and words[0] == "kvrules" and not set("|;&<>").intersection(command):
        return _in_process(words[1:], env, workdir)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=workdir,
        env={**os.environ, "PATH": path, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(workdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    return result.returncode, result.stdout


def _in_process(argv: list[str], env: dict[str, str], workdir: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        patch.chdir(workdir)
        for key, value in env.items():
            patch.setenv(key, value)
        try:
            code = kvrules_main(argv)
        except SystemExit as exc:  # --help
            code = int(exc.code or 0)
        finally:
            structlog.reset_defaults()  # the CLI configures structlog for itself
            kvrules.reset_default_manager()  # KVRULES_* variables may have shaped it
    return code, out.getvalue() + err.getvalue()


def run_block(block: Block, workdir: Path) -> list[str]:
    """Run a block as its kind says; the outputs of its commands (for the figures check)."""
    if block.kind == "not-run":
        covered = re.search(r"covered by ([\w./-]+)", block.argument)
        assert covered, f"{block.where}: a not-run marker must say 'covered by PATH'"
        assert (ROOT / covered.group(1)).exists(), f"{block.where}: {covered.group(1)} does not exist"
        return []
    assert block.kind != "inert" or block.lang not in MARKED_LANGS, (
        f"{block.where}: a {block.lang} block must run, be a file or carry a not-run marker"
    )
    if block.kind == "python":
        run_python(block, workdir)
        return []
    outputs = []
    for command in commands(block) if block.kind == "commands" else []:
        code, actual = run_command(command.text, workdir)
        if command.shown:
            assert_output_matches(block.where, command.text, command.shown, actual)
        if not (command.shown and "error" in command.shown):
            assert code == 0, f"{block.where}: `{command.text}` exited {code}:\n{actual[-3000:]}"
        outputs.append(actual)
    return outputs


@dataclass
class Outcome:
    """What running one block gave: the error it raised (if any) and its commands' outputs."""

    block: Block
    error: BaseException | None
    outputs: list[str]


def run_documents(docs: Sequence[Path], workdir: Path) -> list[Outcome]:
    """Run every block of ``docs``, in order, in ``make_workdir(docs, workdir)`` (one directory:
    a page may use the files another page writes)."""
    make_workdir(docs, workdir)
    outcomes = []
    for block in (b for doc in docs for b in blocks(doc)):
        try:
            outcomes.append(Outcome(block, None, run_block(block, workdir)))
        except Exception as exc:  # reported by the block's own test
            outcomes.append(Outcome(block, exc, []))
    return outcomes


def block_ids(doc: Path) -> list[str]:
    return [f"line{b.line}-{b.kind}" for b in blocks(doc)]


# -- the README ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return run_documents([README], tmp_path_factory.mktemp("readme"))


@pytest.mark.parametrize("index", range(len(blocks(README))), ids=block_ids(README))
def test_every_readme_block_runs(index: int, readme_run: list[Outcome]) -> None:
    outcome = readme_run[index]
    if outcome.error is not None:
        raise outcome.error


def prose(doc: Path) -> str:
    """``doc`` without its fenced blocks, inline code and HTML comments."""
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


#: figures the README's prose quotes from what kvrules prints: a size, a percentage, a token count
FIGURE = re.compile(r"\b\d[\d,]*(?:\.\d+)? ?(?:GiB|MiB|KiB|%|tokens)(?![\w])")
#: prose figures that are inputs or measurements, not quoted from a command's output
INPUT_FIGURES = frozenset({"90%"})


def test_figures_quoted_in_the_readme_prose_are_printed_by_its_commands(readme_run: list[Outcome]) -> None:
    outputs = " ".join(" ".join(out.split()) for outcome in readme_run for out in outcome.outputs)
    quoted = {" ".join(f.split()) for f in FIGURE.findall(" ".join(prose(README).split()))}
    missing = sorted(f for f in quoted - INPUT_FIGURES if f not in outputs)
    assert not missing, f"README prose quotes figures no README command prints: {missing}"


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.findall(r"^bash scripts/setup.sh && .*$", text, flags=re.M)
    assert found[:2] == [
        "bash scripts/setup.sh && .venv/bin/kvrules plan --example issue-43626",
        "bash scripts/setup.sh && .venv/bin/python -m pytest -q",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert found[1] in ci


def readme_rules_table() -> set[tuple[str, str, int]]:
    """``(name, kind, priority)`` of every row of the README's built-in rules table."""
    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \| ([a-z-]+) \| (-?\d+) \|", README.read_text(encoding="utf-8"), re.M
    )
    return {(name, kind, int(priority)) for name, kind, priority in rows}


@pytest.mark.kvrules_pm(autoload=False)
def test_the_built_in_rules_table_lists_every_built_in_rule_and_kind(
    kvrules_pm: KVRulesPluginManager,
) -> None:
    registries = kvrules_pm.registries
    providers = registries.rules.providers
    builtin = {
        (rule.name, rule.kind, rule.priority)
        for rule in registries.rules.rules.values()
        if providers[rule.name].split("'")[1] in BUILTIN_PLUGINS
    }
    table = readme_rules_table()
    assert table == builtin, (
        f"README only: {sorted(table - builtin)}; registry only: {sorted(builtin - table)}"
    )
    assert {kind for _, kind, _ in table} == set(RULE_KINDS)


def test_the_harness_matches_ellipses_and_timings() -> None:
    shown = "took 0.12 s\n...\nlast ... line\n"
    assert output_pattern(shown).fullmatch("took <time>\nlast a b line\n")
    assert_output_matches("x", "c", shown, "took 3.5 s\n1\n2\nlast x line  \n\n")
    with pytest.raises(AssertionError, match="differs"):
        assert_output_matches("x", "c", shown, "took 3.5 s\nfirst line\n")
    block = Block(README, 1, "text", "$ kvrules a \\\n  --b\nout 1\n$ kvrules c\n")
    doc = "<!-- not-run: x; covered by y -->\n```bash\na\n```\n\n<!-- file: m.json -->\n```json\n{}\n```\n"
    assert [m.group(1) for m in (MARKER.search(doc[: f.start()]) for f in FENCE.finditer(doc)) if m] == [
        "not-run",
        "file",
    ]
    assert commands(block) == [Command("kvrules a  --b", "out 1\n"), Command("kvrules c", "")]
    assert Block(README, 1, "json", "{}").kind == "inert"


def test_the_distributed_example_under_plain_python_says_to_use_torchrun() -> None:
    example = ROOT / "examples" / "plan_across_ranks.py"
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    result = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2 and not result.stdout
    assert "Traceback" not in result.stderr
    assert "torchrun --nproc-per-node 4 examples/plan_across_ranks.py" in result.stderr
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in result.stderr


def test_the_harness_fails_a_document_that_is_wrong(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```console\n$ kvrules plan --example llama3-8b --strategies vllm\nkvrules plan: example 'llama3-8b'\n"
        "strategy set: nope ...\n...\n```\n\n"
        '```json\n{"layers": {}}\n```\n\n'
        "<!-- not-run: needs vLLM; covered by tests/no_such_test.py -->\n```bash\nvllm serve x\n```\n\n"
        "<!-- file: m.json -->\n```json\n{not json\n```\n\n"
        "```python\nassert 1 + 1 == 3, 'python blocks run'\n```\n\n"
        "```\nA diagram -> is inert\n```\n",
        encoding="utf-8",
    )
    with pytest.raises(json.JSONDecodeError):
        run_documents([doc], tmp_path / "work")
    doc.write_text(doc.read_text(encoding="utf-8").replace("{not json", "{}"), encoding="utf-8")
    errors = [str(o.error) if o.error else None for o in run_documents([doc], tmp_path / "work2")]
    assert (
        "first shown line not matched (or extra output after the last): 2: 'strategy set: nope ...'"
        in str(errors[0])
    )
    assert "a json block must run, be a file or carry a not-run marker" in str(errors[1])
    assert "tests/no_such_test.py does not exist" in str(errors[2])
    assert errors[3] is None  # the file block, written
    assert errors[4] == "python blocks run"
    assert errors[5] is None
