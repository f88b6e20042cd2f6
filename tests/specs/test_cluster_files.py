"""Cluster files: quantities with units, the shipped presets, extends, and one-line errors."""

from __future__ import annotations

import os
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from nspsim.specs.cluster import ClusterSpec, GpuSpec
from nspsim.specs.clusters import CLUSTER_PRESETS, PRESET_DIR, describe_cluster, get_cluster
from nspsim.specs.quantity import UNIT_WORDS, parse_quantity


@pytest.mark.parametrize(
    "text, unit, value",
    [
        ("400 Gb/s", "B/s", 50e9),  # gigabits, not pint's default gilbert
        ("46 GB/s", "B/s", 46e9),
        ("80 GiB", "B", 80 * 2**30),
        ("141 GB", "B", 141e9),
        ("989 TFLOP/s", "FLOP/s", 989e12),
        ("989 TFLOPS", "FLOP/s", 989e12),
        ("34.3 us", "s", 3.43e-05),
        ("2.4 µs", "s", 2.4e-06),
        ("0.4 ms", "s", 0.4e-3),
        ("3.35 TB/s", "B/s", 3.35e12),  # exactly the literal's float, not 3.35 * 1e12
        ("5 kB", "B", 5000.0),
    ],
)
def test_quantities_read_exactly(text: str, unit: str, value: float) -> None:
    assert parse_quantity(text, unit, "x") == value


