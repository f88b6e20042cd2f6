"""Every planner is documented as a card (rule, options with defaults and reasons, reference,
deviations) that names every option it takes and the estimate rung that chooses its plans; the
measured history lives in docs/planners.md, not in the card."""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import MISSING, fields

import pytest

from nspsim.plan.estimates import CHOSEN_BY
from nspsim.planners import PLANNER_CLASSES

SECTIONS = ("**Rule.**", "**Options**", "**Reference.**", "**Deviations")
MAX_CARD_LINES = 75  # the longest card, Megatron's (70), carries the source read that is its reference


@pytest.mark.parametrize("cls", PLANNER_CLASSES, ids=lambda c: c.name)
def test_the_planner_module_docstring_is_a_card(cls: type) -> None:
    doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
    positions = [doc.find(section) for section in SECTIONS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), (cls.name, positions)
    options = doc[positions[1] : positions[2]]
    for option in fields(cls):
        assert f"``{option.name}" in options, f"{cls.name}: option {option.name} is not on the card"
        default = option.default if option.default is not MISSING else None
        if isinstance(default, (bool, int, str)) and not isinstance(default, float):
            shown = f'"{default}"' if isinstance(default, str) else str(default)
            named = f"``{option.name}={shown}``" in options or f"``{option.name}=" in options
            assert named, f"{cls.name}: the card does not give {option.name}'s default {shown}"
    rungs = set(re.findall(r"chosen_by=([a-z-]+)", doc))
    assert rungs and rungs <= set(CHOSEN_BY), (cls.name, rungs)
    assert len(doc.splitlines()) <= MAX_CARD_LINES, f"{cls.name}: {len(doc.splitlines())} lines; history goes to docs"
