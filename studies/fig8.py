"""NSP paper Figure 8 as a study: ``python studies/fig8.py [--quick] [-o DIR] [--jobs N]``
(the code is :mod:`studies.paper_figures.fig8`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for ``studies.``

from studies.paper_figures.fig8 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
