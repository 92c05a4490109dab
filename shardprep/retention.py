"""Which run folders of a data set folder readers may still need, and removing the others.

A data set folder holds the committed run (named by ``DIR/manifest.json``), the last
``keep_previous`` committed runs before it (a trainer that loaded an older manifest finishes its
epochs on them: ``manifest.load(root, run_id=...)``), and possibly folders of runs that crashed or
refused to commit. The commit step and ``python -m shardprep.clean`` remove what is not kept,
always under the folder's lease (``shardprep.lease``).
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from shardprep import faults, fs, manifest, naming, versioned
from shardprep.errors import ManifestError

__all__ = ["COMMIT", "DISCARD", "claim", "committed_runs", "current_runs", "discard_run", "references", "remove_stale_runs",
           "run_folders", "stale_runs", "withdraw"]

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


def stale_runs(runs: Sequence[str], *, current: set[str], committed: set[str], keep_previous: int,
               references: Callable[[str], set[str]] = lambda run: {run},
               order: Callable[[str], Any] = lambda run: run) -> list[str]:
    """The run folders to remove: all but ``current`` and the newest ``keep_previous`` committed ones,
    with every run folder the manifest each of those committed names (``references``: an appended
    manifest's earlier generations).

    Run ids sort by their start time; runs on one folder never overlap (the lease), and a run that
    read the data set before another committed is refused at its commit (``shardprep.commit``), so
    that is also the order in which they committed.
    """
    previous = sorted((r for r in committed if r not in current and r in runs), key=order)
    keep = set(current)
    for run in previous[-keep_previous:] if keep_previous > 0 else ():
        keep |= {run} | references(run)
    return sorted(r for r in runs if r not in keep)


def commit_order(root: str, run: str) -> tuple[str, int]:
    """A committed run's place in commit order: its id's start second, then the version its manifest
    copy committed (two runs started in one second sort by version, not by their ids' random suffix)."""
    try:
        version = manifest.load(root, run_id=run).data_version or 0
    except ManifestError:
        version = 0
    return run[:len("run-YYYYmmddTHHMMSSZ")], version


def references(root: str, run: str) -> set[str]:
    """The run folders the manifest that ``run`` committed names (its own alone if its copy cannot be read)."""
    try:
        return manifest.load(root, run_id=run).run_ids | {run}
    except ManifestError:
        return {run}


def remove_stale_runs(root: str, *, current: set[str], committed: set[str], keep_previous: int) -> list[str]:
    """Removes the run folders ``stale_runs`` picks; the caller holds the lease. Returns them."""
    gone = stale_runs(run_folders(root), current=current, committed=committed, keep_previous=keep_previous,
                      references=lambda run: references(root, run), order=lambda run: commit_order(root, run))
    for name in gone:
        faults.pause("clean.remove")
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


COMMIT, DISCARD = "commit", "discard"
COMMIT_WAIT_S = 60.0  # how long an interrupted launcher waits for a commit already under way


def claim(root: str, run_id: str, outcome: str) -> str:
    """Claims the fate of run ``run_id`` (``COMMIT`` or ``DISCARD``); returns the outcome that holds.

    The commit step claims before its first write to ``root``, the launcher before it removes an
    uncommitted run's folder: ``DIR/<run>/_outcome`` is created only if absent (``versioned.create_exclusive``),
    so a commit running on a worker, or in a thread of the launcher, never writes a manifest over
    shards the launcher's clean-up removes, whatever the timing of an interrupt.
    """
    url = naming.join(root, naming.outcome_path(run_id))
    for _ in range(3):
        if versioned.create_exclusive(url, outcome.encode()):
            return outcome
        try:
            return fs.read_bytes(url).decode()
        except FileNotFoundError:  # a failed commit withdrew its claim meanwhile (``withdraw``)
            continue
    return fs.read_bytes(url).decode()


def withdraw(root: str, run_id: str) -> None:
    """Withdraws a commit's claim after it failed before the manifest, so the clean-up may proceed."""
    try:
        fs.remove(naming.join(root, naming.outcome_path(run_id)))
    except OSError:
        pass


def discard_run(root: str, run_id: str, *, whole: bool, wait_s: float = COMMIT_WAIT_S) -> bool:
    """Removes what an uncommitted run left in ``root``: its spill, or its whole folder (``whole``,
    e.g. after an interrupt). The one place that clears a failed or interrupted run's leftovers.

    A run the manifest names is committed and is never touched: returns True for it. Before the
    whole folder goes, the run's fate is claimed (``claim``); if its commit claimed it first, this
    waits up to ``wait_s`` for that commit to end: committed (True), or failed, or the folder is
    left for ``shardprep.clean`` (a commit that does not end, e.g. its worker was killed).
    """
    if run_id in current_runs(root):
        return True
    with contextlib.suppress(OSError):  # no commit needs it, and on a full disk the claim needs its room
        fs.remove(naming.join(root, naming.spill_folder(run_id)), recursive=True)
    if not whole:
        return False
    deadline, waiting = time.monotonic() + wait_s, False
    while True:
        try:
            if claim(root, run_id, DISCARD) == DISCARD:
                break
        except OSError:  # best effort: a later commit or ``shardprep.clean`` removes the folder
            return False
        if run_id in current_runs(root):  # the commit that claimed it has ended, committed
            return True
        if time.monotonic() > deadline:
            log.warning("run %s was interrupted while committing and its commit did not end within %.0f s: its "
                        "folder stays; check %s, and run python -m shardprep.clean %s if it names another run",
                        run_id, wait_s, naming.join(root, naming.MANIFEST), root)
            return False
        if not waiting:  # say why the command waits
            log.info("run %s is committing: waiting up to %.0f s for its commit to end", run_id, wait_s)
            waiting = True
        time.sleep(0.2)
    try:
        _remove_claimed(root, run_id)
    except OSError:  # best effort: a later commit or ``shardprep.clean`` removes it
        pass
    return False


def _remove_claimed(root: str, run_id: str) -> None:
    """Removes a discarded run's folder, its claim last: a commit that claims the run after that
    finds its shards gone and refuses (``shardprep.commit``)."""
    folder = naming.join(root, run_id)
    for name in fs.listdir(folder):
        if name != naming.OUTCOME:
            fs.remove(naming.join(folder, name), recursive=True)
    fs.remove(folder, recursive=True)
