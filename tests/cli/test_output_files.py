"""Result sets committed whole and one writer per output (nspsim.output_files), and the commands that
use them: two sweeps into one folder, a sweep failing late (a full disk, a value that cannot be
written), a read-only result, ``nan`` planner options, two training runs on one ``--records``."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from nspsim.cli.main import main
from nspsim.cli.outputs import write_output
from nspsim.output_files import OutputLock, commit_files, output_lock

SPEC = (
    "[workload]\nmodel = 'tiny'\ncluster = 'cpu'\ntrace = 'code'\ntokens_per_batch = '64k'\n"
    "max_context = '32k'\ngpus = 2\n[run]\nplanners = ['static-best', 'nsp']\niters = 1\n"
)
RESULT_FILES = ("results.parquet", "summary.parquet", "summary.csv", "sweep.config.json")


def write(text: str) -> Any:
    return lambda path: path.write_text(text)


def full_disk(path: Path) -> None:
    path.write_text("half")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_leaves_every_target_as_it_was(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    commit_files({a: write("A1"), b: write("B1")})
    with pytest.raises(
        ValueError, match="b.txt: cannot write .No space left on device.; the earlier files are unchanged"
    ):
        commit_files({a: write("A2"), b: full_disk})
    assert (a.read_text(), b.read_text()) == ("A1", "B1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]  # no temporary file left


def test_any_exception_in_a_writer_leaves_the_targets_and_no_temporary(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("old")

    def bad(path: Path) -> None:
        raise ValueError("cannot serialise")

    with pytest.raises(ValueError, match="cannot serialise"):
        commit_files({a: write("new"), tmp_path / "b.txt": bad})
    assert a.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_read_only_target_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("A1")
    b.write_text("B1")
    b.chmod(0o444)
    real = os.access  # root may write a read-only file; the check asks what the mode allows
    monkeypatch.setattr(os, "access", lambda path, mode: real(path, mode) and Path(path) != b)
    with pytest.raises(ValueError, match="b.txt: exists and is not a writable file; nothing was written"):
        commit_files({a: write("A2"), b: write("B2")})
    assert a.read_text() == "A1" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_a_symlinked_target_is_replaced_where_it_points(tmp_path: Path) -> None:
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old")
    link.symlink_to(real)
    commit_files({link: write("new")})
    assert link.is_symlink() and real.read_text() == "new"


def test_write_output_keeps_the_page_when_its_sibling_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "r.html"
    write_output(page, "page 1", flag="-o", siblings={".json": "data 1"})
    real = Path.write_text

    def failing(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(".r.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(ValueError, match="-o .*r.html: cannot write .*r.json.*; the earlier files are unchanged"):
        write_output(page, "page 2", flag="-o", siblings={".json": "data 2"})
    assert page.read_text() == "page 1" and (tmp_path / "r.json").read_text() == "data 1"


def test_the_lock_admits_one_holder_at_a_time(tmp_path: Path) -> None:
    with (
        output_lock(tmp_path, "sweep", what="nspsim sweep"),
        pytest.raises(ValueError, match="another nspsim sweep is writing into this output now"),
    ):
        OutputLock(tmp_path, "sweep", what="nspsim sweep")
    OutputLock(tmp_path, "sweep", what="nspsim sweep").release()  # free again once the holder is done


def sweep(spec: Path, out: Path, *extra: str) -> int:
    return main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--json", *extra])


def test_a_second_sweep_into_a_busy_folder_fails_at_once_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "out"
    spec.write_text(SPEC)
    out.mkdir()
    with output_lock(out, "sweep", what="nspsim sweep"):
        assert sweep(spec, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another nspsim sweep is writing into this output now" in err[0]
    assert not any((out / name).exists() for name in RESULT_FILES)


def test_a_sweep_failing_late_keeps_the_earlier_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "out"
    spec.write_text(SPEC)
    assert sweep(spec, out) == 0
    before = {name: (out / name).read_bytes() for name in RESULT_FILES}
    capsys.readouterr()
    spec.write_text(SPEC.replace("iters = 1", "iters = 2"))
    real = pq.write_table

    def second_file_fails(table: Any, where: Any, *args: Any, **kwargs: Any) -> None:
        if ".summary.parquet" in str(where):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", second_file_fails)
    assert sweep(spec, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "unchanged" in err[0]
    assert {name: (out / name).read_bytes() for name in RESULT_FILES} == before
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_nan_planner_options_are_refused_where_the_spec_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "out"
    spec.write_text(SPEC + "[run.planner_options.flexsp]\ntime_limit = nan\n")
    assert sweep(spec, out) == 2
    err = capsys.readouterr().err
    assert "time_limit=nan is not a finite number" in err and "Traceback" not in err
    assert not any((out / name).exists() for name in RESULT_FILES)
    spec.write_text(SPEC.replace("iters = 1", "iters = 1\nplanner_options = {nsp = {beam_width = inf}}"))
    assert sweep(spec, out) == 2
    assert "beam_width=inf is not a finite number" in capsys.readouterr().err


def test_the_config_written_with_the_results_names_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "out"
    spec.write_text(SPEC)
    assert sweep(spec, out) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        Path(data["results_path"]) == out / "results.parquet" and pq.read_table(out / "results.parquet").num_rows == 2
    )
