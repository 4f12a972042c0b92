"""``python -m toolprep.runtime.cli ...``: what the tests, the daemon's autostart, the
workers and the docs run, the same as the ``toolprep`` console script."""

import sys

from toolprep.runtime.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
