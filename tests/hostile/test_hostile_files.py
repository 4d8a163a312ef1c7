"""Hostile files (issue 25): R2, what is read is a regular file below a size limit, read with a
bound; R6, an output file that is one of the inputs is refused.

Anything that would block or exhaust memory if the fix were broken (a FIFO, ``/dev/zero``, a
2 GiB sparse file) runs the command line in a subprocess with a timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kvrules
from kvrules import ModelFileError
from kvrules.cli.main import main
from kvrules.hf.config import HFConfig
from kvrules.jsonfile import MAX_DOCUMENT_BYTES, read_bytes
from kvrules.model import load_model_file

F = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
MODEL = {
    "layers": {"model.layers.0.self_attn": F},
    "engine": {"max_model_len": 4096},
    "available_memory": ["1GiB"],
}
HF = Path(kvrules.__file__).parent / "examples" / "hf" / "gpt-oss-20b-eagle"
#: seconds a subprocess may take; the fixed reader answers in about one
TIMEOUT = 60

needs_mkfifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo is not available")


def kvrules_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``kvrules ARGV`` in a subprocess (a hang fails the test after :data:`TIMEOUT` s)."""
    code = "import sys; from kvrules.cli.main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``kvrules: error:`` line of a refused command (exit 2, no traceback)."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvrules: error: "), result.stderr
    return lines[0]


def model_file(tmp_path: Path, name: str = "m.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(MODEL), encoding="utf-8")
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("os.mkfifo is not available")
    path = tmp_path / "f.json"
    try:
        os.mkfifo(path)
    except OSError as exc:  # a file system without FIFOs
        pytest.skip(f"cannot make a FIFO here: {exc}")
    return path


# -- R2: a FIFO is never opened for a blocking read ------------------------------------------------


@needs_mkfifo
@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["plan", "f.json"], "model file"),
        (["compare", "f.json"], "model file"),
        (["allocate", "f.json"], "model file"),
        (["specs", "--hf-config", "f.json"], "Hugging Face config"),
        (["plan", "--hf-config", "f.json"], "Hugging Face config"),
        (["plan", "--hf-config", str(HF / "config.json"), "--draft", "f.json"], "Hugging Face config"),
    ],
    ids=["plan", "compare", "allocate", "specs-hf-config", "plan-hf-config", "draft"],
)
def test_fifo_is_refused_without_blocking(tmp_path: Path, fifo: Path, argv: list[str], what: str) -> None:
    line = one_error_line(kvrules_cli(*argv, cwd=tmp_path))
    assert f"f.json: cannot read the {what}: it is a FIFO (named pipe), not a regular file" in line
    assert "save the document to a file" in line


@needs_mkfifo
def test_fifo_swapped_in_after_the_check_does_not_block(tmp_path: Path, fifo: Path) -> None:
    """``stat`` says a regular file (the FIFO replaced it afterwards): the open must not block,
    and ``fstat`` of what was opened refuses the FIFO."""
    regular = model_file(tmp_path)
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from kvrules import ModelFileError
        from kvrules import jsonfile
        real_stat = os.stat
        jsonfile.os.stat = lambda path, *a, **k: real_stat({str(regular)!r})
        try:
            jsonfile.read_bytes(Path({str(fifo)!r}), "model file")
        except ModelFileError as exc:
            print(exc)
            sys.exit(0)
        sys.exit("read the FIFO")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "it is a FIFO (named pipe), not a regular file" in result.stdout


# -- R2: devices, sockets, sizes ----------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_refused(tmp_path: Path) -> None:
    line = one_error_line(kvrules_cli("plan", "/dev/zero", cwd=tmp_path))
    assert "/dev/zero: cannot read the model file: it is a character device, not a regular file" in line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_never_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    with pytest.raises(ModelFileError, match="character device"):
        load_model_file("/dev/zero")
    assert opened == []


def test_socket_is_refused(tmp_path: Path) -> None:
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no Unix sockets")
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.bind(str(path))
        except OSError as exc:  # a path too long for a socket address
            pytest.skip(f"cannot bind a Unix socket here: {exc}")
        with pytest.raises(ModelFileError, match=r"s\.json: cannot read the model file: it is a socket"):
            load_model_file(path)


def test_two_gib_sparse_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(2 * 2**30)
    line = one_error_line(kvrules_cli("plan", "big.json", cwd=tmp_path))
    over = 2 * 2**30 - MAX_DOCUMENT_BYTES
    assert f"it is 2,147,483,648 bytes, {over:,} bytes over the limit of 268,435,456 bytes" in line
    assert "256 MiB, kvrules.jsonfile.MAX_DOCUMENT_BYTES" in line
    assert "NUL byte" not in line


