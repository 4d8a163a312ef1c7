"""Wheel smoke test: packaging mistakes fail CI (issue 14, item 6).

Builds kvrules' wheel (``python -m build --wheel``) from a clean copy of the checkout's files (those
git tracks or would track, so stale ``build/`` output and ignored files never leak in), installs it
into a fresh virtual environment in a temporary directory (the pinned CPU torch first, then the
wheel with its declared dependencies from the index) and checks it from a directory outside the
checkout, with ``python -I``, so the source tree cannot be imported:

* the wheel's files under each package (``kvrules/``, ``kvrules_plugins/``) are exactly the source
  tree's package directories' files: a new data folder or module that is not packaged fails, and so
  does a file the source no longer has;
* ``import kvrules`` loads from the fresh environment and does not import torch;
* every module in ``plugins/`` is an entry point of group ``kvrules.plugins``, every such entry point
  loads and is registered by ``get_plugin_manager()``; the ``kvrules`` console script and every other
  entry point of the distribution resolve;
* every packaged file is installed; the ``py.typed`` markers, the plan schemas and the examples (model
  files and ``hf/`` folders) are readable through the installed package;
* ``kvrules plan --example issue-43626`` works, and its ``--json`` output validates against the
  schema shipped inside the installed package;
* ``kvrules.distributed.plan_across_ranks`` plans across two CPU ranks (gloo, two spawned
  processes of the fresh environment): both ranks return the plan one process makes of the two
  stages (so the wheel's declared dependencies cover torch's object collectives, numpy included).

Usage (from anywhere; ``.ci/run`` runs it after the tests)::

    .venv/bin/python scripts/wheel_smoke.py [--keep]

Needs ``build`` and ``jsonschema`` (the ``dev`` extra) in the running interpreter and ``git`` on
PATH. Exits 0 when every check passes, 1 listing every failed check, 2 when the wheel cannot be built
or installed. The fresh environment gets nothing but the wheel, its dependencies and torch; the JSON
schema check runs in the calling interpreter on the installed package's schema file.
"""

from __future__ import annotations

import argparse
import configparser
import json
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: the torch scripts/setup.sh installs first (the CPU build, from local disk), never a CUDA build
TORCH = "torch==2.13.0"
#: the example the smoke test plans through the installed console script
EXAMPLE = "issue-43626"
PLUGIN_GROUP = "kvrules.plugins"
HF_EXAMPLES = "kvrules/examples/hf/"
DISTRIBUTION = "kvrules"
ROOT = Path(__file__).resolve().parents[1]


class SmokeError(Exception):
    """A step that must succeed before any check can run (copy, build, install) failed."""


STARTED = time.monotonic()


def step(message: str) -> None:
    """Say what the smoke test is doing, with the seconds since it started (on stderr, like
    scripts/setup.sh)."""
    print(f"wheel-smoke: [{time.monotonic() - STARTED:3.0f} s] {message}", file=sys.stderr, flush=True)


def run(command: Sequence[str | Path], cwd: Path, what: str) -> str:
    """Run ``command`` in ``cwd`` and return its stdout.

    :raises SmokeError: it exits non-zero (the message names ``what`` and shows its output).
    """
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SmokeError(f"{what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


# --- the source side: which files the wheel must hold ---------------------------------------------


def checkout_files(root: Path) -> list[str]:
    """The files of the checkout at ``root`` that git tracks or would track (relative POSIX paths,
    sorted; tracked files deleted from the work tree left out).

    :raises SmokeError: ``root`` is not a git work tree or git is missing.
    """
    try:
        out = run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], root, "git ls-files"
        )
    except FileNotFoundError as exc:
        raise SmokeError(f"git is needed to list the checkout's files: {exc}") from exc
    names = {name for name in out.split("\0") if name}
    return sorted(name for name in names if (root / name).is_file())


