"""``python -m benchmarks.serve``: see the package's docstring and ``benchmarks/README.md``."""

import sys

from benchmarks.serve.cli import main

sys.exit(main())
