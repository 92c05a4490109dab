"""``python -m shardprep.clean DIR``: removes run folders that no reader needs any more.

Keeps the committed run and the newest ``--keep-previous`` committed runs before it (default 0
here; a commit keeps ``--keep-previous`` of ``shardprep.run``, default 1), removes the rest: older
data sets and runs that crashed. Takes the folder's lease, so it never races a run.
"""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

from shardprep import cli, fs, lease, manifest, naming, retention, versions
from shardprep.errors import UsageError

__all__ = ["clean", "main"]


def clean(root: str, *, keep_previous: int, dry_run: bool = False, keep_versions: int | None = None) -> list[str]:
    """Removes (or with ``dry_run`` only lists) the run folders no reader needs, under the lease.

    ``keep_versions`` K: the files of the newest K manifest versions stay (the current one among them)
    and every older version's manifest copy goes, also where its files are shared with a kept version
    (an appended data set's earlier generations): ``manifest.load(version=...)`` then refuses it."""
    holder = naming.new_run_id()
    with lease.hold(root, holder):
        # a manifest that cannot be read refuses here (ManifestError): its runs must not look unused
        current_manifest = manifest.load(root) if manifest.exists(root) else None
        current = current_manifest.run_ids if current_manifest else set()
        committed = retention.committed_runs(root)
        if keep_versions is not None:
            keep_previous = keep_versions - 1
            old_copies = _older_versions(root, current_manifest, keep_versions)
        else:
            old_copies = []
        references = functools.partial(retention.references, root)
        if dry_run:
            return retention.stale_runs(retention.run_folders(root), current=current, committed=committed,
                                        keep_previous=keep_previous, references=references,
                                        order=functools.partial(retention.commit_order, root)) + old_copies
        gone = retention.remove_stale_runs(root, current=current, committed=committed, keep_previous=keep_previous)
        for copy in old_copies:
            if copy.split("/", 1)[0] not in gone:
                fs.remove(naming.join(root, copy))
        return gone + old_copies


def _older_versions(root: str, current: manifest.Manifest | None, keep: int) -> list[str]:
    """The manifest copies (paths in ``root``) of the versions before the newest ``keep``."""
    if current is None:
        return []
    found = [(m.data_version, run) for run, m in versions.versions(root) if run != current.head_run]
    older = sorted(found)[: max(0, len(found) - (keep - 1))]
    return [manifest.run_copy_path(run) for _, run in older]


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.clean", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--keep-previous", type=int, default=0, metavar="N",
                   help="committed runs to keep besides the current one (default: %(default)s)")
    p.add_argument("--keep-versions", type=int, metavar="K",
                   help="manifest versions to keep readable, the current one included (an appended data set's "
                   "earlier versions share its files: their manifests go); instead of --keep-previous")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    args = p.parse_args(argv)
    if args.keep_previous < 0:
        raise UsageError(f"--keep-previous {args.keep_previous}: expected 0 or more")
    if args.keep_versions is not None and args.keep_versions < 1:
        raise UsageError(f"--keep-versions {args.keep_versions}: expected 1 or more (the current version)")
    gone = clean(args.dir, keep_previous=args.keep_previous, dry_run=args.dry_run, keep_versions=args.keep_versions)
    for name in gone:
        print(f"{'would remove' if args.dry_run else 'removed'} {naming.join(args.dir, name)}")
    print(f"{len(gone)} run folder(s) or manifest version(s) {'to remove' if args.dry_run else 'removed'} in {args.dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.clean", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
