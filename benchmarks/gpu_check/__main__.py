"""Entry point of ``python -m benchmarks.gpu_check``."""
from __future__ import annotations

import sys

from benchmarks.gpu_check.cli import main

if __name__ == "__main__":
    sys.exit(main())
