"""``python -m shardprep.verify DIR``: proves a data set is whole before anyone trains on it.

Checks the manifest's invariants, then every shard: present, size, whole-file crc32c, and (on
local paths, or with --deep anywhere) every record's CRCs and the record count. On object stores
the crc32c that the store keeps for every object is compared first, without downloading.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import gzip
import io
import sys
from collections.abc import Sequence

import google_crc32c

from shardprep import cli, fs, manifest, naming, tfrecord

__all__ = ["main", "shard_problems", "verify"]


def _stored_crc32c(info: dict) -> str | None:
    """The object store's own crc32c (GCS keeps one for every object, base64) as hex, if any."""
    value = info.get("crc32c")
    if not value:
        return None
    return base64.b64decode(value).hex() if not all(c in "0123456789abcdef" for c in str(value)) else str(value)


def shard_problems(root: str, shard: manifest.ShardInfo, *, compression: str, deep: bool) -> list[str]:
    """Everything wrong with one shard, one line each; empty when it is sound."""
    url = naming.join(root, shard.path)
    if fs.is_local(url):
        if not fs.exists(url):
            return [f"{shard.path}: missing"]
        size = fs.size(url)
    else:  # one metadata request: size and the store's checksum, nothing downloaded
        filesystem, path = fs.filesystem(url)
        try:
            info = filesystem.info(path)
        except FileNotFoundError:
            return [f"{shard.path}: missing"]
        size = int(info.get("size", -1))
    if size != shard.num_bytes:
        return [f"{shard.path}: {size} bytes, the manifest says {shard.num_bytes} (truncated or replaced)"]
    if not fs.is_local(url):
        stored = _stored_crc32c(info)
        if stored is not None and stored != shard.crc32c:
            return [f"{shard.path}: crc32c {stored} (stored), the manifest says {shard.crc32c}"]
        if stored is not None and not deep:
            return []
    data = fs.read_bytes(url)
    crc = f"{google_crc32c.value(data):08x}"
    if crc != shard.crc32c:
        return [f"{shard.path}: crc32c {crc}, the manifest says {shard.crc32c} (the file is corrupt)"]
    try:
        if compression == "gzip":
            data = gzip.decompress(data)
        count = sum(1 for _ in tfrecord.read_records(io.BytesIO(data), check_crc=True))
    except (tfrecord.CorruptRecordError, OSError, EOFError) as e:
        return [f"{shard.path}: {e}"]
    if count != shard.num_records:
        return [f"{shard.path}: {count} records, the manifest says {shard.num_records}"]
    return []


def verify(root: str, *, deep: bool = False, jobs: int = 4) -> tuple[list[str], int, int]:
    """Returns (problems, shards checked, records covered)."""
    m = manifest.load(root)
    problems = manifest.problems(m)
    shards = [s for split in m.splits.values() for s in split.shards]
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for found in pool.map(lambda s: shard_problems(root, s, compression=m.compression, deep=deep), shards):
            problems.extend(found)
    for path in m.rejected.paths:
        if not fs.exists(naming.join(root, path)):
            problems.append(f"{path}: dead-letter file missing")
    return problems, len(shards), sum(s.num_records for s in shards)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.verify", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--deep", action="store_true", help="on object stores, also download and check every record")
    p.add_argument("--jobs", type=int, default=4, help="shards checked in parallel (default: %(default)s)")
    args = p.parse_args(argv)
    problems, n_shards, n_records = verify(args.dir, deep=args.deep, jobs=args.jobs)
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        print(f"shardprep.verify: {len(problems)} problem(s) in {args.dir}", file=sys.stderr)
        return 1
    print(f"OK {args.dir}: {n_shards} shards, {n_records:,} records verified")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.verify", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
