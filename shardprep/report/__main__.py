"""``python -m shardprep.report``: runs ``shardprep.report.page.main``."""
from __future__ import annotations

import sys

from shardprep.report.page import main

sys.exit(main())
