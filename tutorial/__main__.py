"""python -m deepgemm: see deepgemm.cli."""

import sys

from deepgemm.cli import main

sys.exit(main())
