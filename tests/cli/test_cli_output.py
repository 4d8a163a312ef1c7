"""The command line's own output (issue 25): R12, text survives any stdout encoding; R13, a failed
write to stdout is one line on stderr and exit status 1, a closed pipe is quiet."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvrules.cli.main import encodable, main

F = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
TIMEOUT = 60
CODE = "import sys; from kvrules.cli.main import main; sys.exit(main())"


def cjk_model(tmp_path: Path) -> Path:
    """A model file whose one layer is named ``层.0``."""
    path = tmp_path / "m.json"
    model = {"layers": {"层.0": F}, "engine": {"max_model_len": 4096}, "available_memory": ["1GiB"]}
    path.write_text(json.dumps(model, ensure_ascii=False), encoding="utf-8")
    return path


def stream(encoding: str, errors: str = "strict") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors)


def written(text_stream: io.TextIOWrapper) -> bytes:
    text_stream.flush()
    buffer = text_stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue()


# -- R12: any encoding --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "errors"), [("ascii", "strict"), ("latin-1", "strict"), ("ascii", "surrogateescape")]
)
def test_non_ascii_layer_name_on_a_narrow_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str, errors: str
) -> None:
    out = stream(encoding, errors)
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["plan", str(cjk_model(tmp_path))]) == 0
    text = written(out).decode(encoding)
    assert "\\u5c42.0" in text
    assert "capacity:" in text


def test_non_ascii_in_an_error_on_a_narrow_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    err = stream("ascii")
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["plan", str(tmp_path / "层.json")]) == 2
    assert "\\u5c42.json: cannot read the model file: file not found" in written(err).decode("ascii")


def test_utf8_output_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(cjk_model(tmp_path))]) == 0
    assert "层.0" in capsys.readouterr().out


def test_encodable() -> None:
    assert encodable("层.0", stream("utf-8")) == "层.0"
    assert encodable("层.0 é", stream("latin-1")) == "\\u5c42.0 é"
    assert encodable("plain", stream("ascii")) == "plain"


def test_pythonioencoding_ascii_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(
        [sys.executable, "-c", CODE, "plan", str(cjk_model(tmp_path))],
        capture_output=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert b"\\u5c42.0" in result.stdout
    assert result.stderr == b""


# -- R13: a failed write ------------------------------------------------------------------------


class FailingStream(io.StringIO):
    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


def test_full_stdout_is_one_line_and_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdout", FailingStream(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    assert main(["plan", "--example", "llama3-8b", "--json"]) == 1
    err = capsys.readouterr().err
    assert err == f"kvrules: error: cannot write to stdout ({os.strerror(errno.ENOSPC)})\n"


def test_broken_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdout", FailingStream(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    assert main(["plan", "--example", "llama3-8b"]) == 1
    assert capsys.readouterr().err == ""


def test_streams_are_restored(capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.stdout, sys.stderr
    assert main(["examples"]) == 0
    assert (sys.stdout, sys.stderr) == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "argv",
    [["plan", "--example", "llama3-8b", "--json"], ["plan", "--example", "llama3-8b"], ["--help"]],
    ids=["json", "text", "help"],
)
def test_dev_full(argv: list[str]) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-c", CODE, *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr == f"kvrules: error: cannot write to stdout ({os.strerror(errno.ENOSPC)})\n"


def test_closed_pipe_is_quiet() -> None:
    """The reader goes away before the first write (``| head -1`` on an output larger than the
    pipe's buffer): no traceback, no ``Exception ignored``, status 1."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, "plan", "--example", "deepseek-v4-flash", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        err = proc.stderr.read()
        assert proc.wait(timeout=TIMEOUT) == 1
    finally:
        proc.kill()
        proc.stderr.close()
    assert err == b""