def copy_files(root: Path, names: Iterable[str], dest: Path) -> None:
    """Copy each relative path ``names`` from ``root`` to the same place under ``dest``."""
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def package_dirs(pyproject: Mapping[str, Any]) -> dict[str, str]:
    """The top-level import packages of ``pyproject`` (a parsed pyproject.toml) mapped to their
    source directories (``[tool.setuptools] packages`` and ``package-dir``).

    :raises SmokeError: no ``[tool.setuptools] packages`` list (the smoke test reads the explicit list).
    """
    setuptools = pyproject.get("tool", {}).get("setuptools", {})
    packages = setuptools.get("packages")
    if not isinstance(packages, list) or not packages:
        raise SmokeError(
            "pyproject.toml: [tool.setuptools] packages is missing; the smoke test reads that list"
        )
    where = setuptools.get("package-dir", {})
    tops = sorted({str(name).split(".")[0] for name in packages})
    return {top: str(where.get(top, top)) for top in tops}


def expected_files(names: Iterable[str], dirs: Mapping[str, str]) -> set[str]:
    """The wheel paths the checkout's files ``names`` must have: every file under a package's source
    directory (``dirs``: import name -> directory), renamed to sit under its import name."""
    wanted: set[str] = set()
    for name in names:
        for top, folder in dirs.items():
            prefix = folder.rstrip("/") + "/"
            if name.startswith(prefix):
                wanted.add(f"{top}/{name[len(prefix) :]}")
    return wanted


def wheel_package_files(members: Iterable[str], tops: Iterable[str]) -> set[str]:
    """The members of a wheel (``members``: its file list) that sit under one of the packages ``tops``."""
    prefixes = tuple(f"{top}/" for top in tops)
    return {m for m in members if m.startswith(prefixes) and not m.endswith("/")}


def packaging_problems(expected: set[str], shipped: set[str]) -> list[str]:
    """What is wrong with a wheel shipping ``shipped`` when the source has ``expected``: each file
    not packaged, each packaged file the source does not have."""
    missing = [
        f"not in the wheel: {name} (a module or data file of the source tree that "
        "[tool.setuptools] packages / package-data does not cover)"
        for name in sorted(expected - shipped)
    ]
    extra = [f"in the wheel but not in the source tree: {name}" for name in sorted(shipped - expected)]
    return missing + extra


def wheel_entry_points(wheel: zipfile.ZipFile) -> dict[str, dict[str, str]]:
    """The entry points a wheel declares (``*.dist-info/entry_points.txt``), by group."""
    names = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    if not names:
        return {}
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(wheel.read(names[0]).decode("utf-8"))
    return {group: dict(parser[group]) for group in parser.sections()}


