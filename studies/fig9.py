"""NSP paper Figure 9 as a study: ``python studies/fig9.py [--quick] [-o DIR] [--jobs N]``
(the code is :mod:`studies.paper_figures.fig9`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for ``studies.``

from studies.paper_figures.fig9 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