def test_limit_is_256_mib_and_one_byte_over_is_refused(tmp_path: Path) -> None:
    assert MAX_DOCUMENT_BYTES == 256 * 2**20
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(ModelFileError, match="1 byte over the limit of 268,435,456 bytes"):
        load_model_file(path)


def test_hf_reader_has_the_same_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with path.open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 10)
    with pytest.raises(ModelFileError, match=r"cannot read the Hugging Face config: it is .* over the limit"):
        HFConfig.load(tmp_path)  # the directory's config.json


def test_limit_boundary(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b"0123456789")
    assert read_bytes(path, "model file", limit=10) == b"0123456789"
    with pytest.raises(ModelFileError, match=r"m\.json: .* 10 bytes, 1 byte over the limit of 9 bytes"):
        read_bytes(path, "model file", limit=9)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc")
def test_read_is_bounded_when_the_size_says_nothing() -> None:
    """A ``/proc`` file is regular and says 0 bytes: the read itself stops past the limit."""
    path = Path("/proc/self/status")
    if path.stat().st_size != 0:
        pytest.skip("/proc says a size here")
    with pytest.raises(ModelFileError, match="reading it gave more bytes than the limit of 16 bytes"):
        read_bytes(path, "model file", limit=16)


def test_regular_files_read_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = model_file(tmp_path)
    os.symlink(path, tmp_path / "link.json")
    assert len(load_model_file(tmp_path / "link.json").specs) == 1
    assert main(["plan", str(path)]) == 0
    assert "capacity:" in capsys.readouterr().out


def test_directory_and_missing_file_keep_their_messages(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"cannot read the model file: it is a directory$"):
        load_model_file(tmp_path)
    with pytest.raises(ModelFileError, match=r"cannot read the model file: file not found$"):
        load_model_file(tmp_path / "nope.json")


# -- R6: an output that is an input ---------------------------------------------------------------


def refused_output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvrules: error: "), err
    assert out == ""
    return lines[0]


def test_plan_output_over_the_model_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = model_file(tmp_path)
    before = path.read_bytes()
    line = refused_output(capsys, "plan", str(path), "-o", str(path))
    assert f"-o {path}: is the model file {path}; writing there would overwrite the input" in line
    assert path.read_bytes() == before


def test_output_through_a_symlink_or_a_hard_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = model_file(tmp_path)
    before = path.read_bytes()
    os.symlink(path.name, tmp_path / "link.json")
    assert "is the model file" in refused_output(capsys, "plan", str(path), "-o", str(tmp_path / "link.json"))
    os.link(path, tmp_path / "hard.json")
    line = refused_output(capsys, "plan", str(tmp_path / "hard.json"), "--picture", str(path))
    assert line.startswith(f"kvrules: error: --picture {path}: is the model file")
    relative = os.path.relpath(path)
    assert "is the model file" in refused_output(capsys, "plan", str(path), "-o", relative)
    assert path.read_bytes() == before


def test_output_over_a_missing_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "new.json"
    assert "is the model file" in refused_output(
        capsys, "plan", str(path), "-o", str(tmp_path / "." / "new.json")
    )
    assert not path.exists()


def test_specs_output_over_the_hf_config_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_bytes((HF / "config.json").read_bytes())
    before = config.read_bytes()
    line = refused_output(capsys, "specs", "--hf-config", str(tmp_path), "-o", str(config))
    assert f"is the Hugging Face config --hf-config {config}" in line
    line = refused_output(capsys, "plan", "--hf-config", str(config), "--memory", "1GiB", "-o", str(config))
    assert "is the Hugging Face config" in line
    assert config.read_bytes() == before


def test_output_over_the_draft_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = tmp_path / "draft.json"
    draft.write_bytes((HF / "draft.json").read_bytes())
    line = refused_output(
        capsys, "plan", "--hf-config", str(HF), "--draft", str(draft), "--memory", "1GiB", "-o", str(draft)
    )
    assert f"is the draft config --draft {draft}" in line


def test_output_elsewhere_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = model_file(tmp_path)
    out = tmp_path / "plan.json"
    assert main(["plan", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text(encoding="utf-8"))["schema"] == "kvrules.plan/v2"
    assert json.loads(path.read_text(encoding="utf-8")) == MODEL
