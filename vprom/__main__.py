"""`python -m vprom ...`, and so `torchrun -m vprom train|extract ...`: the `vprom` command."""

import sys

from vprom.app.cli import main

sys.exit(main())
