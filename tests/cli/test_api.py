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
