"""``python -m lyra_simpy`` runs the command line."""

import sys

from lyra_simpy.cli import main

sys.exit(main())
