"""CLI: results as text and JSON, and one-line errors with exit status 2 for every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import make_batch, toy_model
from nspsim.cli.main import main
from nspsim.plan import make_plan
from nspsim.sp_tree import Node
from nspsim.specs.clusters import get_cluster

SHARED_WIKI = Path(__file__).resolve().parents[3] / "shared" / "traces" / "wikipedia.txt"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_trace_stats_json_of_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.txt"
    path.write_text("\n".join(str(x) for x in [100, 200, 300, 10_000, 200_000]) + "\n")
    code, out, _ = run(["trace", "stats", str(path), "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["count"] == 5 and data["median"] == 300 and data["max"] == 200_000
    assert data["share_lt_8k"] == pytest.approx(0.6) and data["share_gt_128k"] == pytest.approx(0.2)
    for key in ("min", "p90", "p99", "p999", "mean", "token_share_by_bucket"):
        assert key in data


def test_trace_stats_text_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["trace", "stats", "wikipedia", "--samples", "20000"], capsys)
    assert code == 0 and "median" in out
    code, out, _ = run(["trace", "list"], capsys)
    assert code == 0 and "wikipedia" in out and "longtail-paper" in out


@pytest.mark.skipif(not SHARED_WIKI.exists(), reason="shared wikipedia trace not present")
def test_builtin_wikipedia_matches_the_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["trace", "stats", "wikipedia", "--json"], capsys)
    _, real_out, _ = run(["trace", "stats", str(SHARED_WIKI), "--json"], capsys)
    built, real = json.loads(out), json.loads(real_out)
    for key in ("median", "p90", "p99", "p999", "share_lt_8k", "share_gt_128k"):
        assert built[key] == pytest.approx(real[key], rel=0.05), key


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["info", "--json", "--max-context", "384k"], capsys)
    data = json.loads(out)
    assert code == 0 and data["spmax"] == 32 and data["config"]["max_context"] == 384 * 1024
    assert data["token_budget"] > 0


DEEP = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on it


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "malformed": "100\nabc\n",
        "negative": "100\n-4\n",
        "empty": "",
        "garbage": "x" * 100_000 + "\n",
        "deep.json": DEEP,
        "deep.jsonl": DEEP + "\n",
    }
    out = {}
    for name, text in files.items():
        key, _, suffix = name.partition(".")
        out[key if not suffix else f"deep_{suffix}"] = path = tmp_path / (name if suffix else f"{name}.txt")
        path.write_text(text)
    return out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["trace", "stats", "{malformed}"], "line 2"),
        (["trace", "stats", "{negative}"], "line 2"),
        (["trace", "stats", "{empty}"], "empty"),
        (["trace", "stats", "{garbage}"], "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (100,000 characters) is not"),
        (["trace", "stats", "{deep_json}"], "nested too deeply"),
        (["trace", "stats", "{deep_jsonl}"], "line 1: not an object with a 'length' field (JSON nested too deeply)"),
        (["info", "--profile", "{deep_json}"], "not a cost profile (JSON nested too deeply)"),
        (["inspect", "{deep_json}"], "deep.json: not a plan (JSON nested too deeply)"),
        (["simulate", "{deep_json}"], "deep.json: not a plan (JSON nested too deeply)"),
        (["inspect", "{infinite}"], "invalid JSON (Infinity is not a finite number; JSON has no NaN or infinity)"),
        (["inspect", "{huge}"], "above the batch's max context"),
        (["inspect", "{gpus_inf}"], "invalid JSON (Infinity is not a finite number"),
        (["inspect", "{batch_index}"], "batch index must be an integer >= 0, got -1"),
        (["inspect", "{plan}", "--gpus", "16"], "--gpus only applies with --cluster"),
        (["inspect", "{plan}", "--cluster", ""], "unknown cluster preset ''"),
        (["trace", "stats", "no/such/file.txt"], "not found"),
        (["trace", "stats", "wikipedia", "--samples", "100000000000"], "at most 10,000,000 samples"),
        (["trace", "stats", "wikipedia", "--samples", "10000001"], "at most 10,000,000 samples"),
        (["compare", "--iters", "100001"], "iters must be at most 100,000 batches per comparison"),
        (["info", "--model", "gpt5"], "unknown model preset 'gpt5'"),
        (["info", "--cluster", "tpu"], "unknown cluster preset 'tpu'"),
        (["info", "--gpus", "12"], "not a whole number of 8-GPU hosts"),
        (["info", "--max-context", "12q"], "invalid token count"),
        (["info", "--tokens-per-batch", "0"], "must be positive"),
        (["plan", "--tokens-per-batch", "10G"], "over the limit of 1G"),
        (["info", "--model", "qwen3-235b-a22b", "--gpus", "8"], "impossible memory budget"),
        (["info", "--spmax", "64"], "spmax 64 is not admissible"),
        (["info", "--trace", "nope"], "not found"),
        (["frobnicate"], "invalid choice"),
        (["inspect", "{malformed}"], "malformed.txt line 2: invalid JSON (Extra data)"),
        (["inspect", "{plan}", "--cluster", "a100", "--gpus", "8"], "plan was made for cluster"),
        (["inspect", "{forged}"], "content hash"),
        (["inspect", "{future}"], "schema"),
        (["inspect", "{truncated}"], "missing"),
        (["simulate", "{forged}"], "content hash"),
    ],
)
def test_bad_input_gives_one_line_error(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {k: str(v) for k, v in _bad_files(tmp_path).items()}
    plan = make_plan(
        planner="manual",
        cluster=get_cluster("h100", 8),
        model=toy_model(),
        batch=make_batch([5000]),
        spmax=4,
        token_budget=10_000,
        nodes=[Node(1, 0)],
    )
    files["plan"] = str(tmp_path / "plan.json")
    plan.save(files["plan"])
    body = json.loads(Path(files["plan"]).read_text())
    edits = {
        "forged": lambda b: b.update(token_budget=20_000),
        "future": lambda b: b.update(schema_version=99),
        "truncated": lambda b: b.pop("samples"),
        "infinite": lambda b: b["samples"]["length"].__setitem__(0, float("inf")),  # 1e400 / Infinity
        "huge": lambda b: b["samples"]["length"].__setitem__(0, 2**70),
        "gpus_inf": lambda b: b["cluster"].update(num_gpus=float("inf")),
        "batch_index": lambda b: b["batch"].update(index=-1),
    }
    for name, edit in edits.items():
        copy = json.loads(json.dumps(body))
        edit(copy)
        files[name] = str(tmp_path / f"{name}.json")
        Path(files[name]).write_text(json.dumps(copy))
    code, out, err = run([a.format(**files) for a in argv], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("nspsim: error: ")
    assert message in err
    assert out == ""


def test_inspect_valid_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = make_plan(
        planner="manual",
        cluster=get_cluster("h100", 8),
        model=toy_model(),
        batch=make_batch([5000, 20]),
        spmax=4,
        token_budget=10_000,
        nodes=[Node(4, 1), Node(1, 0)],
    )
    path = tmp_path / "plan.json"
    plan.save(path)
    code, out, _ = run(["inspect", str(path), "--cluster", "h100", "--gpus", "8", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["plan_hash"] == plan.content_hash and data["samples_per_degree"] == {"4": 1, "1": 1}


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("12\nxyz\n")
    proc = subprocess.run(
        [sys.executable, "-m", "nspsim", "trace", "stats", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_a_closed_output_pipe_ends_quietly() -> None:
    """`nspsim ... | head`: the reader leaves; no traceback and no error line (exit 141, like SIGPIPE)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "nspsim.cli.main", "trace", "stats", "wikipedia", "--samples", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the child writes anything
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and err == "", err
