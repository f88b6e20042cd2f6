"""The Python API's page (docs/api.md) runs as a doctest, and the API is the command line's: a plan
from ``plan_batch`` simulates to ``nspsim compare``'s step."""

from __future__ import annotations

import doctest
from pathlib import Path

import nspsim

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_api_page_runs() -> None:
    result = doctest.testfile(
        str(DOCS), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 10 and result.failed == 0


def test_every_exported_name_resolves_and_an_unknown_one_is_an_attribute_error() -> None:
    assert sorted(set(nspsim.__all__) - {"__version__"}) == sorted(nspsim.api.__all__)  # the two lists agree
    for name in nspsim.__all__:
        assert getattr(nspsim, name) is not None, name
    try:
        nspsim.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("nspsim.no_such_name resolved")


def test_the_readme_python_block_runs() -> None:
    """README.md's "Python API" block, as written."""
    import re

    readme = (DOCS.parents[1] / "README.md").read_text()
    block = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    scope: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), scope)  # noqa: S102
    assert scope["step"].step_time_s > 0 and len(scope["frame"]) == 4  # type: ignore[attr-defined,arg-type]


def test_bad_api_input_is_one_value_error_and_frames_keep_their_columns() -> None:
    import math

    import pytest

    setup = {"model": "tiny", "cluster": "cpu", "gpus": 4, "tokens_per_batch": 16384, "max_context": 4096}
    for bad, message in (
        ({"foo": 1}, "'foo' is not a workload field"),
        ({"gpus": "4"}, "gpus must be an integer, got '4'"),
        ({"gpus": True}, "gpus must be an integer, got True"),
        ({"gpus": 0}, "gpus must be at least 1"),
    ):
        with pytest.raises(ValueError, match=message):
            nspsim.workload_of(**{**setup, **bad})
    wl = nspsim.workload_of(**setup)
    plan = nspsim.plan_batch(wl, "static")
    with pytest.raises(ValueError, match="seed must be an integer"):
        nspsim.simulate_plan(wl, plan, seed=-1)
    with pytest.raises(ValueError, match="unknown simulation mode 'STREAM'"):
        nspsim.simulate_plan(wl, plan, mode="STREAM")
    assert [s.planner for s in nspsim.compare_planners("static", iters=1, **setup).summaries] == ["static"]
    with pytest.raises(ValueError, match="no planners given"):
        nspsim.compare_planners((), iters=1, **setup)
    oom = nspsim.compare_planners(  # every planner out of memory: the same columns, NaN, float64
        ("static-1",),
        iters=1,
        model="qwen3-30b-a3b",
        cluster="h100",
        gpus=8,
        tokens_per_batch=262144,
        max_context=131072,
        trace="longtail-paper",
        token_budget=10**7,
    )
    frame = nspsim.records_frame(oom)
    assert list(frame.columns) == list(nspsim.api.FRAME_COLUMNS) and bool(frame["oom"].all())
    assert frame["step_time_s"].dtype == "float64" and math.isnan(frame["bd_attn_fwd"].iloc[0])
    assert "plan_batch" in dir(nspsim)
