import os
import sys

# Tests import shared helpers as a module.
sys.path.insert(0, os.path.dirname(__file__))

from hypothesis import settings  # noqa: E402

# Hypothesis' default 200 ms deadline per example fails on a loaded 2-core machine (CI runs two
# workers beside gloo process tests); correctness, not speed, is what the properties check.
settings.register_profile("nspsim", deadline=None)
settings.load_profile("nspsim")
