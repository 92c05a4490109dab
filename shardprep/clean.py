"""``python -m shardprep.clean DIR``: removes run folders that no reader needs any more.

Keeps the committed run and the newest ``--keep-previous`` committed runs before it (default 0
here; a commit keeps ``--keep-previous`` of ``shardprep.run``, default 1), removes the rest: older
data sets and runs that crashed. Takes the folder's lease, so it never races a run.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shardprep import cli, lease, manifest, naming, retention
from shardprep.errors import UsageError

__all__ = ["clean", "main"]


def clean(root: str, *, keep_previous: int, dry_run: bool = False) -> list[str]:
    """Removes (or with ``dry_run`` only lists) the run folders no reader needs, under the lease."""
    holder = naming.new_run_id()
    with lease.hold(root, holder):
        # a manifest that cannot be read refuses here (ManifestError): its runs must not look unused
        current = manifest.load(root).run_ids if manifest.exists(root) else set()
        committed = retention.committed_runs(root)
        if dry_run:
            return retention.stale_runs(retention.run_folders(root), current=current, committed=committed,
                                        keep_previous=keep_previous)
        return retention.remove_stale_runs(root, current=current, committed=committed, keep_previous=keep_previous)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.clean", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--keep-previous", type=int, default=0, metavar="N",
                   help="committed runs to keep besides the current one (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    args = p.parse_args(argv)
    if args.keep_previous < 0:
        raise UsageError(f"--keep-previous {args.keep_previous}: expected 0 or more")
    gone = clean(args.dir, keep_previous=args.keep_previous, dry_run=args.dry_run)
    for name in gone:
        print(f"{'would remove' if args.dry_run else 'removed'} {naming.join(args.dir, name)}")
    print(f"{len(gone)} run folder(s) {'to remove' if args.dry_run else 'removed'} in {args.dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.clean", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
