"""``python -m shardprep.verify DIR``: proves a data set is whole before anyone trains on it.

Checks the manifest's invariants (no shard listed twice, no split made of another's shards), then
every shard: a regular file inside DIR (no link outside, no FIFO or device), size, whole-file
crc32c, every record's CRCs and the record count, and the first records decoded against the
manifest's features (every record with --deep), and a shard's record index where it has one
(size, crc32c, every offset at a sound record). On object stores the crc32c that the store keeps
for every object is compared without downloading; --deep downloads and checks everything.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import functools
import os
import sys
from collections.abc import Sequence

from shardprep import cli, framing, fs, manifest, members, naming, reader, shard_reader, versions
from shardprep.display import shown
from shardprep.errors import ShardprepError
from shardprep.example import RecordError, decode_example

__all__ = ["feature_problems", "index_problems", "main", "shard_problems", "verify", "vocab_problems"]


def _stored_crc32c(info: dict) -> str | None:
    """The object store's own crc32c (GCS keeps one for every object, base64) as hex, if any."""
    value = info.get("crc32c")
    if not value:
        return None
    return base64.b64decode(value).hex() if not all(c in "0123456789abcdef" for c in str(value)) else str(value)


_KINDS = {int: "int64", float: "float32", bytes: "string"}
SAMPLE_RECORDS = 16  # records per shard decoded against the manifest's features without --deep


def feature_problems(example: dict[str, list], features: dict[str, dict]) -> list[str]:
    """How a decoded Example differs from the manifest's features (name, dtype, shape); empty if it fits."""
    out = [f"feature {name!r} is missing" for name in sorted(set(features) - set(example))
           if not features[name].get("nullable")]  # a nullable feature is left out where its value is missing
    out += [f"feature {name!r} is not in the manifest" for name in sorted(set(example) - set(features))]
    for name in sorted(set(features) & set(example)):
        values, spec = example[name], features[name]
        kinds = {_KINDS.get(type(v), type(v).__name__) for v in values}
        if kinds - {spec["dtype"]}:
            out.append(f"feature {name!r} holds {'/'.join(sorted(kinds))}, the manifest says {spec['dtype']}")
        want = 1 if spec["shape"] == [] else spec["shape"][0]
        if want != -1 and len(values) != want:
            out.append(f"feature {name!r} holds {len(values)} values, the manifest's shape {spec['shape']} needs {want}")
    return out


