"""``python -m skfed benchmark ...``, ``python -m skfed warmup``."""

import sys

from ._cli import main

sys.exit(main())
