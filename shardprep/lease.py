"""The output lease: one run at a time owns a data set folder, from its start to the end of its clean-up.

``DIR/_lease.json`` is created only if absent (``versioned.create_exclusive``: a hard link locally and on
NFS, an ``ifGenerationMatch=0`` upload on GCS) and records the run id, host, pid and the time it was
last renewed. The holder renews it every ``ttl_s / 5`` seconds from a background thread. Another run
that finds it refuses with a one-line ``RunError`` naming the owner, unless the lease is stale:

- it was not renewed for ``ttl_s`` seconds (default 10 minutes; the holder's clock), or
- it was taken on this host and its pid is no longer alive (a run killed with SIGKILL), or
- it is damaged: not JSON, or a field of the wrong type or out of range (NaN, infinity, a pid no
  process can have, a renewal time more than a day in the future: ``Lease.damage``); only a damaged
  folder holds such a file.

A stale lease is removed only if it is still the version that was judged stale (GCS: a delete
with ``ifGenerationMatch``; locally under a short break lock), then the breaker competes for a
fresh create-only write like anyone else, so two breakers never both win. The commit step checks
the lease again before writing the manifest and before removing anything.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

from shardprep import faults, fs, naming, versioned
from shardprep.errors import RunError

__all__ = ["DEFAULT_TTL_S", "LEASE", "MAX_CLOCK_AHEAD_S", "MAX_PID", "MAX_TTL_S", "Lease", "acquire", "check", "hold", "release", "renew"]

LEASE = "_lease.json"
DEFAULT_TTL_S = 600.0
_BREAK_LOCK_TTL_S = 30.0
MAX_PID = (1 << 31) - 1  # pid_t's range: a larger number is no process id on any host
MAX_TTL_S = 86400.0  # a day: runs renew every ttl_s / 5, so no writer of this module asks for more
MAX_CLOCK_AHEAD_S = 86400.0  # another host's clock may run ahead of ours, but not by a day
_MAX_NAME = 1000
log = logging.getLogger("shardprep")


@dataclasses.dataclass(frozen=True)
class Lease:
    """Who owns the folder, as written in the lease file."""

    run_id: str
    host: str
    pid: int
    renewed: float
    ttl_s: float

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def parse(cls, data: bytes) -> Lease | None:
        """The lease ``data`` holds, or None when it is damaged (``damage``)."""
        doc = _document(data)
        if isinstance(doc, str):
            return None
        return cls(doc["run_id"], doc["host"], doc["pid"], float(doc["renewed"]), float(doc["ttl_s"]))

    @staticmethod
    def damage(data: bytes) -> str | None:
        """Why ``data`` is no lease this module could have written (not JSON, a field missing or of the
        wrong type, a number out of range), or None when it is one."""
        doc = _document(data)
        return doc if isinstance(doc, str) else None

    def describe(self) -> str:
        age = time.time() - self.renewed
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, renewed {age:.0f} s ago)"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _document(data: bytes) -> dict | str:
    """The lease's fields, checked as ``_new`` writes them; or why they are not (a damaged lease).

    A number a live run cannot have written (NaN, infinity, a pid outside 1 .. ``MAX_PID``, a TTL
    outside (0, ``MAX_TTL_S``], a renewal time before 1970 or more than ``MAX_CLOCK_AHEAD_S`` ahead of
    this host's clock) makes the lease damaged, so it is broken like unparseable bytes, never a lock
    that outlives every run."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "it is not JSON"
    if not isinstance(doc, dict):
        return "it is not a JSON object"
    for key in ("run_id", "host"):
        if not isinstance(doc.get(key), str) or not doc[key] or len(doc[key]) > _MAX_NAME:
            return f"its {key} is not a name ({doc.get(key)!r:.40})"
    pid, renewed, ttl_s = doc.get("pid"), doc.get("renewed"), doc.get("ttl_s")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 1 <= pid <= MAX_PID:
        return f"its pid {pid!r:.40} is not a process id"
    if not _number(ttl_s) or not 0 < ttl_s <= MAX_TTL_S:  # NaN fails both comparisons
        return f"its ttl_s {ttl_s!r:.40} is not a number of seconds up to {MAX_TTL_S:.0f}"
    if not _number(renewed) or not 0 <= renewed <= time.time() + MAX_CLOCK_AHEAD_S:
        return f"its renewal time {renewed!r:.40} is not a time up to a day ahead of this host's clock"
    return doc


def _url(root: str) -> str:
    return naming.join(root, LEASE)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_reason(lease: Lease | None, data: bytes) -> str | None:
    """Why the lease ``data`` (``lease`` parsed) may be broken (see the module docstring), or None while it holds."""
    if lease is None:
        return f"it is damaged: {Lease.damage(data) or 'a number out of range'}"
    if time.time() - lease.renewed > lease.ttl_s:
        return f"it was not renewed for {lease.ttl_s:.0f} s"
    if lease.host == socket.gethostname() and not _pid_alive(lease.pid):
        return f"its process {lease.pid} on this host is gone"
    return None


def _new(run_id: str, ttl_s: float) -> Lease:
    return Lease(run_id, socket.gethostname(), os.getpid(), time.time(), ttl_s)


def _break(root: str, version: str, reason: str, holder: Lease | None) -> None:
    """Removes the stale lease if it is still ``version``; locally under a break lock."""
    url = _url(root)
    if not fs.is_local(url):
        if versioned.remove_if_version(url, version):
            log.warning("broke the stale lease of %s on %s: %s", holder.describe() if holder else "?", root, reason)
        return
    lock = url + ".break"
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.stat(lock).st_mtime > _BREAK_LOCK_TTL_S:  # a breaker that crashed
            os.remove(lock)
    if not versioned.create_exclusive(lock, b""):
        return  # another run is breaking it; compete for the fresh lease below
    try:
        faults.pause("lease.break")
        if versioned.remove_if_version(url, version):
            log.warning("broke the stale lease of %s on %s: %s", holder.describe() if holder else "?", root, reason)
    finally:
        os.remove(lock)


def acquire(root: str, run_id: str, *, ttl_s: float = DEFAULT_TTL_S) -> bool:
    """Takes the lease on ``root`` for ``run_id``: True if taken now, False if ``run_id`` already holds it.

    Raises ``RunError`` naming the owner when another live run holds it.
    """
    for _ in range(5):
        faults.pause("lease.create")
        if versioned.create_exclusive(_url(root), _new(run_id, ttl_s).to_bytes()):
            return True
        faults.pause("lease.read")
        found = versioned.read_versioned(_url(root))
        if found is None:
            continue  # released or broken in between: try again
        data, version = found
        holder = Lease.parse(data)
        if holder is not None and holder.run_id == run_id:
            return False
        reason = _stale_reason(holder, data)
        if reason is None:
            raise RunError(
                f"another run owns {root}: {holder.describe()} holds {_url(root)}; wait for it to finish "
                f"or use another --output (a lease of a crashed run expires after {holder.ttl_s:.0f} s)"
            )
        _break(root, version, reason, holder)
    raise RunError(f"could not take the lease {_url(root)}: other runs keep taking it; run one re-shard per output")


def check(root: str, run_id: str) -> None:
    """Raises ``RunError`` unless ``run_id`` holds the lease on ``root`` now."""
    found = versioned.read_versioned(_url(root))
    holder = Lease.parse(found[0]) if found else None
    if holder is None or holder.run_id != run_id:
        owner = holder.describe() if holder else "nobody"
        raise RunError(f"run {run_id} lost the lease on {root} (now held by {owner}): another run owns the folder")


def renew(root: str, run_id: str, ttl_s: float = DEFAULT_TTL_S) -> bool:
    """Moves the lease's renewal time to now; False if ``run_id`` no longer holds it."""
    found = versioned.read_versioned(_url(root))
    holder = Lease.parse(found[0]) if found else None
    if holder is None or holder.run_id != run_id:
        return False
    return versioned.replace_if_version(_url(root), _new(run_id, ttl_s).to_bytes(), found[1])


def release(root: str, run_id: str) -> None:
    """Removes the lease if ``run_id`` holds it (never another run's)."""
    found = versioned.read_versioned(_url(root))
    if found and (holder := Lease.parse(found[0])) is not None and holder.run_id == run_id:
        versioned.remove_if_version(_url(root), found[1])


@contextlib.contextmanager
def hold(root: str, run_id: str, *, ttl_s: float = DEFAULT_TTL_S) -> Iterator[None]:
    """Holds the lease on ``root`` for the block, renewing it; releases it only if taken here."""
    taken = acquire(root, run_id, ttl_s=ttl_s)
    if not taken:
        yield
        return
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(ttl_s / 5):
            try:
                if not renew(root, run_id, ttl_s):
                    log.warning("run %s lost the lease on %s", run_id, root)
                    return
            except OSError as e:  # a transient storage error: the next beat tries again
                log.warning("could not renew the lease on %s: %s", root, e)

    thread = threading.Thread(target=heartbeat, name="shardprep-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release(root, run_id)
