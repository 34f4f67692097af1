"""`python -m podsweeper` is the same as the `podsweeper` console script."""

import sys

from podsweeper.cli import main

sys.exit(main())
