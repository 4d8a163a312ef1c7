"""Special files under fuzz (issue 25 R2): every command that reads a file, given something that
is not a readable regular file of a sane size, ends quickly in exit 2 with a ``kvrules: error:``
line naming the path; never a hang (a FIFO), never reading until memory runs out (``/dev/zero``,
an over-size sparse file), never a traceback. A case is data::

    {"kind": "fifo", "slot": "hf-inside", "command": "specs", "name": "model.json", "flags": []}

``kind`` is what the path is (:data:`KINDS`); ``slot`` where it is given: the model file
(``model``), the ``--hf-config`` path itself (``hf``), the ``config.json`` inside a
``--hf-config`` folder (``hf-inside``) or the ``--draft`` config (``draft``). :func:`run_special_case`
makes the file in a fresh folder and runs ``kvrules`` in a forked child (:mod:`fuzz.forked`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.cli_cases import TINY, WARM_UP, hf_files
from fuzz.draw import Draw
from fuzz.forked import classify, fork_main, warm_up
from fuzz.outcome import BROKEN, ERROR, OK, Outcome
from kvrules.jsonfile import MAX_DOCUMENT_BYTES
from kvrules.values import shown

Case = dict[str, Any]

#: seconds one special-file input may take before it counts as a hang ("quickly")
SECONDS = 5

#: what the path given is; ``unreadable`` only where permissions bind (not as root)
ALL_KINDS: tuple[str, ...] = (
    "fifo",
    "dev-zero",
    "link-to-dev-zero",
    "dev-null",
    "directory",
    "dangling-symlink",
    "symlink-loop",
    "link-to-fifo",
    "socket",
    "sparse-oversize",
    "empty",
    "unreadable",
)
KINDS: tuple[str, ...] = tuple(k for k in ALL_KINDS if k != "unreadable" or os.geteuid() != 0)
#: which commands read a file in which slot
SLOTS: dict[str, tuple[str, ...]] = {
    "model": ("plan", "compare", "allocate"),
    "hf": ("plan", "specs", "compare"),
    "hf-inside": ("plan", "specs", "compare"),
    "draft": ("plan", "specs"),
}
NAMES = ("model.json", "config.json", "mödel ✓ file.json", "with space.json", "x" * 150 + ".json", "m.toml")
FLAGS = ([], ["--json"], ["--strategies", "default"], ["--max-model-len", "4096"], ["--no-autoload"])


def special_case(draw: Draw) -> Case:
    """A special file in one of the slots of a command that reads a file."""
    slot = draw.choice(sorted(SLOTS))
    return {
        "kind": draw.choice(KINDS),
        "slot": slot,
        "command": draw.choice(SLOTS[slot]),
        "name": draw.choice(NAMES),
        "flags": list(draw.choice(FLAGS)),
    }


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link_to_fifo(path: Path) -> Path:
    os.mkfifo(path.with_name("fifo"))
    path.symlink_to(path.with_name("fifo"))
    return path


def _link(target: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.symlink_to(path.with_name(target) if not target.startswith("/") else target)
        return path

    return make


def _self_link(path: Path) -> Path:
    path.symlink_to(path)
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").mkdir()
    return path


def _socket(path: Path) -> Path:
    if len(os.fsencode(path)) > 100:  # the longest AF_UNIX address is 107 bytes
        path = path.with_name("s.sock")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
    return path


def _sparse(path: Path) -> Path:
    with path.open("wb") as out:
        out.truncate(MAX_DOCUMENT_BYTES + 1)
    return path


def _empty(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def _unreadable(path: Path) -> Path:
    path.write_text(json.dumps(TINY), encoding="utf-8")
    path.chmod(0)
    return path


_MAKERS: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "link-to-fifo": _link_to_fifo,
    "link-to-dev-zero": _link("/dev/zero"),
    "dangling-symlink": _link("nowhere.json"),
    "symlink-loop": _self_link,
    "directory": _directory,
    "socket": _socket,
    "sparse-oversize": _sparse,
    "empty": _empty,
    "unreadable": _unreadable,
}


def make_special(kind: str, path: Path) -> Path:
    """Create a ``kind`` file at ``path``; return the path to give kvrules (``dev-*``: the device
    itself, or a link to it named ``config.json``; a socket: a short name when ``path`` is long)."""
    if kind in ("dev-zero", "dev-null"):
        device = Path("/dev") / kind[len("dev-") :]
        if path.name != "config.json":
            return device
        path.symlink_to(device)  # inside a --hf-config folder: config.json is the device
        return path
    return _MAKERS[kind](path)


def special_argv(case: Case, work: Path) -> tuple[list[str], Path]:
    """Make ``case``'s files in ``work`` (emptied first); the command line and the special path."""
    if work.exists():
        for child in work.rglob("*"):
            if not child.is_symlink():
                child.chmod(0o700)
        shutil.rmtree(work)
    work.mkdir(parents=True)
    config, _, _ = hf_files("gpt-oss-20b-eagle")
    slot, command = case["slot"], case["command"]
    if slot == "model":
        special = make_special(case["kind"], work / case["name"])
        argv = [command, str(special)]
        if command == "allocate":
            argv += ["--device", "meta"]
    elif slot == "hf":
        special = make_special(case["kind"], work / case["name"])
        argv = [command, "--hf-config", str(special)]
    else:
        folder = work / "hf"
        folder.mkdir()
        if slot == "hf-inside":
            special = make_special(case["kind"], folder / "config.json")
        else:
            (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
            special = make_special(case["kind"], work / case["name"])
        argv = [command, "--hf-config", str(folder)]
        if slot == "draft":
            argv += ["--draft", str(special), "--num-speculative-tokens", "3"]
    if command in ("plan", "compare") and slot != "model":
        argv += ["--memory", "30GiB", "--max-model-len", "4096"]
    return argv + case["flags"], special


def _names(stderr: str, path: Path) -> bool:
    """True when a ``kvrules: error:`` line of ``stderr`` names ``path`` (as given, or shown)."""
    lines = [line for line in stderr.splitlines() if line.startswith("kvrules") and ": error: " in line]
    forms = {str(path), shown(str(path)), path.name, shown(path.name)}
    return any(form in line for line in lines for form in forms)


def run_special_case(case: Case, work: Path) -> Outcome:
    """``kvrules`` on ``case``'s special file in a forked child: exit 2 naming the path, or
    ``broken`` (``refused`` when it did not end in exit 2, ``names-path`` when the error does not
    name the path); a traceback, a crash or more than :data:`SECONDS` as :func:`classify` says."""
    warm_up(WARM_UP)
    argv, special = special_argv(case, work / "special")
    report = fork_main(argv, SECONDS)
    outcome = classify(report)
    if outcome.kind == OK:
        return Outcome(BROKEN, f"exit 0 on {case['kind']} {special}", "SpecialFile", "refused")
    if outcome.kind == ERROR and not _names(str(report.get("stderr", "")), special):
        return Outcome(
            BROKEN, f"the error does not name {special}: {outcome.detail}", "SpecialFile", "names-path"
        )
    return outcome


def shrink_special(case: Case, run: Any, seconds: float = 0) -> tuple[Case, Outcome]:
    """A case is already a handful of choices: the flags dropped and the plain name, if it still fails so."""
    target = run(case)
    for candidate in ({**case, "flags": []}, {**case, "flags": [], "name": "model.json"}):
        if run(candidate).cause == target.cause:
            case = candidate
    return case, run(case)


def show_special(case: Case) -> str:
    """``case`` as one JSON line."""
    return json.dumps(case, ensure_ascii=True)


__all__ = [
    "KINDS",
    "SLOTS",
    "make_special",
    "run_special_case",
    "show_special",
    "shrink_special",
    "special_case",
]
