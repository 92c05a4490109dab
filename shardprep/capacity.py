"""How much a run may take of this machine: its cores, the memory its page cache may grow by,
the spill's size (whether WriteShards can read it in place) and the free disk a run needs.
Facts and arithmetic only: nothing here starts or plans anything."""
from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from typing import Any

from shardprep import fs
from shardprep import space_bound as space_bounds
from shardprep.errors import InputError
from shardprep.formats import parquet

__all__ = ["RUN_SPACE_FACTOR", "available_memory", "fits_in_memory", "free_space", "log_bound", "machine_cores",
           "out_of_space", "run_space", "space_bound", "space_needed", "spill_bytes"]

log = logging.getLogger("shardprep")

# Free space a run needs, as a multiple of its input bytes: two copies (spill + shards) of the
# encoded records, which take up to ~3x the input's bytes for CSV/JSON Lines of short numeric fields
# (tf.train.Example spends ~15 bytes of names and wrappers per feature) and more for compressed input.
RUN_SPACE_FACTOR = 6
_TABULAR = ("csv", "jsonl", "json", "parquet")  # formats whose records are encoded anew (spill_bytes)


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under taskset or a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes this process's page cache may grow by: the kernel's ``MemAvailable``, or less under the
    memory limit of its cgroup or of one above it (a container's page cache counts against its
    limit; reclaimable file pages count as free). None where unknown (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        with open("/proc/self/cgroup") as f:
            groups = [line.rstrip("\n").split(":", 2) for line in f]
    except (OSError, StopIteration, ValueError):
        return None
    for _, controllers, path in groups:
        if controllers == "memory":  # cgroup v1
            free = min(free, _cgroup_room("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                                          "memory.usage_in_bytes", "total_inactive_file"))
        elif controllers == "":  # cgroup v2
            free = min(free, _cgroup_room("/sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file"))
    return free


def _cgroup_room(root: str, path: str, limit: str, usage: str, inactive: str) -> int:
    """The room left under the tightest memory limit of cgroup ``path`` and the groups above it, in
    the hierarchy mounted at ``root`` (no limit, or no such group: unbounded)."""
    room, parts = 1 << 62, [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        folder = "/".join([root, *parts[:depth]])
        try:
            with open(f"{folder}/{limit}") as a, open(f"{folder}/{usage}") as b, open(f"{folder}/memory.stat") as c:
                cap, used = int(a.read()), int(b.read())  # "max" (cgroup v2, no limit): ValueError
                stat = dict(line.split() for line in c)
        except (OSError, ValueError):
            continue
        room = min(room, max(0, cap - used + int(stat.get(inactive, 0))))
    return room


def spill_bytes(files: Sequence[Any]) -> int:
    """The most the spill of these input files (``formats.InputFile``) may take: up to
    ``RUN_SPACE_FACTOR / 2`` times the bytes of CSV and JSON Lines input (a ``tf.train.Example``
    spends ~15 bytes of names and wrappers on a short field), what a Parquet file's footer says
    (``formats.parquet.encoded_bytes``), about the bytes of TFRecord, TFDS and images (their
    records pass through), 4x more where the file is gzip'd.

    WriteShards reads local spill in place only when this fits in memory (``fits_in_memory``;
    ``ReshardConfig.spill_in_place``): each shard's records lie a few KB apart in every parsed file,
    so each shard touches most of its pages, and a spill the page cache cannot hold is read from
    disk again for every shard.
    """
    tabular = RUN_SPACE_FACTOR // 2

    def size(f: Any) -> int:
        if f.format == "parquet":  # its footer says (a columnar file's size does not)
            return parquet.encoded_bytes(f)
        return f.size * (tabular if f.format in _TABULAR else 1) * (4 if f.gzip else 1)

    return sum(map(size, files))


def run_space(files: Sequence[Any]) -> int:
    """The free space a run of these input files needs on the output's device: its spill and its
    shards (about the spill's size) at once, then the shards alone; and 1 MB for the small files
    (manifest, dead letters, a block or page per spill file)."""
    return 2 * spill_bytes(files) + (1 << 20)


def fits_in_memory(spill_size: int, memory: int | None) -> bool:
    """Whether a spill of ``spill_size`` bytes may stay in the page cache: at most half the
    ``memory`` available when the run is planned (``available_memory``; None:
    unknown, taken as yes). The other half is for the input's pages, read at the same time, and the
    run's processes, which grow after planning (Beam, the pool)."""
    return memory is None or 2 * spill_size <= memory


def space_bound(config: Any, units: Sequence[Any]) -> space_bounds.SpaceBound:
    """The most the run of ``config`` (``config.ReshardConfig``) and its work ``units``
    (``formats.WorkUnit``) may hold under its output at once (``shardprep.space_bound``). A text
    run's units, once its document store is built, carry the store's counts (``text.spec.TextSpec``);
    before that, the bound is the store's alone (``text_store_bound``)."""
    units = [member for unit in units for member in unit.members]  # a FileGroup's files: each as its own unit
    files = list({unit.file.index: unit.file for unit in units}.values())
    schema = config.schema
    spec = next((f.text for f in files if f.text is not None), None)
    text = None
    if spec is not None:
        c = spec.config
        text = {"task": spec.task, "documents": spec.num_documents, "sentences": spec.num_sentences,
                "store_bytes": max((u.end for u in units), default=0), "dupe_factor": c.dupe_factor,
                "vocab_size": (config.text or {}).get("vocab_size", 1 << 31),
                "vocab_bytes": (config.text or {}).get("vocab_num_bytes", 0), "max_seq_length": c.max_seq_length,
                "labels": len(spec.labels)}
    return space_bounds.space_bound(files=files, units=units, schema=schema, config=config,
                                    decompressed={f.index: _decompressed(f) for f in files}, text=text)


def log_bound(config: Any, units: Sequence[Any]) -> None:
    """Logs ``space_bound``'s total and its parts, once a run's units are known (a line only: a
    bound that cannot be computed is logged at debug level, and the run goes on)."""
    try:
        bound = space_bound(config, units)
    except Exception as e:  # noqa: BLE001 - a log line only: the run goes on
        log.debug("no bound of the run's disk space: %s", e)
        return
    log.info("this run writes at most %.1f MB under %s at once (%s bytes: %s)", bound.total / 1e6, config.output,
             f"{bound.total:,}", bound.describe())


def text_store_bound(config: Any, units: Sequence[Any]) -> int:
    """The most a text run's first step writes (its document store, token files and vocabulary), from its
    input files: a store line holds its text as JSON (at most 6 bytes a byte) and a position, token files
    4 bytes a token (a byte of text or more) and 8 a sentence (a line: 2 bytes or more)."""
    size = sum(_decompressed(f) for f in {u.file.index: u.file for u in units}.values())
    store = 6 * size + 64 * (size // 2 + 1)
    return store + 4 * size + 8 * (size // 2 + 1) + (64 << 20)


def _decompressed(file: Any) -> int:
    """The bytes of an input file once un-gzipped: a gzip file's trailer says (ISIZE: its last member's
    size modulo 4 GiB), else its size."""
    if not file.gzip or file.size < 18:
        return file.size
    try:
        return max(file.size, int.from_bytes(fs.read_bytes(file.url, file.size - 4, file.size), "little"))
    except (OSError, ValueError):
        return 4 * file.size


def space_needed(config: Any, units: Sequence[Any]) -> int:
    """``space_bound(config, units).total``, for the message of a full disk; from the input files'
    sizes (``run_space``) where the bound cannot be computed now (a Parquet footer that cannot be read)."""
    try:
        return space_bound(config, units).total
    except (OSError, InputError):
        files = list({m.file.index: m.file for unit in units for m in unit.members}.values())
        return RUN_SPACE_FACTOR * sum(f.size for f in files)


def free_space(url: str) -> int | None:
    """Free bytes on the device of a local ``url`` (its nearest existing folder); None elsewhere."""
    if not fs.is_local(url):
        return None
    path = os.path.abspath(url.removeprefix("file://"))
    while not os.path.isdir(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` is, or wraps, a full disk (a worker's error reaches the launcher as text)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if f"[Errno {errno.ENOSPC}]" in str(seen) or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
