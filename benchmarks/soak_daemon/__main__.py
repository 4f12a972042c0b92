"""``python -m benchmarks.soak_daemon``."""

import sys

from benchmarks.soak_daemon.cli import main

sys.exit(main())
