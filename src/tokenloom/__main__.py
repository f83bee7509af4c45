"""``python -m tokenloom``: the ``tokenloom`` command line."""

import sys

from tokenloom.cli.main import main

sys.exit(main())
