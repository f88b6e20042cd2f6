"""Output paths (issue 15, item 16): ``nspsim.cli.outputs.output_file`` checks a path before any work and
``write_output`` writes it and its siblings. Standard output (``-``), a trailing ``/``, FIFOs and
unwritable (pseudo) filesystems are refused up front; a character device such as /dev/null is
written to without siblings beside it; a late failure names the flag."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nspsim.cli.flags import shown
from nspsim.cli.main import main
from nspsim.cli.outputs import output_file, write_output

pytestmark = pytest.mark.timeout(120)  # an output check that opened a FIFO would block forever


@pytest.mark.parametrize(
    "text, message",
    [
        ("-", "-o -: writing to standard output is not supported (it carries the summary); give a file name"),
        ("{tmp}/new/", "names a directory (it ends with '/')"),
        ("{tmp}/fifo", "is not a regular file (a FIFO, socket or block device)"),
        ("{tmp}/" + "x" * 300 + ".json", "File name too long"),
        pytest.param(
            "/proc/nspsim-test.json",
            "-o /proc/nspsim-test.json: ",
            marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc"),
        ),
    ],
)
def test_unusable_output_paths_are_refused_up_front(text: str, message: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        output_file(text.format(tmp=tmp_path), flag="-o", siblings=(".config.json",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]  # nothing created, not even the directory


def test_the_writability_probe_changes_nothing(tmp_path: Path) -> None:
    existing = tmp_path / "plan.json"
    existing.write_text("old")
    before = existing.stat().st_mtime_ns
    assert output_file(str(existing), flag="-o", siblings=(".config.json",)) == existing
    assert existing.read_text() == "old" and existing.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no probe file, no sibling left


def test_a_device_target_gets_no_siblings() -> None:
    sibling = Path(os.devnull).with_suffix(".config.json")
    if sibling.is_file():  # left by an older nspsim
        sibling.unlink()
    path = output_file(os.devnull, flag="-o", siblings=(".config.json",))
    write_output(path, "plan", flag="-o", siblings={".config.json": "{}"})
    assert not sibling.exists()


def test_a_late_write_failure_names_the_flag(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    path = output_file(str(folder / "t.json"), flag="--timeline", siblings=(".config.json",))
    folder.rmdir()  # gone between the check and the write
    with pytest.raises(ValueError, match=r"^--timeline .*t.json: cannot write .*t.json \(No such file or directory\)"):
        write_output(path, "{}", flag="--timeline", siblings={".config.json": "{}"})


def test_plan_to_the_null_device(capsys: pytest.CaptureFixture[str]) -> None:
    sibling = Path(os.devnull).with_suffix(".config.json")
    if sibling.is_file():
        sibling.unlink()
    argv = ["plan", "--model", "tiny", "--cluster", "cpu", "--gpus", "2", "--tokens-per-batch", "16k"]
    assert main([*argv, "--max-context", "4k", "-o", os.devnull, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan_hash"] and not sibling.exists()
    assert main([*argv, "-o", "-"]) == 2
    assert "writing to standard output is not supported" in capsys.readouterr().err
    assert not Path("-").exists()


def test_shown_escapes_what_a_terminal_would_interpret() -> None:
    assert shown("nsp") == "nsp" and shown("a b") == "a b" and shown("é") == "é"
    assert shown("\x1b[2J\r\n\t\x7f\x9b") == "\\x1b[2J\\x0d\\x0a\\x09\\x7f\\x9b"
    assert shown("\u202eabc\u2028") == "\\u202eabc\\u2028" and shown("\U000e0001") == "\\U000e0001"


def test_an_output_named_like_a_sibling_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`nspsim_runtime.train --records run.plans.jsonl` replaced an earlier run's plan log (and wrote its own
    beside it as run.plans.plans.jsonl); `plan -o p.config.json` an earlier plan's config. A name ending
    in one of the output's sibling suffixes is refused before any work, and nothing is touched."""
    log = tmp_path / "run.plans.jsonl"
    log.write_text("earlier\n")
    for name in ("run.plans.jsonl", "run.config.json"):
        with pytest.raises(ValueError, match=f"a name ending in .{name.split('.', 1)[1]} is where the output beside"):
            output_file(str(tmp_path / name), flag="--records", siblings=(".config.json", ".plans.jsonl"))
    assert (
        main(
            [
                "plan",
                "--gpus",
                "8",
                "--tokens-per-batch",
                "4k",
                "--max-context",
                "1k",
                "-o",
                str(tmp_path / "p.config.json"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"nspsim: error: -o {tmp_path / 'p.config.json'}: a name ending in"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.plans.jsonl"] and log.read_text() == "earlier\n"
    output_file(str(tmp_path / "run.jsonl"), flag="--records", siblings=(".config.json", ".plans.jsonl"))  # fine
