"""Input files that are not plain regular files, files that are not what their name says, and where a
trace came from (issue 15, items 10, 19 and 24): pipes read like files, a FIFO with no writer never
hangs, every message names the file, and a trace read from a file is identified by its content."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nspsim.cli.main import main
from nspsim.plan import Plan
from nspsim.trace import HistogramTrace, load_trace, wikipedia_trace
from nspsim.trace.batching import BatchSampler

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--gpus", "8", "--tokens-per-batch", "4k", "--max-context", "1k"]


def _pipe_path(data: bytes) -> tuple[str, int]:
    """A path to the read end of a pipe holding ``data`` (what ``<(printf ...)`` hands a command)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return f"/dev/fd/{read}", read


def _nspsim(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``nspsim ARGS`` in a child process with a timeout, so a hang fails the test instead of the run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's nspsim, whatever the working directory
    command = [sys.executable, "-m", "nspsim", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=20, check=False)


# ---- pipes and FIFOs (item 10) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "suffix, data, lengths",
    [
        ("", b"100\n200\n", [100, 200]),
        ("", "10\n20\n".encode("utf-16"), [10, 20]),  # the byte-order mark is sniffed from the same buffer
    ],
)
def test_a_pipe_reads_like_a_file(suffix: str, data: bytes, lengths: list[int]) -> None:
    path, fd = _pipe_path(data)
    try:
        trace = load_trace(path + suffix)
    finally:
        os.close(fd)
    assert trace.materialize().tolist() == lengths  # the sniff used to swallow the first line: [200], or empty


def test_trace_stats_of_a_process_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    path, fd = _pipe_path(b"100\n200\n")
    try:
        assert main(["trace", "stats", path, "--json"]) == 0
    finally:
        os.close(fd)
    data = json.loads(capsys.readouterr().out)
    assert data["count"] == 2 and data["total_tokens"] == 300


def test_a_histogram_through_a_pipe(tmp_path: Path) -> None:
    hist = HistogramTrace(name="h", source="s", edges=(1, 4, 10), counts=(3, 1))
    path, fd = _pipe_path(json.dumps(hist.to_json_dict()).encode())
    try:
        assert HistogramTrace.from_json(path) == hist
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "args, what",
    [
        (["trace", "stats", "{fifo}"], "trace file"),
        (["inspect", "{fifo}"], "plan"),
        (["simulate", "{fifo}"], "plan"),
        (["info", "--profile", "{fifo}"], "cost profile"),
        (["plan", "--trace", "{fifo}"], "trace file"),
    ],
)
def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path, args: list[str], what: str) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    proc = _nspsim([a.format(fifo=fifo) for a in args], tmp_path)  # blocked forever in open() before
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"nspsim: error: {what} {fifo} is a pipe with nothing written to it (no writer); "
        "start its writer first, or give a regular file\n"
    )


def test_a_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "lens.txt"
    os.mkfifo(fifo)
    keep = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer can open without blocking
    writer = os.open(fifo, os.O_WRONLY)
    os.write(writer, b"5\n6\n")
    closer = threading.Timer(0.3, os.close, (writer,))  # the writer finishes while the trace is being read
    closer.start()
    try:
        started = time.monotonic()
        assert load_trace(str(fifo)).materialize().tolist() == [5, 6]
        assert time.monotonic() - started >= 0.2  # it waited for the writer's end of file
    finally:
        closer.join()
        os.close(keep)