def plugin_entry_point_problems(
    expected: Iterable[str], groups: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """Each built-in plugin module (``kvrules_plugins/<name>.py`` in ``expected``) that no entry point
    of group ``kvrules.plugins`` in ``groups`` names, and a missing ``kvrules`` console script."""
    declared = {value.split(":")[0].strip() for value in groups.get(PLUGIN_GROUP, {}).values()}
    modules = sorted(
        name[: -len(".py")].replace("/", ".")
        for name in expected
        if name.startswith("kvrules_plugins/") and name.endswith(".py") and not name.endswith("__init__.py")
    )
    problems = [
        f"plugins/{module.split('.', 1)[1]}.py has no entry point in group {PLUGIN_GROUP!r} "
        f'([project.entry-points."{PLUGIN_GROUP}"] in pyproject.toml)'
        for module in modules
        if module not in declared
    ]
    if "kvrules" not in groups.get("console_scripts", {}):
        problems.append("the wheel declares no 'kvrules' console script ([project.scripts])")
    return problems


# --- building and installing -------------------------------------------------------------------------


def build_wheel(src: Path, outdir: Path) -> Path:
    """Build the wheel of the project in ``src`` into ``outdir`` (isolated: from its build-system
    requirements) and return its path.

    :raises SmokeError: the build fails or does not make exactly one wheel.
    """
    run([sys.executable, "-m", "build", "--wheel", "--outdir", outdir, src], src, "python -m build --wheel")
    wheels = sorted(outdir.glob("*.whl"))
    if len(wheels) != 1:
        raise SmokeError(f"python -m build made {len(wheels)} wheels in {outdir}, expected 1")
    return wheels[0]


def fresh_environment(where: Path, wheel: Path) -> Path:
    """A new virtual environment at ``where`` with the pinned torch, then ``wheel`` and its declared
    dependencies; returns its interpreter.

    :raises SmokeError: creating it or an install fails.
    """
    run([sys.executable, "-m", "venv", where], where.parent, "python -m venv")
    python = where / "bin" / "python"
    # torch's thousands of modules are not byte-compiled: a third of the step's time, and not under test
    run([python, "-m", "pip", "install", "-q", "--no-compile", TORCH], where.parent, f"pip install {TORCH}")
    run([python, "-m", "pip", "install", "-q", wheel], where.parent, f"pip install {wheel.name}")
    return python


# --- the checks run in the installed environment ----------------------------------------------------


def inside_checks(listing: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The checks run by the fresh environment's interpreter (``--inside``): import without torch,
    imported from this environment, plugins, entry points, installed files and package data.
    ``listing``: ``{"shipped": wheel package files, "source": the files the source tree says}``.

    Returns ``{"problems": [...], "schemas": <installed schema folder>}``; a check that raises is
    one problem, the others still run.
    """
    import kvrules  # the first import of the process: torch must not come with it

    problems = [] if "torch" not in sys.modules else ["`import kvrules` imports torch"]
    problems += _location_problems(kvrules.__file__)
    problems += guarded("entry points", _entry_point_problems)
    problems += guarded("installed files", lambda: _installed_file_problems(listing["shipped"]))
    problems += guarded("package data", _marker_and_schema_problems)
    problems += guarded("examples", lambda: _example_problems(listing["source"]))
    problems += guarded("two-rank planning", distributed_problems)
    from importlib import resources

    return {"problems": problems, "schemas": str(resources.files("kvrules") / "schemas")}


def guarded(what: str, check: Callable[[], list[str]]) -> list[str]:
    """The problems ``check`` finds; one problem naming ``what`` if it raises."""
    try:
        return check()
    except Exception as exc:
        return [f"the {what} check raised {type(exc).__name__}: {exc}"]


def _location_problems(module_file: str | None) -> list[str]:
    """``kvrules`` must come from this environment's site-packages, never from a checkout."""
    if module_file is None or not Path(module_file).resolve().is_relative_to(Path(sys.prefix).resolve()):
        return [f"kvrules was imported from {module_file}, not from the fresh environment {sys.prefix}"]
    return []


def _entry_point_problems() -> list[str]:
    """Every ``kvrules.plugins`` entry point loads and is registered; every other entry point of the
    distribution (console script included) names a module that exists."""
    import importlib.util
    from importlib.metadata import distribution

    from kvrules import BUILTIN_PLUGINS, get_plugin_manager

    problems: list[str] = []
    points = list(distribution(DISTRIBUTION).entry_points)
    plugins = {ep.name: ep for ep in points if ep.group == PLUGIN_GROUP}
    problems += [
        f"built-in plugin {name!r} has no entry point" for name in BUILTIN_PLUGINS if name not in plugins
    ]
    for ep in points:
        if ep.group in (PLUGIN_GROUP, "console_scripts"):
            problems += _load_problems(ep)
        elif importlib.util.find_spec(ep.module) is None:
            problems.append(
                f"entry point {ep.group}:{ep.name} names module {ep.module}, which is not installed"
            )
    try:
        manager = get_plugin_manager(autoload=True)
    except Exception as exc:
        return [*problems, f"get_plugin_manager() failed: {type(exc).__name__}: {exc}"]
    problems += [f"plugin {name!r} is not registered" for name in plugins if manager.get_plugin(name) is None]
    return problems


def _load_problems(ep: Any) -> list[str]:
    """Loading entry point ``ep`` works."""
    try:
        ep.load()
    except Exception as exc:
        return [f"entry point {ep.group}:{ep.name} = {ep.value} does not load: {type(exc).__name__}: {exc}"]
    return []


def _installed_file_problems(expected: Sequence[str]) -> list[str]:
    """Each packaged file (``expected``: wheel paths) is installed in this environment."""
    import importlib.util

    roots: dict[str, Path] = {}
    problems: list[str] = []
    for name in expected:
        top = name.split("/")[0]
        if top not in roots:
            spec = importlib.util.find_spec(top)
            locations = list(spec.submodule_search_locations or []) if spec else []
            roots[top] = Path(locations[0]) if locations else Path("/nonexistent")
        if not (roots[top] / name.split("/", 1)[1]).is_file():
            problems.append(f"not installed: {name}")
    return problems


def _marker_and_schema_problems() -> list[str]:
    """The typing markers and the schema of every plan version, read through the installed package."""
    from importlib import resources

    from kvrules.plan import SCHEMAS, plan_json_schema

    problems = [
        f"{top}/py.typed is not installed"
        for top in ("kvrules", "kvrules_plugins")
        if not (resources.files(top) / "py.typed").is_file()
    ]
    for version, schema_id in SCHEMAS.items():
        if plan_json_schema(version).get("$id") != schema_id:
            problems.append(f"schemas/plan-v{version}.json does not have $id {schema_id!r}")
    return problems


def _example_problems(source: Iterable[str]) -> list[str]:
    """Every ``hf/`` example folder of the source (``source``: wheel paths of the source's files) is an
    installed example, and every installed example loads."""
    from kvrules.examples import example_names

    names = example_names()
    return example_folder_problems(source, names) + example_load_problems(names)


def example_folder_problems(source: Iterable[str], names: Sequence[str]) -> list[str]:
    """Each ``hf/`` example folder of ``source`` (wheel paths) that is not among the example ``names``."""
    folders = {n.split("/")[3] for n in source if n.startswith(HF_EXAMPLES) and n.endswith("/example.json")}
    return [
        f"example hf-{folder} ({HF_EXAMPLES}{folder}/ in the source tree) is not installed"
        for folder in sorted(folders)
        if f"hf-{folder}" not in names
    ]


def example_load_problems(names: Iterable[str]) -> list[str]:
    """The examples ``names`` that do not load, one problem per distinct error."""
    from kvrules.examples import load_example

    failures: dict[str, list[str]] = {}
    for name in names:
        try:
            load_example(name)
        except Exception as exc:
            failures.setdefault(f"{type(exc).__name__}: {exc}", []).append(name)
    return [f"example(s) {', '.join(bad)} do not load: {error}" for error, bad in failures.items()]


# --- planning across two ranks -------------------------------------------------------------------------

#: the ranks of the two-rank check, each one's free memory (different: the smaller one decides)
RANK_MEMORY = (3 << 30, 2 << 30)
#: seconds the two ranks get, torch's import included, before the check fails
RANKS_TIMEOUT = 120


def rank_stages() -> list[dict[str, Any]]:
    """A 12-layer hybrid model (one full-attention layer per five sliding-window layers) cut into one
    pipeline stage per rank of :data:`RANK_MEMORY`."""
    import kvrules

    full = kvrules.FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    window = kvrules.SlidingWindowSpec(
        16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=1024
    )
    layers = {f"model.layers.{i}.self_attn": full if i % 6 == 5 else window for i in range(12)}
    names, ranks = list(layers), len(RANK_MEMORY)
    size = len(names) // ranks
    return [{n: layers[n] for n in names[r * size : (r + 1) * size]} for r in range(ranks)]


def _plan_on_rank(rank: int, port: int, results: Any) -> None:
    """One rank of :func:`distributed_problems` (run in a spawned process): join the gloo group on
    127.0.0.1, plan its stage across ranks, put ``(rank, num_blocks, tensor sizes)`` or
    ``(rank, error)`` on ``results``."""
    from datetime import timedelta

    try:
        import torch.distributed as dist

        import kvrules
        from kvrules.distributed import plan_across_ranks

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=len(RANK_MEMORY),
            timeout=timedelta(seconds=60),
        )
        try:
            config = kvrules.EngineConfig(max_model_len=32768)
            worker = plan_across_ranks(rank_stages()[rank], RANK_MEMORY[rank], config)
            results.put((rank, worker.num_blocks, [t.size for t in worker.tensors]))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:
        results.put((rank, f"{type(exc).__name__}: {exc}"))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def distributed_problems() -> list[str]:
    """``plan_across_ranks`` on two spawned CPU ranks returns, on each, its share of the plan one
    process makes of both stages (``kvrules.plan`` with one worker per rank)."""
    import multiprocessing
    import queue

    import kvrules

    expected = kvrules.plan(rank_stages(), list(RANK_MEMORY), kvrules.EngineConfig(max_model_len=32768))
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_plan_on_rank, args=(r, port, results)) for r in range(len(RANK_MEMORY))]
    for process in ranks:
        process.start()
    answers: dict[int, tuple[Any, ...]] = {}
    deadline = time.monotonic() + RANKS_TIMEOUT
    try:
        while len(answers) < len(ranks):
            rank, *answer = results.get(timeout=max(deadline - time.monotonic(), 0.1))
            answers[rank] = tuple(answer)
    except queue.Empty:
        missing = [str(r) for r in range(len(ranks)) if r not in answers]
        return [
            f"plan_across_ranks on two CPU ranks: rank(s) {', '.join(missing)} gave no answer in {RANKS_TIMEOUT} s"
        ]
    finally:
        for process in ranks:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    problems = []
    for rank, answer in sorted(answers.items()):
        want = (expected.num_blocks, [t.size for t in expected.workers[rank].tensors])
        if len(answer) == 1:
            problems.append(f"plan_across_ranks on two CPU ranks failed on rank {rank}: {answer[0]}")
        elif tuple(answer) != want:
            problems.append(
                f"plan_across_ranks on two CPU ranks: rank {rank} got num_blocks {answer[0]}, tensors "
                f"{answer[1]}; one process plans num_blocks {want[0]}, tensors {want[1]}"
            )
    return problems


