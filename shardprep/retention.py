"""Which run folders of a data set folder readers may still need, and removing the others.

A data set folder holds the committed run (named by ``DIR/manifest.json``), the last
``keep_previous`` committed runs before it (a trainer that loaded an older manifest finishes its
epochs on them: ``manifest.load(root, run_id=...)``), and possibly folders of runs that crashed or
refused to commit. The commit step and ``python -m shardprep.clean`` remove what is not kept,
always under the folder's lease (``shardprep.lease``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from shardprep import fs, lease, manifest, naming
from shardprep.errors import ManifestError

__all__ = ["committed_runs", "current_runs", "discard_run", "remove_stale_runs", "run_folders", "stale_runs"]

log = logging.getLogger("shardprep")


def run_folders(root: str) -> list[str]:
    """Names of the run folders directly inside ``root``."""
    return [name for name in fs.listdir(root) if naming.is_run_id(name)]


def committed_runs(root: str) -> set[str]:
    """Runs that were committed at some time: named by the manifest now, or holding their manifest copy."""
    runs = {r for r in run_folders(root) if fs.exists(naming.join(root, manifest.run_copy_path(r)))}
    return runs | current_runs(root)


def current_runs(root: str) -> set[str]:
    """Runs the manifest names now; empty without a (readable) manifest."""
    try:
        return manifest.load(root).run_ids
    except ManifestError:
        return set()


def stale_runs(runs: Sequence[str], *, current: set[str], committed: set[str], keep_previous: int) -> list[str]:
    """The run folders to remove: all but ``current`` and the newest ``keep_previous`` committed ones.

    Run ids sort by their start time; runs on one folder never overlap (the lease), so that is
    also the order in which they committed.
    """
    previous = sorted(r for r in committed if r not in current and r in runs)
    keep = set(current) | set(previous[-keep_previous:] if keep_previous > 0 else ())
    return sorted(r for r in runs if r not in keep)


def remove_stale_runs(root: str, *, current: set[str], committed: set[str], keep_previous: int) -> list[str]:
    """Removes the run folders ``stale_runs`` picks; the caller holds the lease. Returns them."""
    gone = stale_runs(run_folders(root), current=current, committed=committed, keep_previous=keep_previous)
    for name in gone:
        lease.pause("clean.remove")
        _remove_folder(naming.join(root, name))
    return gone


def _remove_folder(url: str, attempts: int = 5) -> None:
    """Removes a stale run folder. A refused run may still be writing its report there (it lost the
    race for the output, ``shardprep.commit``), so a removal that meets a new file ("directory not
    empty") is retried; if it still fails, the folder stays for a later commit or ``shardprep.clean``:
    the commit that called it has succeeded and must not fail over a leftover."""
    for attempt in range(attempts):
        try:
            fs.remove(url, recursive=True)
            return
        except OSError as e:
            if attempt == attempts - 1:
                log.warning("could not remove the stale run folder %s (%s): shardprep.clean removes it later", url, e)
                return
            time.sleep(0.1 * (attempt + 1))


def discard_run(root: str, run_id: str, *, whole: bool) -> None:
    """Removes what an uncommitted run left in ``root``: its spill, or its whole folder (``whole``,
    e.g. after an interrupt). A run the manifest names is committed and is never touched. The one
    place that clears a failed or interrupted run's leftovers."""
    if run_id in current_runs(root):
        return
    url = naming.join(root, run_id if whole else f"{run_id}/spill")
    try:
        if fs.exists(url):
            fs.remove(url, recursive=True)
    except OSError:  # best effort: a later commit or ``shardprep.clean`` removes it
        pass