def _content_problems(stream: shard_reader.ShardStream, shard: manifest.ShardInfo, *, compression: str,
                      features: dict[str, dict], decode: int | None) -> list[str]:
    """Reads the records (CRCs, count) and decodes the first ``decode`` (None: all) against the features."""
    count, error, mismatch = 0, None, None
    try:
        for record in shard_reader.records(stream, compression=compression):
            if mismatch is None and (decode is None or count < decode):
                try:
                    found = feature_problems(decode_example(record), features)
                except RecordError as e:
                    found = [f"not a tf.train.Example ({e})"]
                if found:
                    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
                    mismatch = f"{shard.path}: record {count}: {found[0]}{more}"
            count += 1
    except (framing.CorruptRecordError, OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        error = f"{shard.path}: {e}"
    if not stream.drain():
        return [f"{shard.path}: longer than the manifest's {shard.num_bytes} bytes"]
    if stream.crc32c != shard.crc32c:
        return [f"{shard.path}: crc32c {stream.crc32c}, the manifest says {shard.crc32c} (the file is corrupt)"]
    if error or mismatch:
        return [error or mismatch]
    if count != shard.num_records:
        return [f"{shard.path}: {count} records, the manifest says {shard.num_records}"]
    return []


def shard_problems(root: str, shard: manifest.ShardInfo, *, compression: str, deep: bool,
                   features: dict[str, dict] | None = None, field: str = "") -> list[str]:
    """Everything wrong with one shard, one line each; empty when it is sound.

    Locally every byte and record is read (regular files inside DIR only) and the first records are
    decoded against ``features`` (all of them with ``deep``). On object stores the store's crc32c is
    compared without downloading; ``deep`` downloads and checks everything. ``field``: the manifest
    field naming the shard, in the line of a shard that is not a safe member (``shardprep.members``).
    """
    url = naming.join(root, shard.path)
    try:
        if fs.is_local(url):
            size = shard_reader.check_local(root, shard.path, field=field)
        else:  # one metadata request: size and the store's checksum, nothing downloaded
            filesystem, path = fs.filesystem(url)
            info = filesystem.info(path)
            size = int(info.get("size", -1))
    except FileNotFoundError:
        return [f"{shard.path}: missing"]
    except shard_reader.ShardReadError as e:
        return [str(e)]
    if size != shard.num_bytes:
        return [f"{shard.path}: {size} bytes, the manifest says {shard.num_bytes} (truncated or replaced)"]
    if not fs.is_local(url):
        stored = _stored_crc32c(info)
        if stored is not None and stored != shard.crc32c:
            return [f"{shard.path}: crc32c {stored} (stored), the manifest says {shard.crc32c}"]
        if stored is not None and not deep:
            return []
    try:
        with shard_reader.open_shard(root, shard.path, limit=shard.num_bytes, field=field) as stream:
            return _content_problems(stream, shard, compression=compression, features=features or {},
                                     decode=None if deep else (SAMPLE_RECORDS if features else 0))
    except FileNotFoundError:
        return [f"{shard.path}: missing"]
    except shard_reader.ShardReadError as e:
        return [str(e)]


def index_problems(root: str, shard: manifest.ShardInfo, *, deep: bool = False) -> list[str]:
    """A sound shard's record index against the manifest (size, crc32c) and the shard (every record
    the index names has its length and both CRCs right there); empty for a shard without one. On
    object stores without ``deep`` the store's crc32c of the index is compared, nothing downloaded."""
    if shard.index is None:
        return []
    path = shard.index.path
    try:
        if not deep and (found := stored_problems(root, path, size=shard.index.num_bytes, crc32c=shard.index.crc32c,
                                                  what="record index")) is not None:
            return found
        records = reader.Records(root, [shard])
        for _ in records:
            pass
        records.close()
    except FileNotFoundError:
        return [f"{path}: the record index is missing"]
    except (ShardprepError, OSError, ValueError) as e:
        return [str(e) if path in str(e) or shard.path in str(e) else f"{path}: {e}"]
    return []


def _listing_problems(root: str, m: manifest.Manifest) -> list[str]:
    """Locally: two manifest entries that are one file (hard links, symlinks), and run folders that are links."""
    if not fs.is_local(root):
        return []
    out, seen = [], {}
    for run in sorted(m.run_ids):
        if os.path.islink(naming.join(root, run)):
            out.append(f"{run}: the run folder is a symlink (to {os.path.realpath(naming.join(root, run))}): refusing it")
    for name, split in m.splits.items():
        for shard in split.shards:
            try:
                st = os.stat(naming.join(root, shard.path))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                out.append(f"{shard.path} ({name}) is the same file as {seen[key]}")
            else:
                seen[key] = f"{shard.path} ({name})"
    return out


def stored_problems(root: str, path: str, *, size: int, crc32c: str, what: str) -> list[str] | None:
    """On an object store, a file the manifest names against the store's own size and crc32c (one
    metadata request, nothing downloaded); None where that cannot decide (a local file, no stored crc32c)."""
    url = naming.join(root, path)
    if fs.is_local(url):
        return None
    filesystem, remote = fs.filesystem(url)
    try:
        info = filesystem.info(remote)
    except FileNotFoundError:
        return [f"{path}: the {what} is missing"]
    stored = _stored_crc32c(info)
    if int(info.get("size", -1)) != size or stored not in (None, crc32c):
        return [f"{path}: the {what} differs from the manifest's size and crc32c (the file was replaced)"]
    return [] if stored is not None else None


def vocab_problems(root: str, text: dict | None, *, deep: bool = False) -> list[str]:
    """A text run's vocabulary against the manifest's size and crc32c (older data sets record neither)."""
    if not text or "vocab_crc32c" not in text:
        return []
    path, size = text["vocab"], text["vocab_num_bytes"]
    if not deep and (found := stored_problems(root, path, size=size, crc32c=text["vocab_crc32c"],
                                              what="vocabulary")) is not None:
        return found
    try:
        with shard_reader.open_shard(root, path, limit=size, field="text.vocab") as stream:
            whole = stream.drain()
    except FileNotFoundError:
        return [f"{path}: the vocabulary is missing"]
    except shard_reader.ShardReadError as e:
        return [str(e)]
    if not whole or stream.num_bytes != size:
        return [f"{path}: the vocabulary is not the {size} bytes the manifest names (the file was replaced)"]
    if stream.crc32c != text["vocab_crc32c"]:
        return [f"{path}: crc32c {stream.crc32c}, the manifest says {text['vocab_crc32c']} (the vocabulary was changed)"]
    return []


def sketch_problems(root: str, m: manifest.Manifest, *, deep: bool = False) -> list[str]:
    """A statistics state the manifest names (``sketches``) that is missing or not its size and crc32c (on
    object stores without ``deep``: the store's crc32c, nothing downloaded)."""
    from shardprep.stats import state as stats_state

    out = []
    for name, info in m.sketches.items():
        if not deep and (found := stored_problems(root, info.path, size=info.num_bytes, crc32c=info.crc32c,
                                                  what="statistics state")) is not None:
            out.extend(found)
            continue
        try:
            stats_state.read(root, info, field=f"sketches.{name}")
        except FileNotFoundError:
            out.append(f"{info.path}: statistics state missing")
        except (ShardprepError, OSError) as e:
            out.append(str(e))
    return out


def hashes_problems(root: str, m: manifest.Manifest, *, deep: bool = False) -> list[str]:
    """A generation's record hashes (``--dedup exact``: ``record_hashes``) that are missing or not the
    manifest's size and crc32c (on object stores without ``deep``: the store's crc32c)."""
    from shardprep import record_hashes

    out = []
    for i, g in enumerate(m.all_generations()):
        if g.hashes is None:
            continue
        if not deep and (found := stored_problems(root, g.hashes.path, size=g.hashes.num_bytes, crc32c=g.hashes.crc32c,
                                                  what="record hashes")) is not None:
            out.extend(found)
            continue
        try:
            record_hashes.read(root, g.hashes, field=f"generations[{i}].hashes")
        except FileNotFoundError:
            out.append(f"{g.hashes.path}: record hashes missing")
        except (ShardprepError, OSError) as e:
            out.append(str(e))
    return out


def verify(root: str, *, deep: bool = False, jobs: int = 4, version: int | None = None) -> tuple[list[str], int, int]:
    """Returns (problems, shards checked, records covered) of the current manifest, or of the kept
    manifest ``version`` (``manifest.load``)."""
    m = versions.load(root, version=version)
    problems = (manifest.problems(m) + _listing_problems(root, m) + vocab_problems(root, m.text, deep=deep)
                + sketch_problems(root, m, deep=deep) + hashes_problems(root, m, deep=deep))
    shards = [s for split in m.splits.values() for s in split.shards]
    fields = [f"splits.{name}.shards[{i}].path" for name, split in m.splits.items() for i in range(len(split.shards))]
    shard_check = functools.partial(shard_problems, root, compression=m.compression, deep=deep, features=m.features)

    def check(shard: manifest.ShardInfo, **kwargs: str) -> list[str]:
        return shard_check(shard, **kwargs) or index_problems(root, shard, deep=deep)

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for found in pool.map(lambda shard, field: check(shard, field=field), shards, fields):
            problems.extend(found)
    for i, path in enumerate(m.rejected.paths):
        try:
            members.resolve_member(root, path, field=f"rejected.paths[{i}]", cap=sys.maxsize)
        except FileNotFoundError:
            problems.append(f"{path}: dead-letter file missing")
        except shard_reader.ShardReadError as e:
            problems.append(str(e))
    return problems, len(shards), sum(s.num_records for s in shards)


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.verify", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("--deep", action="store_true", help="decode every record against the features (default: the first few of each shard); "
                   "on object stores, also download and check every record")
    p.add_argument("--jobs", type=int, default=4, help="shards checked in parallel (default: %(default)s)")
    p.add_argument("--version", type=int, metavar="N", help="verify the kept manifest version N (default: the current one)")
    args = p.parse_args(argv)
    problems, n_shards, n_records = verify(args.dir, deep=args.deep, jobs=args.jobs, version=args.version)
    for line in problems:
        print(f"FAIL {shown(line)}")  # lines quote paths, feature and split names from the manifest
    if problems:
        print(f"shardprep.verify: {len(problems)} problem(s) in {shown(args.dir)}", file=sys.stderr)
        return 1
    print(f"OK {shown(args.dir)}: {n_shards} shards, {n_records:,} records verified")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.verify", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
