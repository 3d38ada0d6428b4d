"""python -m lab: see lab.cli."""

import sys

from lab.cli import main

sys.exit(main())
