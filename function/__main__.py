"""`python -m function` is the same as the `podsweeper` console script."""

import sys

from function.cli import main

sys.exit(main())
