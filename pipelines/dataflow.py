"""``python -m pipelines.dataflow ARGS`` is ``python -m shardprep.run ARGS --runner dataflow``::

    python -m pipelines.dataflow --input 'gs://B/raw/*.csv' --output gs://B/ds --workers 8 \\
        --project P --region us-central1 --temp_location gs://B/tmp [--setup_file ./setup.py]

Add ``--dry_run=True`` to build the job graph without submitting it. This is an entry module
(the launcher a Flex Template runs): it reuses the command of ``shardprep.run`` and nothing
imports it; the flag checks themselves live in ``pipelines.dataflow_flags``.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from pipelines.dataflow_flags import DEFAULT_SETUP_FILE, check_locations, dataflow_args
from shardprep import run

__all__ = ["DEFAULT_SETUP_FILE", "check_locations", "dataflow_args", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--runner" or a.startswith("--runner=") for a in argv):
        print("pipelines.dataflow: error: --runner is always dataflow here; use python -m shardprep.run "
              "for other runners", file=sys.stderr)
        return 2
    return run.main([*argv, "--runner", "dataflow"])


if __name__ == "__main__":
    sys.exit(main())
