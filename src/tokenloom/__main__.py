import sys

from tokenloom.cli.main import main

sys.exit(main())
