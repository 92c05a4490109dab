"""The output lease: one run at a time owns a data set folder, from its start to the end of its clean-up.

``DIR/_lease.json`` is created only if absent (``versioned.create_exclusive``: a hard link locally and on
NFS, an ``ifGenerationMatch=0`` upload on GCS) and records the run id, host, pid and the time it was
last renewed. The holder renews it every ``ttl_s / 5`` seconds from a background thread. Another run
that finds it refuses with a one-line ``RunError`` naming the owner, unless the lease is stale:

- it was not renewed for ``ttl_s`` seconds (default 10 minutes; the holder's clock), or
- it was taken on this host and its pid is no longer alive (a run killed with SIGKILL), or
- it cannot be parsed (only a damaged folder holds such a file).

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

from shardprep import fs, naming, versioned
from shardprep.errors import RunError

__all__ = ["DEFAULT_TTL_S", "LEASE", "Lease", "acquire", "check", "hold", "pause", "release", "renew"]

LEASE = "_lease.json"
DEFAULT_TTL_S = 600.0
_BREAK_LOCK_TTL_S = 30.0
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
        try:
            doc = json.loads(data)
            return cls(str(doc["run_id"]), str(doc["host"]), int(doc["pid"]), float(doc["renewed"]), float(doc["ttl_s"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        age = time.time() - self.renewed
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, renewed {age:.0f} s ago)"


def pause(step: str) -> None:
    """Test hook for race tests: sleeps at ``step`` if ``SHARDPREP_TEST_DELAYS`` asks (``step=s,*=s``)."""
    spec = os.environ.get("SHARDPREP_TEST_DELAYS")
    if not spec:
        return
    delays = dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
    seconds = delays.get(step, delays.get("*"))
    if seconds:
        time.sleep(float(seconds))


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


def _stale_reason(lease: Lease | None) -> str | None:
    """Why a lease may be broken (see the module docstring), or None while it holds."""
    if lease is None:
        return "it cannot be read"
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
        pause("lease.break")
        if versioned.remove_if_version(url, version):
            log.warning("broke the stale lease of %s on %s: %s", holder.describe() if holder else "?", root, reason)
    finally:
        os.remove(lock)


def acquire(root: str, run_id: str, *, ttl_s: float = DEFAULT_TTL_S) -> bool:
    """Takes the lease on ``root`` for ``run_id``: True if taken now, False if ``run_id`` already holds it.

    Raises ``RunError`` naming the owner when another live run holds it.
    """
    for _ in range(5):
        pause("lease.create")
        if versioned.create_exclusive(_url(root), _new(run_id, ttl_s).to_bytes()):
            return True
        pause("lease.read")
        found = versioned.read_versioned(_url(root))
        if found is None:
            continue  # released or broken in between: try again
        data, version = found
        holder = Lease.parse(data)
        if holder is not None and holder.run_id == run_id:
            return False
        reason = _stale_reason(holder)
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