def test_a_fifo_beside_an_output_is_refused_before_any_work(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p.config.json")
    proc = _nspsim(["plan", *TINY, "--trace", "longtail-paper", "-o", "p.json"], tmp_path)  # hung writing the config
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "p.config.json is not a regular file" in proc.stderr and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_read_as_a_trace(tmp_path: Path, path: str) -> None:
    proc = _nspsim(["trace", "stats", path], tmp_path)  # /dev/zero was read until memory ran out
    assert proc.returncode == 2
    kind = "is not a regular file or a pipe (a character device); give a file"
    assert proc.stderr == f"nspsim: error: trace file {path} {kind}\n"


# ---- messages name the file (item 19) ------------------------------------------------------------------


def test_an_undecodable_profile_names_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prof.json"
    path.write_bytes(b"\xff\xfe{bad")
    assert main(["info", "--profile", str(path)]) == 2
    err = capsys.readouterr().err  # "'utf-8' codec can't decode byte 0xff in position 0" before
    assert err == f"nspsim: error: {path}: not readable as utf-8 text (invalid start byte at byte 0)\n"


def test_an_undecodable_plan_names_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(b"\xff\xfe{bad")
    for command in ("inspect", "simulate"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert err == f"nspsim: error: {path}: not readable as utf-8 text (invalid start byte at byte 0)\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["trace", "stats", ""], "trace: empty path; give a trace file or a built-in name (code, commoncrawl,"),
        (["info", "--trace", ""], "trace: empty path"),
        (["info", "--profile", ""], "cost profile: empty path; give a profile file or a built-in profile"),
        (["inspect", ""], "plan: empty path; give a file name"),
    ],
)
def test_an_empty_path_says_so(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2  # "is a directory" without a path, or (--profile '') silently no profile, before
    err = capsys.readouterr().err
    assert err.startswith(f"nspsim: error: {message}") and err.count("\n") == 1


# ---- a trace's identity (item 24) ----------------------------------------------------------------------


def _plan_of(trace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Plan:
    out = tmp_path / "plan.json"
    assert main(["plan", *TINY, "--trace", trace, "-o", str(out)]) == 0
    capsys.readouterr()
    return Plan.load(out)


def test_files_with_the_same_name_do_not_collide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "x.txt", tmp_path / "b" / "x.txt"
    a.write_text("100\n200\n")
    b.write_text("100\n300\n")
    ta, tb = load_trace(str(a)), load_trace(str(b))
    digest = hashlib.sha256(a.read_bytes()).hexdigest()[:16]
    assert ta.file is not None and (ta.file.path, ta.file.content_hash) == (str(a), digest)
    assert ta.identity == f"x.txt@{digest}" and tb.identity != ta.identity
    plan_a = _plan_of(str(a), tmp_path, capsys)
    plan_b = _plan_of(str(b), tmp_path, capsys)
    assert plan_a.batch.trace == f"x.txt@{digest}" and plan_b.batch.trace.startswith("x.txt@")
    assert plan_a.batch.trace != plan_b.batch.trace  # both were "x.txt"


def test_an_edited_histogram_keeping_a_builtin_name_is_not_that_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = wikipedia_trace().to_json_dict()
    body["counts"] = [c + 1 for c in body["counts"]]  # edited, still named "wikipedia"
    path = tmp_path / "wiki.json"
    path.write_text(json.dumps(body))
    trace = load_trace(str(path))
    assert trace.name == "wikipedia"
    expected = "wiki.json@" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert trace.identity == expected
    assert _plan_of(str(path), tmp_path, capsys).batch.trace == expected  # was "wikipedia"


def test_builtin_traces_keep_their_name_and_batch_fingerprints() -> None:
    """Plans made from built-in traces hash as before: their batches are unchanged (pinned before item 24)."""
    for name, fingerprint, count in (("wikipedia", "734abb8e9bd9e30a", 86), ("code", "6d7c428afc23e267", 41)):
        trace = load_trace(name)
        assert trace.file is None and trace.identity == name
        batch = BatchSampler(trace, tokens_per_batch=64 * 1024, max_context=16 * 1024, seed=3).batch(2)
        assert (batch.trace, batch.fingerprint(), batch.num_samples) == (name, fingerprint, count)


def test_trace_stats_reports_the_file_and_its_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.txt"
    path.write_text("5\n6\n")
    assert main(["trace", "stats", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    digest = hashlib.sha256(b"5\n6\n").hexdigest()[:16]
    assert data["identity"] == f"t.txt@{digest}"
    assert data["file"] == {"path": str(path), "content_hash": digest}


@pytest.mark.parametrize(
    "name, body",
    [
        ("cr.txt", b"100\r200\r"),
        ("crlf.txt", b"# note\r\n100\r\n200\r\n"),
        ("cr.jsonl", b'{"length": 100}\r{"length": 200}\r'),
        ("cr.csv", b"length\r100\r200\r"),
    ],
)
def test_every_line_ending_reads_as_before(tmp_path: Path, name: str, body: bytes) -> None:
    """Reading the bytes once (not a file opened in text mode) keeps LF, CRLF and CR line endings."""
    path = tmp_path / name
    path.write_bytes(body)
    assert load_trace(str(path)).materialize().tolist() == [100, 200]


@pytest.mark.parametrize(
    "argv, what", [(["info", "--profile", "{dir}"], "cost profile"), (["inspect", "{dir}"], "plan")]
)
def test_a_directory_is_named_as_one(
    tmp_path: Path, argv: list[str], what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.format(dir=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == f"nspsim: error: {what} {tmp_path} is a directory; give a file\n"


def test_trace_stats_prints_a_histograms_words_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A histogram file's name and source are printed escaped (``\\x1b``), never as raw terminal codes."""
    body = wikipedia_trace().to_json_dict()
    body["name"], body["source"] = "wiki\x1b[31mpedia", "src\x1b]0;title\x07\r\nfake"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(body))
    assert main(["trace", "stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "wiki\\x1b[31mpedia" in out
    assert main(["trace", "stats", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"] == body["name"]  # JSON keeps it exact


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_a_plan_holding_a_non_finite_number_is_refused_on_reading(
    tmp_path: Path, constant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``NaN`` is not JSON: a plan whose metadata holds one is refused when read, naming the file and
    the line, instead of passing inspect and failing later as "a bug in nspsim" when --json writes it."""
    plan_path = tmp_path / "p.json"
    assert main(["plan", *TINY, "-o", str(plan_path)]) == 0
    capsys.readouterr()
    plan_path.write_text(plan_path.read_text().replace('"load_s": ', f'"load_s": {constant}, "was": ', 1))
    for argv in (["inspect", str(plan_path)], ["simulate", str(plan_path), "--json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"nspsim: error: {plan_path} line "), err
        assert f"({constant} is not a finite number" in err[0], err
