"""python -m tutorial: see tutorial.cli."""

import sys

from tutorial.cli import main

sys.exit(main())
