"""Settings every test shares. Tests are grouped by concept (``tests/planners/``, ``tests/simulator/``,
...); the helpers several folders share live in ``tests/support/``, which pytest puts on the import
path (``pythonpath`` in pyproject.toml), so no test edits ``sys.path``."""

from hypothesis import settings

# Hypothesis' default 200 ms deadline per example fails on a loaded 2-core machine (CI runs two
# workers beside gloo process tests); correctness, not speed, is what the properties check.
settings.register_profile("nspsim", deadline=None)
settings.load_profile("nspsim")