# --- the checks run through the installed console script --------------------------------------------


def cli_problems(venv: Path, workdir: Path, schemas: Path) -> list[str]:
    """``kvrules plan --example issue-43626`` works, with ``--json`` a document valid against the
    installed schema its ``schema`` field names."""
    kvrules = venv / "bin" / "kvrules"
    command = [str(kvrules), "plan", "--example", EXAMPLE]
    text = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if text.returncode != 0 or EXAMPLE not in text.stdout:
        return [f"`{' '.join(command[1:])}` failed (exit {text.returncode}): {last_line(text.stderr)}"]
    done = subprocess.run([*command, "--json"], cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        return [
            f"`kvrules plan --example {EXAMPLE} --json` failed (exit {done.returncode}): {last_line(done.stderr)}"
        ]
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        return [f"`kvrules plan --example {EXAMPLE} --json` is not JSON: {exc}"]
    return schema_problems(document, schemas)


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (a command's error, without warnings and tracebacks)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def schema_problems(document: Any, schemas: Path) -> list[str]:
    """``document`` validates against the schema file in ``schemas`` whose ``$id`` is its ``schema``."""
    import jsonschema  # type: ignore[import-untyped]

    by_id = {}
    for path in sorted(schemas.glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        by_id[schema.get("$id")] = schema
    name = document.get("schema") if isinstance(document, dict) else None
    if name not in by_id:
        return [
            f"plan JSON has schema {name!r}; the installed package ships schemas {sorted(map(str, by_id))}"
        ]
    validator_class = jsonschema.validators.validator_for(by_id[name])
    validator_class.check_schema(by_id[name])
    errors = list(validator_class(by_id[name]).iter_errors(document))
    return [
        f"plan JSON fails {name}: {e.message} at {'/'.join(map(str, e.absolute_path)) or 'the top level'}"
        for e in errors[:5]
    ]


# --- the whole run -------------------------------------------------------------------------------------


def smoke(root: Path, tmp: Path) -> list[str]:
    """Build, install and check kvrules from the checkout ``root`` in the empty directory ``tmp``;
    returns the problems found (empty: the wheel is good).

    :raises SmokeError: the copy, build or install fails.
    """
    src, dist, venv, work = tmp / "src", tmp / "dist", tmp / "venv", tmp / "work"
    work.mkdir()
    names = checkout_files(root)
    step(f"copying {len(names)} files of {root} to {src}")
    copy_files(root, names, src)
    dirs = package_dirs(tomllib.loads((src / "pyproject.toml").read_text(encoding="utf-8")))
    expected = expected_files(names, dirs)
    step("building the wheel (python -m build --wheel)")
    wheel_path = build_wheel(src, dist)
    with zipfile.ZipFile(wheel_path) as wheel:
        shipped = wheel_package_files(wheel.namelist(), dirs)
        problems = packaging_problems(expected, shipped) + plugin_entry_point_problems(
            expected, wheel_entry_points(wheel)
        )
    step(
        f"{wheel_path.name}: {len(shipped)} package files; installing it into a fresh environment ({TORCH} first)"
    )
    python = fresh_environment(venv, wheel_path)
    step(f"checking the installed package from {work}")
    try:
        found = inside(python, work, {"shipped": sorted(shipped & expected), "source": sorted(expected)})
    except SmokeError as exc:  # kvrules does not even import there: report what was found so far
        return [*problems, str(exc)]
    problems += found["problems"]
    problems += guarded("console script", lambda: cli_problems(venv, work, Path(found["schemas"])))
    return problems


def inside(python: Path, workdir: Path, listing: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Run :func:`inside_checks` with the fresh environment's ``python`` in ``workdir`` (``-I``: no
    script directory, no environment variables, no user site on sys.path).

    :raises SmokeError: the checks crash or print no report.
    """
    script = workdir / "wheel_smoke_inside.py"
    shutil.copy2(Path(__file__), script)
    path = workdir / "listing.json"
    path.write_text(json.dumps(listing), encoding="utf-8")
    out = run([python, "-I", script, "--inside", path], workdir, "the checks in the fresh environment")
    report = json.loads(out)
    if not isinstance(report, dict) or "problems" not in report:
        raise SmokeError(f"the checks in the fresh environment printed {out!r}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: the whole smoke test, or (``--inside LISTING``) the installed-side checks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and say where")
    parser.add_argument("--inside", type=Path, metavar="LISTING", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside is not None:
        print(json.dumps(inside_checks(json.loads(args.inside.read_text(encoding="utf-8")))))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="kvrules-wheel-"))
    try:
        code = verdict(smoke(ROOT, tmp))
    except SmokeError as exc:
        print(f"wheel-smoke: error: {exc}", file=sys.stderr)
        code = 2
    finally:
        if args.keep:
            step(f"kept {tmp}")
        else:
            step(f"removing {tmp}")
            shutil.rmtree(tmp, ignore_errors=True)
    return code


def verdict(problems: Sequence[str]) -> int:
    """Print each problem; the exit status (1 if any, else 0)."""
    for problem in problems:
        print(f"wheel-smoke: FAIL: {problem}", file=sys.stderr)
    step("the wheel is good" if not problems else f"the wheel is NOT good: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