@pytest.mark.parametrize(
    "value, unit, message",
    [
        (80, "B", "with its unit"),
        ("80", "B", "number followed by a unit"),
        ("GiB", "B", "number followed by a unit"),
        ("370 GB", "B/s", "is not a bandwidth"),
        ("80 GB/s", "B", "is not a size in bytes"),
        ("80 GX", "B", "unknown unit"),
        ("5 KB", "B", "unknown unit"),  # K is no SI prefix: kB or KiB
        ("-5 GB", "B", "number followed by a unit"),
        ("nan B", "B", "number followed by a unit"),
        ("1e400 B", "B", "finite"),
        ("2**10 B", "B", "number followed by a unit"),
        ("1 B + 1 s", "B", "number followed by a unit"),
        (True, "s", "with its unit"),
    ],
)
def test_bad_quantities_are_one_line_errors(value: object, unit: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_quantity(value, unit, "gpu.hbm_bytes")
    assert str(err.value).startswith("gpu.hbm_bytes: ") and "\n" not in str(err.value)


def test_every_field_with_a_unit_names_a_known_unit() -> None:
    units = [f.metadata["unit"] for spec in (ClusterSpec, GpuSpec) for f in fields(spec) if "unit" in f.metadata]
    assert len(units) == 12 and set(units) <= set(UNIT_WORDS)


def test_presets_are_the_shipped_files() -> None:
    assert tuple(sorted(p.stem for p in PRESET_DIR.glob("*.toml"))) == CLUSTER_PRESETS
    assert {"a100", "h100", "h200", "cpu"} <= set(CLUSTER_PRESETS)
    for name in CLUSTER_PRESETS:
        from_file = get_cluster(str(PRESET_DIR / f"{name}.toml"), 16)
        assert from_file == get_cluster(name, 16), name


def test_preset_values_by_hand() -> None:
    """The figures the preset files write (sources in the files), read back as SI floats."""
    h100, h200, h800 = get_cluster("h100"), get_cluster("h200"), get_cluster("h800")
    assert (h100.gpu.peak_flops, h100.gpu.hbm_bytes, h100.nvlink_bw, h100.inter_latency_s) == (
        989e12,
        80 * 2**30,
        370e9,
        1.268e-4,
    )
    assert h100.gpu.hbm_stream_efficiency == 2.97 / 3.35 and h200.gpu.hbm_stream_efficiency == 4.15 / 4.8
    assert (h200.gpu.hbm_bytes, h200.gpu.attn_fwd_flops, h200.nic_bw) == (141_000_000_000, 450e12, 46e9)
    assert h800.nvlink_bw == 160e9 and h800.gpu.matmul_flops == h100.gpu.matmul_flops  # extends h100
    h96 = get_cluster("h100-96g").gpu
    peak = 835e12 + (989e12 - 835e12) * (500 - 400) / (700 - 400)
    assert (h96.peak_flops, h96.matmul_flops, h96.kernel_scale) == (peak, 794.5e12 * peak / 989e12, peak / 989e12)
    h20 = get_cluster("h20").gpu
    assert (h20.matmul_flops, h20.attn_bwd_flops, h20.kernel_scale) == (
        148e12 * 794.5 / 989,
        148e12 * 330 / 989,
        148 / 989,
    )


def test_a_users_file_extends_a_preset_and_a_file(tmp_path: Path) -> None:
    base = tmp_path / "lab.toml"
    base.write_text(
        'extends = "h100"\nname = "lab"\ngpus_per_node = 4\nnic_bw = "200 Gb/s"\n[gpu]\nhbm_bytes = "94 GiB"\n'
    )
    (tmp_path / "sub").mkdir()
    child = tmp_path / "sub" / "lab-fast.toml"
    child.write_text('extends = "../lab.toml"\nname = "lab-fast"\n[gpu]\nmatmul_flops = "800 TFLOP/s"\n')
    c = get_cluster(str(child), 12)
    assert (c.name, c.num_gpus, c.gpus_per_node, c.nic_bw) == ("lab-fast", 12, 4, 25e9)
    assert (c.gpu.hbm_bytes, c.gpu.matmul_flops, c.gpu.peak_flops, c.gpu.name) == (
        94 * 2**30,
        800e12,
        989e12,
        "H100-SXM5-80GB",
    )
    assert get_cluster(str(base), 2).gpus_per_node == 2  # smaller than one host: one host of 2
    described = describe_cluster(c)
    assert described["gpu"] == asdict(c.gpu) and described["num_nodes"] == 3
    assert described["units"]["nic_bw"] == "B/s" and described["units"]["gpu.hbm_bytes"] == "B"


@pytest.mark.parametrize(
    "text, message",
    [
        ('name = "x"\nnvlink_bw = 370\n', "nvlink_bw: write a bandwidth with its unit"),
        ('extends = "h100"\nnvlink_bw = "370 GB"\n', "nvlink_bw: '370 GB' is not a bandwidth"),
        ('extends = "h100"\nnvlnk_bw = "370 GB/s"\n', "unknown key 'nvlnk_bw'"),
        ('extends = "h100"\n[gpu]\nhbm = "80 GiB"\n', r"\[gpu\]: unknown key 'hbm'"),
        ('name = "x"\n', "missing 'nvlink_bw'"),
        ('extends = "h100"\n[gpu]\nmatmul_flops = "2 PFLOP/s"\n', "matmul_flops exceed.s. peak_flops"),
        ('extends = "h999"\n', "names no preset 'h999'"),
        ('extends = "h100"\ngpus_per_node = true\n', "gpus_per_node must be an integer"),
        ('extends = "h100"\ngpu = 5\n', "must be a table"),
        ('extends = "h100"\n[gpu]\nhbm_bytes = "1048576.5 B"\n', "not a whole number of bytes"),
        ('extends = "h100"\nnic_bw = "1e-300 GB/s"\n', "outside the plausible range of a bandwidth"),
        ('extends = "h100"\ninter_latency_s = "1e300 s"\n', "outside the plausible range of a time"),
        ('extends = "h100"\n[gpu]\ngemm_tile_rows = 99999999999999\n', "integer from 1 to 4096"),
        ('extends = "h100"\n[gpu]\nhbm_bytes = "4 kB"\n', "1 MiB to 1 PiB"),
        ('extends = "h100"\nname = "a\\nb"\n', "one line of printable text"),
        ('extends = "h100"\n[gpu]\nname = "g\\u001b[2Jx"\n', "one line of printable text"),
        ('extends = "nope/none.toml"\n', "'extends' names 'nope/none.toml', which does not exist"),
        ('extends = "h100"\n[gpu]\nkernel_scale = "0.5"\n', "kernel_scale must be a number"),
        ('extends = "h100"\n[gpu]\nkernel_scale = nan\n', "kernel_scale and hbm_stream_efficiency"),
        ('extends = "h100"\nname = ""\n', "name must be one line of printable text"),
        ('extends = "h100"\ngpus_per_node = 5\n', "not a whole number of 5-GPU hosts"),
        ('extends = "self.toml"\n', "loops back to itself"),
        ("name = \n", "not valid TOML"),
    ],
)
def test_a_bad_cluster_file_is_one_line_naming_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "self.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        get_cluster(str(path), 16)
    assert str(err.value).startswith(f"cluster file {path}") and "\n" not in str(err.value)


def test_missing_files_and_names_say_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        get_cluster(str(tmp_path / "none.toml"))
    (tmp_path / "d.toml").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        get_cluster(str(tmp_path / "d.toml"))
    with pytest.raises(ValueError, match="ends with .toml"):
        get_cluster(str(tmp_path) + "/")
    with pytest.raises(ValueError, match="unknown cluster preset 'tpu'.*cluster file ending in .toml"):
        get_cluster("tpu")


def test_a_variant_names_itself_or_takes_its_file_name(tmp_path: Path) -> None:
    """A file that extends a preset is not that preset (a profile measured on ``cpu`` must not match it)."""
    path = tmp_path / "fast-cpu.toml"
    path.write_text('extends = "cpu"\nnvlink_bw = "100 GB/s"\n')
    assert get_cluster(str(path), 4).name == "fast-cpu" and get_cluster("cpu", 4).name == "cpu"


def test_extends_is_relative_to_the_file_a_link_points_at(tmp_path: Path) -> None:
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "base.toml").write_text('extends = "h100"\nname = "base"\n')
    (tmp_path / "deep" / "c.toml").write_text('extends = "base.toml"\nname = "c"\n')
    (tmp_path / "link.toml").symlink_to(tmp_path / "deep" / "c.toml")
    assert get_cluster(str(tmp_path / "link.toml"), 8).name == "c"


def test_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / "ff.toml"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file"):
        get_cluster(str(fifo), 8)
