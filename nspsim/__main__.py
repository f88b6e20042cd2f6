"""``python -m nspsim`` runs the command line."""

import sys

from nspsim.cli import main

sys.exit(main())
