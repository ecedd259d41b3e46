"""`python -m gateway.cli`: the same as the `chinwag` command."""

import sys

from gateway.cli.main import main

sys.exit(main())
