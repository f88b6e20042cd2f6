"""``nspsim validate`` (issue 22): the reference set's form, the shipped coefficients against fresh
fits on the component rows, predictions of hand-checkable rows, and the command as a user runs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from nspsim.cli.main import main
from nspsim.specs.clusters import CLUSTER_PRESETS, get_cluster
from nspsim.specs.kernels import ATTENTION_CURVES, attention_curves
from nspsim.validation.dataset import load_reference
from nspsim.validation.evaluate import evaluate_row
from nspsim.validation.fit import fit_attention_curves, fit_link_latencies, fitted_row_ids
from nspsim.validation.run import validate

USER = Path(__file__).parents[1] / "fixtures" / "reference" / "user.toml"
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture(scope="module")
def builtin():  # type: ignore[no-untyped-def]
    return validate()


def test_the_builtin_set_is_sourced_and_large_enough(builtin) -> None:  # type: ignore[no-untyped-def]
    rows = load_reference()
    assert len({r.id for r in rows}) == len(rows)
    for r in rows:
        s = r.source
        assert s.where and (s.paper or s.url or (s.repo and s.path and COMMIT.match(s.commit or ""))), r.id
    summary = builtin.summary()
    assert summary["end-to-end"].n >= 20  # expressed rows, each with a prediction
    assert summary["kernel"].n + summary["collective"].n >= 40
    assert {r.row.kind for r in builtin.results if r.prediction.reason} == {"end-to-end", "kernel", "collective"}
    assert all(r.prediction.reason or r.prediction.simulated for r in builtin.results)  # none silently dropped


def test_shipped_coefficients_are_the_fits_of_the_component_rows() -> None:
    rows = load_reference()
    assert fit_attention_curves(rows) == dict(ATTENTION_CURVES)
    fit = fit_link_latencies(rows)
    for name in CLUSTER_PRESETS:  # every GPU preset file writes the fits (cpu: the gloo runtime's own)
        c = get_cluster(name, 16)
        if name != "cpu":
            assert (fit.intra_s, fit.inter_s, fit.alltoall_peer_s) == (
                c.intra_latency_s,
                c.inter_latency_s,
                c.alltoall_peer_latency_s,
            ), name
    fitted = fitted_row_ids(rows)
    assert not any(r.kind == "end-to-end" for r in rows if r.id in fitted)  # end-to-end rows never fit


def test_a_kernel_row_is_the_curve_by_hand() -> None:
    rows = {r.id: r for r in load_reference([USER])}
    pred = evaluate_row(rows["my-attention"])
    curve = attention_curves("h100", "fa2", 128)
    length = np.array([8192.0])
    fwd_flops = 2 * 8192**2 * 16 * 128  # causal: 4 b s^2 h d / 2, per sample
    seconds = 2 * (fwd_flops / curve.fwd(length)[0] + 2.5 * fwd_flops / curve.bwd(length)[0])
    assert pred.simulated == pytest.approx(3.5 * 2 * fwd_flops / seconds / 1e12)


def test_a_collective_row_by_hand() -> None:
    rows = {r.id: r for r in load_reference([USER])}
    pred = evaluate_row(rows["my-allgather"])
    moved = 2**30 * 7 / 8  # a ring all-gather moves (n-1)/n of the 1 GiB output through each GPU
    assert pred.simulated == pytest.approx((get_cluster("h100").intra_latency_s + moved / 370e9) * 1e6)


def test_an_end_to_end_row_is_one_simulated_step() -> None:
    rows = {r.id: r for r in load_reference([USER])}
    pred = evaluate_row(rows["my-training-run"])
    assert pred.simulated == pytest.approx(8 * 2 * 8192 / pred.detail["step_s"] / 8)
    assert "tensor parallelism (tp = 2)" in (evaluate_row(rows["my-tp-run"]).reason or "")


def test_validate_a_users_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--dataset", str(USER), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in data["rows"]] == ["my-attention", "my-allgather", "my-training-run", "my-tp-run"]
    row = data["rows"][0]
    assert {"id", "kind", "source", "published", "simulated", "error"} <= set(row)
    assert row["error"] == pytest.approx(row["simulated"] / 300.0 - 1)
    assert {r["role"] for r in data["rows"]} == {"check"}  # a user's rows fit nothing
    for kind in ("end-to-end", "kernel", "collective"):
        assert {"n", "mape", "max_abs_error"} <= set(data["summary"][kind])
    assert data["summary"]["end-to-end"]["n"] == 1 and data["summary"]["end-to-end"]["not_expressible"] == 1
    assert main(["validate", "--dataset", str(USER), "--max-mape", "0.1%"]) == 1
    assert "MAPE above 0.001 (0.10%)" in capsys.readouterr().err
    out = tmp_path / "report"
    assert main(["validate", "--dataset", str(USER), "--kind", "kernel", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "my-attention" in text and "my-allgather" not in text and "## summary" in text
    assert (out / "validation.html").read_text().count("plotly") > 0
    assert json.loads((out / "validation.json").read_text())["rows"][0]["id"] == "my-attention"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("format = 1", "not a reference set"),
        ('format = "nspsim-reference"\nversion = 1', "at least one"),
        ("[[row", "not valid TOML"),
        ('format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "a"\nkind = "kernel"\npublished = 1.0\n'
         'unit = "TFLOP/s"\nsource = {url = "x", where = "y"}\nspeed = 3', r"row 1 \(a\): unknown key\(s\) speed"),
        ('format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "a"\nkind = "kernel"\npublished = -1.0\n'
         'unit = "TFLOP/s"\nsource = {url = "x", where = "y"}', "published must be a positive number"),
        ('format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "a"\nkind = "kernel"\npublished = 1.0\n'
         'unit = "TFLOP/s"\nsource = {repo = "o/r", path = "p", commit = "abc", where = "y"}', "40 lowercase hex"),
        ('format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "a"\nkind = "kernel"\npublished = 1.0\n'
         'unit = "tokens/s/gpu"\nsource = {url = "x", where = "y"}', "unit 'tokens/s/gpu' is not one of"),
        ('format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "a"\nkind = "kernel"\npublished = 1.0\n'
         'unit = "TFLOP/s"\nsource = {url = "x"}', "needs 'where'"),
    ],
)  # fmt: skip
def test_malformed_datasets_are_one_line_errors(
    body: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    assert main(["validate", "--dataset", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and len(err.strip().splitlines()) == 1 and re.search(message, err), err


def test_bad_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--dataset", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err
    assert main(["validate", "--max-mape", "-3"]) == 2
    assert "--max-mape: must be a positive finite number" in capsys.readouterr().err
    assert main(["validate", "--max-mape", "10"]) == 2
    assert "a fraction is at most 1" in capsys.readouterr().err
    assert main(["validate", "--dataset", str(USER), "-o", ""]) == 2
    assert "the output folder is empty" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["validate", "--dataset", str(USER), "-o", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err
    twice = tmp_path / "twice.toml"
    twice.write_text(USER.read_text() + USER.read_text().split("version = 1", 1)[1].replace("[[row]]", "[[row]]", 1))
    assert main(["validate", "--dataset", str(twice)]) == 2
    assert "already used" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('gpu = "h100"\nop = "allgather"\ngpus = 0\ngpus_per_node = 8\nbytes = 1024', "gpus must be an integer"),
        ('gpu = "h100"\nop = "allgather"\ngpus = true\ngpus_per_node = 8\nbytes = 1024', "gpus must be an integer"),
        ('gpu = "h100"\nop = "allgather"\ngpus = 8\ngpus_per_node = 8\nbytes = -5', "bytes must be a positive"),
        ('gpu = "h100"\nop = "allgather"\ngpus = 8\ngpus_per_node = 8\nbytes = nan', "bytes must be a positive"),
        ('gpu = "h100"\nop = "allgather"\ngpus = 8\ngpus_per_node = 8\nbytes = 9\nnic_gbps_per_gpu = inf',
         "nic_gbps_per_gpu must be"),
    ],
)  # fmt: skip
def test_malformed_row_configs_are_input_errors(
    config: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.toml"
    path.write_text(
        'format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "c"\nkind = "collective"\npublished = 1.0\n'
        f'unit = "us"\nsource = {{url = "x", where = "y"}}\n[row.config]\n{config}\n'
    )
    assert main(["validate", "--dataset", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nspsim: error: ") and "row c:" in err and message in err and len(err.splitlines()) == 1


def test_a_fifo_is_refused_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    assert main(["validate", "--dataset", str(fifo)]) == 2
    assert "is not a regular file" in capsys.readouterr().err


def test_max_mape_fails_a_kind_without_expressed_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--dataset", str(USER), "--kind", "end-to-end", "--max-mape", "10%"]) in (0, 1)
    capsys.readouterr()
    only_tp = tmp_path / "tp.toml"
    text = USER.read_text()
    only_tp.write_text('format = "nspsim-reference"\nversion = 1\n' + "[[row]]" + text.split("[[row]]")[-1])
    out = tmp_path / "never"
    assert main(["validate", "--dataset", str(only_tp), "--max-mape", "10%", "-o", str(out)]) == 1
    assert "end-to-end (no expressed row of 1)" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[[row")
    assert main(["validate", "--dataset", str(bad), "-o", str(tmp_path / "not-made")]) == 2
    assert not (tmp_path / "not-made").exists()  # a failing run leaves no folder behind


def _one_row(tmp_path: Path, kind: str, unit: str, config: str, published: float = 1.0) -> Path:
    path = tmp_path / f"{kind}-{unit.replace('/', '_')}.toml"
    path.write_text(
        f'format = "nspsim-reference"\nversion = 1\n[[row]]\nid = "r"\nkind = "{kind}"\npublished = {published}\n'
        f'unit = "{unit}"\nsource = {{url = "x", where = "y"}}\n[row.config]\n{config}\n'
    )
    return path


ALLGATHER = 'gpu = "h100"\nop = "allgather"\ngpus = 8\ngpus_per_node = 8\nbytes = 1073741824'
ATTENTION = (
    'gpu = "h100"\nop = "attention"\nkernel = "fa2"\npass = "fwd"\nbatch = 1\nseqlen = 8192\nheads = 16\n'
    "head_dim = 128\ncausal = true"
)


def test_every_unit_is_the_same_prediction(tmp_path: Path) -> None:
    """One all-gather and one attention kernel in each unit their kinds take, by hand from the time."""
    us = evaluate_row(load_reference([_one_row(tmp_path, "collective", "us", ALLGATHER)])[0]).simulated
    assert us is not None
    seconds = us * 1e-6
    for unit, expected in (
        ("GB/s-algbw", 2**30 / seconds / 1e9),
        ("GB/s-busbw", 2**30 / seconds / 1e9 * 7 / 8),  # nccl-tests: all-gather busbw = algbw (n-1)/n
        ("GB/s-per-device", 2**30 * 7 / 8 / seconds / 1e9),
    ):
        row = load_reference([_one_row(tmp_path, "collective", unit, ALLGATHER)])[0]
        assert evaluate_row(row).simulated == pytest.approx(expected)
    tflops = evaluate_row(load_reference([_one_row(tmp_path, "kernel", "TFLOP/s", ATTENTION)])[0]).simulated
    assert tflops is not None
    kernel_s = 2 * 8192**2 * 16 * 128 / (tflops * 1e12)
    ms = evaluate_row(load_reference([_one_row(tmp_path, "kernel", "ms", ATTENTION)])[0]).simulated
    per_s = evaluate_row(load_reference([_one_row(tmp_path, "kernel", "iter/s", ATTENTION)])[0]).simulated
    assert ms == pytest.approx(kernel_s * 1e3) and per_s == pytest.approx(1 / kernel_s)
    rows = {r.id: r for r in load_reference([USER])}
    run = evaluate_row(rows["my-training-run"])
    step = load_reference([USER])[2].config
    as_step = _one_row(
        tmp_path,
        "end-to-end",
        "s/step",
        "\n".join(
            f"{k} = {v!r}".replace("'", '"').replace("True", "true").replace("False", "false")
            for k, v in step.items()
            if k != "model"
        )
        + "\n[row.config.model]\n"
        + "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in step["model"].items()),
    )
    assert evaluate_row(load_reference([as_step])[0]).simulated == pytest.approx(run.detail["step_s"])


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("kernel", ATTENTION + "\ncasual = true", "unknown kernel config key(s) casual"),
        ("kernel", ATTENTION.replace('"fwd"', '"fwd-bwd"'), "pass must be one of fwd, bwd, fwd+bwd"),
        ("kernel", ATTENTION + "\nkv_heads = 5", "num_heads (16) must be a multiple"),
        ("collective", ALLGATHER + "\nspeed = 1", "unknown collective config key(s) speed"),
    ],
)
def test_typos_in_a_row_are_errors_not_reasons(
    kind: str, config: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = "TFLOP/s" if kind == "kernel" else "us"
    assert main(["validate", "--dataset", str(_one_row(tmp_path, kind, unit, config))]) == 2
    err = capsys.readouterr().err
    assert "row r:" in err and message in err and len(err.splitlines()) == 1, err


def test_a_replicated_data_parallel_row_is_not_expressible(tmp_path: Path) -> None:
    text = USER.read_text()
    at = text.index("[row.config]", text.index('id = "my-training-run"'))
    path = tmp_path / "ddp.toml"
    path.write_text(text[:at] + "[row.config]\nfsdp = false" + text[at + len("[row.config]") :])
    row = {r.id: r for r in load_reference([path])}["my-training-run"]
    assert "fsdp = false" in (evaluate_row(row).reason or "")


def test_max_mape_fails_when_no_row_is_selected(capsys: pytest.CaptureFixture[str]) -> None:
    kernels = Path(__file__).parents[2] / "nspsim" / "validation" / "reference" / "kernels.toml"
    assert main(["validate", "--dataset", str(kernels), "--kind", "collective", "--max-mape", "10%"]) == 1
    assert "no row of the selected kind(s)" in capsys.readouterr().err


def test_extreme_numbers_and_odd_files_are_the_users_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A subnormal published figure or byte count is refused where it enters (it turned an error into
    infinity and blamed nspsim); a non-table model is a config error; a byte-order mark is not content."""
    tiny = _one_row(tmp_path, "collective", "GB/s-busbw", ALLGATHER, published=5e-324)
    assert main(["validate", "--dataset", str(tiny)]) == 2
    assert "published must be a positive number from 1e-30 to 1e+30, got 5e-324" in capsys.readouterr().err
    huge = _one_row(tmp_path, "collective", "us", ALLGATHER.replace("1073741824", "1.7e308"))
    assert main(["validate", "--dataset", str(huge)]) == 2
    assert "bytes must be a positive number from 1e-30 to 1e+30" in capsys.readouterr().err
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + _one_row(tmp_path, "collective", "GB/s-busbw", ALLGATHER).read_bytes())
    assert main(["validate", "--dataset", str(bom)]) == 0
    capsys.readouterr()
    assert main(["validate", "--dataset", ""]) == 2
    assert "empty path" in capsys.readouterr().err
