"""``python -m shardprep.index DIR``: gives every shard of a data set its record index, and DALI's.

A data set written before record indexes (or another tool's TFRecord shards described by a
shardprep manifest) gets one per shard (``record_index``): each shard is read once, both CRCs of
every record and its whole-file crc32c checked against the manifest, its index written beside it
atomically, then a new manifest naming the indexes replaces the old one atomically (and the run's
own copy). Shards are never touched, so a reader of the old manifest reads on undisturbed; a
manifest that changed meanwhile (a new run committed) is left alone, and the command fails.

``--dali OUT`` also writes DALI's ``tfrecord2idx`` text index of every shard under OUT (one
``offset length`` line a record, at the shard's own relative path with ``.idx``), from the indexes.
gzip shards cannot be read at random: the command refuses them (exit 2).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import sys
from collections.abc import Sequence

import numpy as np

from shardprep import cli, framing, fs, manifest, naming, record_index, shard_reader
from shardprep.errors import RunError, UsageError

__all__ = ["add_indexes", "main", "offsets_of", "write_dali"]


def _scan(root: str, shard: manifest.ShardInfo) -> np.ndarray:
    """The offsets of a shard, read once and checked whole (records' CRCs, count, size, crc32c)."""
    with shard_reader.open_shard(root, shard.path, limit=shard.num_bytes) as stream:
        try:
            offsets = record_index.scan(stream)
        except framing.CorruptRecordError as e:
            raise RunError(f"{shard.path}: {e}: not indexed (python -m shardprep.verify names every problem)") from None
        whole = stream.drain()
    if not whole or stream.num_bytes != shard.num_bytes or stream.crc32c != shard.crc32c:
        raise RunError(f"{shard.path}: its size or crc32c differs from the manifest's (the shard is damaged or was "
                       "replaced): not indexed")
    try:
        record_index.check(offsets, num_records=shard.num_records, num_bytes=shard.num_bytes, what=shard.path)
    except record_index.IndexFormatError as e:
        raise RunError(f"{e}: not indexed") from None
    return offsets


def offsets_of(root: str, shard: manifest.ShardInfo) -> np.ndarray:
    """A shard's record offsets: from its index (checked against the manifest), else a scan."""
    if shard.index is None:
        return _scan(root, shard)
    with shard_reader.open_shard(root, shard.index.path, limit=shard.index.num_bytes) as stream:
        data = stream.read(shard.index.num_bytes)
        while len(data) < shard.index.num_bytes and (more := stream.read(shard.index.num_bytes - len(data))):
            data += more
    if len(data) != shard.index.num_bytes or record_index.crc32c_hex(data) != shard.index.crc32c:
        raise RunError(f"{shard.index.path}: the record index differs from the manifest's size and crc32c")
    offsets = record_index.decode(data, what=shard.index.path)
    record_index.check(offsets, num_records=shard.num_records, num_bytes=shard.num_bytes, what=shard.index.path)
    return offsets


def _index_one(root: str, shard: manifest.ShardInfo) -> manifest.ShardInfo:
    data = record_index.encode(_scan(root, shard))
    path = naming.index_path(shard.path)
    with fs.write_atomic(naming.join(root, path)) as f:
        f.write(data)
    return dataclasses.replace(shard, index=manifest.IndexInfo(path, len(data), record_index.crc32c_hex(data)))


def _refuse_gzip(root: str, m: manifest.Manifest) -> None:
    if m.compression != "none":
        raise UsageError(f"{root}: its shards are {m.compression}-compressed and cannot be read at random: no record "
                         "index (re-shard with --compression none for one)")


def add_indexes(root: str, *, jobs: int = 4) -> tuple[int, int]:
    """Indexes every shard of ``root`` that has none and commits a manifest naming them; returns
    (shards indexed now, shards that had one)."""
    before = fs.read_bytes(naming.join(root, naming.MANIFEST))
    m = manifest.load(root)
    _refuse_gzip(root, m)
    todo = [(name, i) for name, split in m.splits.items() for i, s in enumerate(split.shards) if s.index is None]
    if not todo:
        return 0, sum(len(s.shards) for s in m.splits.values())
    shards = {name: list(split.shards) for name, split in m.splits.items()}
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        done = pool.map(lambda key: _index_one(root, shards[key[0]][key[1]]), todo)
        for (name, i), info in zip(todo, done):
            shards[name][i] = info
    updated = dataclasses.replace(m, splits={name: dataclasses.replace(split, shards=tuple(shards[name]))
                                             for name, split in m.splits.items()})
    if fs.read_bytes(naming.join(root, naming.MANIFEST)) != before:
        raise RunError(f"{root}: the manifest changed while indexing (a run committed): run python -m shardprep.index again")
    data = manifest.encode(updated)
    manifest.write(root, updated, data)
    (run,) = m.run_ids if len(m.run_ids) == 1 else (None,)
    if run and fs.exists(naming.join(root, manifest.run_copy_path(run))):  # a reader pinned to the run sees them too
        manifest.write_run_copy(root, run, updated, data)
    return len(todo), sum(len(s.shards) for s in m.splits.values()) - len(todo)


def write_dali(root: str, out: str, *, jobs: int = 4) -> int:
    """Writes DALI's ``tfrecord2idx`` index of every shard of ``root`` under ``out``; returns how many."""
    m = manifest.load(root)
    _refuse_gzip(root, m)
    shards = [s for split in m.splits.values() for s in split.shards]

    def one(shard: manifest.ShardInfo) -> None:
        with fs.write_atomic(naming.join(out, naming.dali_index_path(shard.path))) as f:
            f.write(record_index.dali_text(offsets_of(root, shard)))

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(one, shards))
    return len(shards)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.index",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--dali", metavar="OUT", help="also write DALI's tfrecord2idx text index of every shard under OUT "
                   "(OUT/<shard path>.idx)")
    p.add_argument("--jobs", type=int, default=4, help="shards indexed in parallel (default: %(default)s)")
    args = p.parse_args(argv)
    indexed, had = add_indexes(args.dir, jobs=args.jobs)
    print(f"OK {args.dir}: {indexed} shard(s) indexed now, {had} already indexed")
    if args.dali:
        n = write_dali(args.dir, args.dali, jobs=args.jobs)
        print(f"OK {n} DALI index file(s) under {args.dali}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.index", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
