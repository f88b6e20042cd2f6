"""``python -m nspsim`` runs the command line."""

import sys

from nspsim.cli.main import main

sys.exit(main())
