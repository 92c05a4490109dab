"""A worker process's memory: glibc's malloc told to keep what a step frees for the next step to
reuse, and the objects of the imports left out of garbage collection (``freeze_startup_objects``;
``freeze_for_fork``: a forked pool's processes start with the launcher's objects left out).

glibc serves a block above its mmap threshold (128 kB at the start) from a fresh ``mmap`` and
unmaps it when it is freed; it raises the threshold as such blocks come and go, up to 32 MB, unless
``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_MMAP_THRESHOLD_`` is set, which pins it (a Dask Nanny starts
every worker with ``MALLOC_TRIM_THRESHOLD_=65536``). The steps allocate and free arrays of a few
hundred kB to tens of MB all the time (the column-wise encoder's slices, a shard's gather, the
permutation's positions), so each came back as fresh pages from the kernel: zeroed, faulted in
one by one. ``keep_freed_memory`` sets glibc's own upper limits from the start (what it saves:
benchmarks/analysis.md). A process keeps up to ``TRIM_THRESHOLD`` bytes it freed. Nothing changes
where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Callable

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "freeze_for_fork", "freeze_plan", "freeze_startup_objects",
           "keep_freed_memory", "pause_collections", "unfreeze_plan"]

MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc pairs with it when it raises the threshold itself
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3)
_done = False


def keep_freed_memory() -> bool:
    """Sets this process's malloc thresholds (once); whether they are set (False: not glibc)."""
    global _done
    if not _done and sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):  # another C library (musl has no mallopt)
            return False
        _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done


# The cyclic garbage collector's full passes would walk every object the imports made, and in a
# pool process touch the pages it shares with the launcher: those are frozen, left out.
_frozen = False


def freeze_startup_objects() -> None:
    """Once per process, before the work: leaves the objects that exist by then (imports) out of
    garbage collection."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def freeze_for_fork(fork: Callable[[], object]) -> None:
    """Calls ``fork`` (which forks processes) with this process's objects out of garbage collection,
    so that the children start with them frozen: their collections never walk (and copy) the pages
    they share with this process. Here they are collected again afterwards, unless this process
    had frozen objects before (``freeze_startup_objects``)."""
    frozen = gc.get_freeze_count()
    gc.freeze()
    try:
        fork()
    finally:
        if not frozen:
            gc.unfreeze()


# A launcher's plan (a run's input files and work units: several objects a file) lives as long as its
# run and holds no cycles: collections while it is made, and full ones after, would walk it again and again.
_plan: dict[str, bool] = {"paused": False, "frozen": False}


def pause_collections() -> None:
    """Turns the cyclic garbage collector off while a launcher makes its plan (``freeze_plan`` turns it
    on again; ``unfreeze_plan`` too, on any way out)."""
    if gc.isenabled():
        gc.disable()
        _plan["paused"] = True


def freeze_plan() -> None:
    """Leaves the objects that exist now (a launcher's plan, once made) out of the later collections of
    its run, unless this process froze objects before, and ends ``pause_collections``."""
    if not _plan["frozen"] and not gc.get_freeze_count():
        gc.freeze()
        _plan["frozen"] = True
    if _plan["paused"]:
        gc.enable()
        _plan["paused"] = False


def unfreeze_plan() -> None:
    """Once its run has ended: what ``freeze_plan`` left out is collected again, and the collector is on
    again if ``pause_collections`` turned it off."""
    if _plan["frozen"]:
        gc.unfreeze()
        _plan["frozen"] = False
    if _plan["paused"]:
        gc.enable()
        _plan["paused"] = False
