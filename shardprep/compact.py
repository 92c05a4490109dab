"""``python -m shardprep.compact DIR``: rewrites every generation of a data set into one.

An appended data set (``shardprep.generations``) holds each generation's shards, each exactly
balanced on its own. Compaction reads every record of each split once and deals them, in a global
seeded shuffle over all the split's records (``permutation.Permutation``, the data set's seed), into
shards of one new generation, exactly balanced; it commits them as the next manifest version (its
parent the version read, refused as an append is if another run committed meanwhile). The records,
their splits, the accounting, the dead letters and the statistics stay what they were (the
statistics' stored state is copied into the new run folder, and so are the generations' record
hashes of ``--dedup exact``, merged into one file). Earlier versions stay readable while
kept (``--keep-previous``, ``shardprep.clean --keep-versions``).

Uncompressed shards are read at random through their record indexes, one new shard at a time
(bounded memory); gzip shards are read whole per split.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import numpy as np

from shardprep import (
    cli,
    commit,
    framing,
    fs,
    lease,
    manifest,
    members,
    naming,
    planning,
    reader,
    record_hashes,
    shard_reader,
    writer,
)
from shardprep.config import ReshardConfig
from shardprep.errors import RunError, UsageError
from shardprep.permutation import Permutation
from shardprep.stats import state as stats_state

__all__ = ["compact", "main"]


def _split_records(root: str, m: manifest.Manifest, split: str) -> reader.Records | list[bytes]:
    if m.compression == "none":
        return reader.open(root, split)
    out = []
    for i, shard in enumerate(m.splits[split].shards):
        with shard_reader.open_shard(root, shard.path, limit=shard.num_bytes, field=f"splits.{split}.shards[{i}].path") as s:
            out.extend(shard_reader.records(s, compression=m.compression))
    return out


def _shard_count(m: manifest.Manifest, split: str, num_shards: int | None) -> int:
    """``num_shards``, else the oldest generation's shard count of the split (at most its records)."""
    shards = m.splits[split].shards
    if num_shards is None:
        oldest = shards[0].path.split("/", 1)[0]
        num_shards = sum(s.path.startswith(oldest + "/") for s in shards)
    return max(1, min(num_shards, m.splits[split].num_records))


def compact(root: str, *, num_shards: int | None = None, keep_previous: int = 1) -> str:
    """Compacts the data set at ``root``; returns the new manifest's URL (or the refusing report's)."""
    m = manifest.load(root)
    run_id = naming.new_run_id()
    config = ReshardConfig(output=root, run_id=run_id, features=m.features, sources=(), seed=m.seed, shuffle=m.shuffled,
                           compression=m.compression, num_shards=1, overwrite=True, keep_previous=keep_previous,
                           base=m.identity)
    with lease.hold(root, run_id):
        splits = {}
        for k, name in enumerate(m.splits):
            records = _split_records(root, m, name)
            total, count = len(records), _shard_count(m, name, num_shards)
            order = (Permutation(total, m.seed + k).inverse(np.arange(total, dtype=np.uint64)).astype(np.int64)
                     if m.shuffled else np.arange(total, dtype=np.int64))  # position -> record
            shards = []
            for s in range(count):
                picked = order[planning.positions_of(s, count, total).astype(np.int64)]
                chosen = records.read(picked) if isinstance(records, reader.Records) else [records[i] for i in picked]
                framed = [framing.frame(bytes(r)) for r in chosen]
                ends = np.cumsum([len(f) for f in framed], dtype=np.int64)
                path = naming.shard_path(run_id, name, s, count, gzip=m.compression == "gzip")
                shards.append(writer.write_shard(root, path, b"".join(framed), len(framed), compress=m.compression == "gzip",
                                                 ends=None if m.compression == "gzip" else ends))
            splits[name] = manifest.SplitInfo(total, sum(x.num_bytes for x in shards), tuple(shards))
        rejected = []  # the dead letters, copied: the new version names no file of an older run
        for i, path in enumerate(m.rejected.paths):
            data = members.read_member(root, path, field=f"rejected.paths[{i}]", cap=sys.maxsize)
            rejected.append(naming.rejected_path(run_id, i, len(m.rejected.paths)))
            with fs.write_atomic(naming.join(root, rejected[-1])) as f:
                f.write(data)
        sketches = {name: stats_state.write(root, run_id, name, stats_state.read(root, info, field=f"sketches.{name}"))
                    for name, info in m.sketches.items()}
        result = manifest.Manifest(features=m.features, splits=splits, sources=m.sources,
                                   rejected=manifest.RejectedInfo(m.rejected.num_records, tuple(rejected), m.rejected.by_reason),
                                   accounting=m.accounting, seed=m.seed, shuffled=m.shuffled, compression=m.compression,
                                   statistics=m.statistics, record_type=m.record_type, text=m.text, sketches=sketches,
                                   generations=_hashes(root, m, run_id, splits))
        return commit.commit_manifest(config, result)


def _hashes(root: str, m: manifest.Manifest, run_id: str,
            splits: dict[str, manifest.SplitInfo]) -> tuple[manifest.Generation, ...]:
    """The compacted generation with every generation's record hashes merged (``--dedup exact``), so
    later appends keep checking against them; () where a generation keeps none (or of another key)."""
    kept = [g.hashes for g in m.all_generations()]
    if any(h is None for h in kept) or len({h.key for h in kept}) != 1:
        return ()
    tables = [record_hashes.read(root, h, field=f"generations[{i}].hashes") for i, h in enumerate(kept)]
    info = record_hashes.write(root, run_id, record_hashes.sorted_unique(np.concatenate(tables)), kept[0].key)
    return (manifest.Generation(run_id, 1, {n: s.num_records for n, s in splits.items()}, hashes=info),)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.compact", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--num-shards", type=int, metavar="N", help="shards per split (default: the first generation's)")
    p.add_argument("--keep-previous", type=int, default=1, metavar="N",
                   help="committed versions kept besides the new one, so readers of them finish (default: %(default)s)")
    args = p.parse_args(argv)
    if args.num_shards is not None and args.num_shards < 1:
        raise UsageError(f"--num-shards {args.num_shards}: expected at least 1")
    url = compact(args.dir, num_shards=args.num_shards, keep_previous=args.keep_previous)
    if url.endswith(naming.REPORT):
        raise RunError(f"{json.loads(fs.read_bytes(url))['errors'][0]} (report: {url})")
    m = manifest.load(args.dir)
    print(f"compacted {args.dir}: version {m.data_version}, one generation of "
          + ", ".join(f"{name} {len(s.shards)} shards / {s.num_records:,} records" for name, s in m.splits.items()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.compact", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
