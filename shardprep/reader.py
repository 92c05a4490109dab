"""Random access to a data set's records without TensorFlow: ``open(data_dir, split)``.

``open`` returns a ``Records``: a sequence over the split's records in the data set's global order
(the manifest's shard order, then record order within a shard) with ``len()``, ``[i]``, slices and
``read(indices)``. A record is its ``tf.train.Example`` bytes, both TFRecord CRCs checked (a damaged
record raises ``DamagedRecordError``, one line naming the shard and the byte offset), or with
``parsed=True`` a dict of numpy arrays by the manifest's features. ``Records`` is grain's
``RandomAccessDataSource`` (``__len__``, ``__getitem__``) and pickles without its open files, so
grain's worker processes each open their own.

Where each record starts comes from the shard's record index (``record_index``; its size and crc32c
checked against the manifest), or, for a data set written before indexes (``python -m
shardprep.index DIR`` adds them), from one scan of the shard's headers on first use. gzip shards
cannot be read at random: ``open`` refuses them in one line.

``read(indices)`` reads each contiguous run of a shard's records with one ranged read: a slice of a
memory map locally (and on NFS), one ranged GET per run on ``gs://`` (fsspec's ``cat_ranges``).
Iteration reads each shard in order, ``_CHUNK`` bytes of whole records a read.

The checks cost little: a run of records (iteration, or ``read`` of neighbours) has both CRCs of
every record checked in one call of the compiled ``native.scan``, whose frames must be exactly the
index's; a single record has its data CRC computed on its bytes (``google_crc32c``), and its
12-byte header (length and the length's masked CRC) compared with headers already checked, so the
length's CRC is computed once per distinct header (a bounded memo), not once per read.
"""
from __future__ import annotations

import mmap
import operator
import os
import stat
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

import google_crc32c
import numpy as np

from shardprep import framing, fs, manifest, members, naming, native, record_index, versions
from shardprep.errors import ManifestError, ShardprepError, UsageError
from shardprep.example import RecordError, decode_example

__all__ = ["DamagedRecordError", "NotRandomAccessError", "Records", "open"]

_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_crc = google_crc32c.value
_CHUNK = 16 << 20  # bytes of one shard read at a time by a pass in order (and one ranged GET on gs://)
_RUN = 8  # a contiguous run of at least this many records has its CRCs checked in one native.scan
_HEADS_MAX = 1 << 16
_heads: dict[bytes, int] = {}  # a record header (length and its masked CRC, 12 bytes) already checked -> length
_DTYPES = {"int64": np.int64, "float32": np.float32, "string": object}


class DamagedRecordError(ShardprepError, ValueError):
    """A record whose TFRecord framing fails its checks; the message names the shard and byte offset."""

    def __init__(self, shard: str, offset: int, reason: str) -> None:
        super().__init__(f"{shard}: the record at byte {offset} is damaged ({reason}): the shard is corrupt; "
                         "python -m shardprep.verify names every problem")
        self.shard = shard
        self.offset = offset


class NotRandomAccessError(UsageError):
    """A data set whose shards cannot be read at random (gzip)."""


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def open(data_dir: str, split: str, *, parsed: bool = False, run_id: str | None = None,  # noqa: A001
         version: int | None = None) -> Records:
    """The records of ``split`` of the data set at ``data_dir`` (local, NFS or ``gs://``).

    ``parsed``: items are dicts of numpy arrays by the manifest's features rather than bytes.
    ``run_id``: read that committed run's manifest copy (``manifest.load``), so a reader that must not
    switch data sets mid-way (an elastic resume) reads the one it started with; ``version``: the kept
    manifest version of that number (an appended data set's earlier one). Raises
    ``ManifestError`` for a missing split or version and ``NotRandomAccessError`` for gzip shards.
    """
    m = versions.load(data_dir, run_id=run_id, version=version)
    if split not in m.splits:
        raise ManifestError(f"{data_dir} has no split {split!r} (its splits: {', '.join(sorted(m.splits))})")
    if m.compression != "none":
        raise NotRandomAccessError(f"{data_dir}: its shards are {m.compression}-compressed and cannot be read at random; "
                                   "re-shard with --compression none, or read them in order with tf.data")
    return Records(data_dir, m.splits[split].shards, features=m.features if parsed else None)


class _Shard:
    """One shard's open file and offsets, made on first use (and again after unpickling)."""

    def __init__(self, root: str, info: manifest.ShardInfo) -> None:
        self.info = info
        self.url = naming.join(root, info.path)
        self.local = fs.is_local(self.url)
        self.view: mmap.mmap | None = None
        self.remote: tuple[Any, str] | None = None
        if self.local:
            self.view = _map_member(root, info.path, info.num_bytes) if info.num_bytes else None
        else:
            self.remote = fs.filesystem(self.url)
        self.offsets = array("Q", _offsets(root, info, self).tobytes())

    def ranges(self, spans: Sequence[tuple[int, int]]) -> list[bytes | memoryview]:
        """The bytes of each ``[start, end)`` of the shard: slices of the map, or one ranged GET each."""
        if self.view is not None:
            view = self.view
            return [view[s:e] for s, e in spans]
        if not spans or self.remote is None:
            return [b"" for _ in spans]
        filesystem, path = self.remote
        if len(spans) == 1:
            return [filesystem.cat_file(path, start=spans[0][0], end=spans[0][1])]
        return filesystem.cat_ranges([path] * len(spans), [s for s, _ in spans], [e for _, e in spans])

    def close(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None


def _map_member(root: str, path: str, size: int) -> mmap.mmap:
    """A read-only map of the local data set file ``root/path`` after ``members``' checks (a regular
    file inside the folder: no link outside, no FIFO or device), of exactly ``size`` bytes."""
    url = members.resolve_member(root, path, field="shard", size=size).url
    fd = os.open(fs.local_path(url), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise members.MemberError(f"{path}: {st.st_size} bytes, the manifest says {size} (truncated or replaced)")
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _offsets(root: str, info: manifest.ShardInfo, shard: _Shard) -> np.ndarray:
    """The shard's record offsets: its index, checked against the manifest, or a scan of the shard."""
    if info.index is not None:
        data = members.read_member(root, info.index.path, field="shard index", size=info.index.num_bytes)
        if len(data) != info.index.num_bytes or record_index.crc32c_hex(data) != info.index.crc32c:
            raise ManifestError(f"{info.index.path}: the record index does not match the manifest's size and crc32c "
                                "(it was changed or damaged)")
        offsets = record_index.decode(data, what=info.index.path)
    elif shard.view is not None:
        try:
            offsets = record_index.scan_bytes(shard.view)
        except record_index.IndexFormatError as e:
            raise DamagedRecordError(info.path, e.offset, str(e)) from None
    elif info.num_bytes == 0:
        offsets = np.zeros(1, "<u8")
    else:  # an unindexed remote shard: read once, in order (python -m shardprep.index avoids this)
        with members.open_member(root, info.path, field="shard", size=info.num_bytes) as stream:
            try:
                offsets = record_index.scan(stream)
            except framing.CorruptRecordError as e:
                raise DamagedRecordError(info.path, e.offset, e.reason) from None
    try:
        record_index.check(offsets, num_records=info.num_records, num_bytes=info.num_bytes,
                           what=info.index.path if info.index else info.path)
    except record_index.IndexFormatError as e:
        raise ManifestError(str(e)) from None
    return offsets


class Records(Sequence):
    """A split's records in global order (see the module's docstring); build it with ``open``."""

    def __init__(self, root: str, shards: Sequence[manifest.ShardInfo], *,
                 features: dict[str, dict] | None = None) -> None:
        self._root = root
        self._infos = tuple(shards)
        self._features = features
        self._starts = [0]
        for info in self._infos:
            self._starts.append(self._starts[-1] + info.num_records)
        self._open: list[_Shard | None] = [None] * len(self._infos)

    def __len__(self) -> int:
        return self._starts[-1]

    def __repr__(self) -> str:
        return f"shardprep.reader.Records({self._root!r}, {len(self._infos)} shards, {len(self)} records)"

    def __getstate__(self) -> dict:  # pickled for grain's workers: no maps or connections
        return {**self.__dict__, "_open": [None] * len(self._infos)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def close(self) -> None:
        """Closes the shards' maps (a later read opens them again)."""
        for shard in self._open:
            if shard is not None:
                shard.close()
        self._open = [None] * len(self._infos)

    def _shard(self, s: int) -> _Shard:
        shard = self._open[s]
        if shard is None:
            shard = self._open[s] = _Shard(self._root, self._infos[s])
        return shard

    def __getitem__(self, i: Any) -> Any:
        if type(i) is not int:
            if isinstance(i, slice):
                return self.read(range(*i.indices(len(self))))
            i = operator.index(i)
        starts = self._starts
        n = starts[-1]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} is outside [0, {n})")
        s = bisect_right(starts, i) - 1
        shard = self._open[s] or self._shard(s)
        offsets = shard.offsets
        k = i - starts[s]
        start, end = offsets[k], offsets[k + 1]
        view = shard.view
        frame = view[start:end] if view is not None else shard.ranges([(start, end)])[0]
        if _heads.get(frame[:12]) == end - start - 16:  # _data's checks inline, for a header checked before
            record = frame[12:-4]
            crc = _crc(record)
            if (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF != _U32.unpack_from(frame, end - start - 4)[0]:
                record = _data(frame, shard.info.path, start)  # raises DamagedRecordError
        else:
            record = _data(frame, shard.info.path, start)
        return record if self._features is None else self._parse(record, shard.info.path, start)

    def read(self, indices: Any) -> list:
        """The records at ``indices`` (global, any order, repeats allowed), in that order: each
        contiguous run of one shard's records is one ranged read."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            bad = int(idx[(idx < -n) | (idx >= n)][0])
            raise IndexError(f"record {bad} is outside [0, {n})")
        idx = np.where(idx < 0, idx + n, idx)
        out: list = [None] * len(idx)
        order = np.argsort(idx, kind="stable")
        ordered = idx[order]
        starts = np.asarray(self._starts, np.int64)
        shard_of = np.searchsorted(starts, ordered, side="right") - 1
        cuts = np.flatnonzero(np.diff(shard_of)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ordered)]):
            s = int(shard_of[lo])
            self._read_shard(s, ordered[lo:hi] - starts[s], order[lo:hi], out)
        return out

    def _read_shard(self, s: int, local: np.ndarray, places: np.ndarray, out: list) -> None:
        shard = self._shard(s)
        offsets, path = shard.offsets, shard.info.path
        unique = np.unique(local)
        breaks = np.flatnonzero(np.diff(unique) != 1) + 1
        firsts = unique[np.concatenate(([0], breaks))]
        lasts = unique[np.concatenate((breaks - 1, [len(unique) - 1]))]
        table = np.frombuffer(offsets, "<u8")
        span_starts, span_ends = table[firsts].tolist(), table[lasts + 1].tolist()
        records: dict[int, Any] = {}
        parse = self._features is not None
        blobs = shard.ranges(list(zip(span_starts, span_ends)))
        for first, last, span_start, blob in zip(firsts.tolist(), lasts.tolist(), span_starts, blobs):
            if first == last:
                record = _data(blob, path, span_start)
                records[first] = self._parse(record, path, span_start) if parse else record
                continue
            bounds = (table[first:last + 2] - span_start).tolist()
            for k, bound, record in zip(range(first, last + 1), bounds, _run(blob, bounds, path, span_start)):
                records[k] = self._parse(record, path, span_start + bound) if parse else record
        for k, place in zip(local.tolist(), places.tolist()):
            out[place] = records[k]

    def __iter__(self) -> Iterator:
        """Every record in order, a shard at a time, ``_CHUNK`` bytes of whole records a read."""
        for s in range(len(self._infos)):
            shard = self._shard(s)
            offsets, path = shard.offsets, shard.info.path
            table = np.frombuffer(offsets, "<u8")
            k, n = 0, len(offsets) - 1
            while k < n:
                start = offsets[k]
                j = max(bisect_right(offsets, start + _CHUNK) - 1, k + 1)
                end = offsets[j]
                blob = shard.view[start:end] if shard.view is not None else shard.ranges([(start, end)])[0]
                bounds = (table[k:j + 1] - start).tolist()
                if self._features is None:
                    yield from _run(blob, bounds, path, start)
                else:
                    for bound, record in zip(bounds, _run(blob, bounds, path, start)):
                        yield self._parse(record, path, start + bound)
                k = j

    def _parse(self, record: bytes, path: str, offset: int) -> dict[str, np.ndarray]:
        try:
            values = decode_example(record)
        except RecordError as e:
            raise DamagedRecordError(path, offset, f"not a tf.train.Example: {e}") from None
        return {name: _array(values.get(name, []), spec) for name, spec in self._features.items()}


def _array(values: list, spec: dict) -> np.ndarray:
    """A feature's values as the manifest's dtype and shape ([] a scalar, [k] k values, [-1] any number)."""
    dtype = _DTYPES[spec["dtype"]]
    if spec["shape"] == [] and len(values) == 1:
        return np.asarray(values[0], dtype=dtype)
    return np.asarray(values, dtype=dtype)


def _data(frame: bytes, path: str, offset: int) -> bytes:
    """The data of the framed record ``frame`` (its exact bytes by the index: header, data, footer),
    which starts at byte ``offset`` of the shard ``path``, after its framing and both CRC checks
    (``DamagedRecordError`` otherwise). A header equal byte for byte to one whose CRC was checked
    before is not hashed again (``_heads``)."""
    length = _heads.get(frame[:12])
    if length is None:
        length = _header(frame, path, offset)
    if length != len(frame) - 16:
        raise DamagedRecordError(path, offset, f"its length field says {length} bytes, the index {len(frame) - 16}")
    data = frame[12:-4]
    crc = _crc(data)
    if (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF != _U32.unpack_from(frame, length + 12)[0]:
        raise DamagedRecordError(path, offset, f"its {length} data bytes fail their CRC")
    return data if type(data) is bytes else bytes(data)


def _header(frame: bytes, path: str, offset: int) -> int:
    """The length in the header of ``frame`` after its CRC check, remembered in ``_heads`` (bounded)."""
    try:
        length, length_crc = _HEADER.unpack_from(frame)
    except struct.error:
        raise DamagedRecordError(path, offset, "the shard ends inside it") from None
    if _mask(_crc(frame[:8])) != length_crc:
        raise DamagedRecordError(path, offset, "its length fails its CRC")
    if len(_heads) < _HEADS_MAX:
        _heads[bytes(frame[:12])] = length
    return length


def _run(blob: bytes, bounds: list[int], path: str, base: int) -> list[bytes]:
    """The data of the contiguous records ``blob[bounds[i]:bounds[i + 1]]`` (``blob`` starts at byte
    ``base`` of the shard ``path``), each after its framing and both CRC checks: a run of ``_RUN`` or more
    in one ``native.scan`` whose frames must be exactly the index's, else (or on any doubt) record by
    record through ``_data``, which names the damaged one."""
    if len(bounds) > _RUN and len(blob) == bounds[-1] and bounds[0] == 0:
        stop, why, found, status = native.scan(blob, 0, ())
        if (why == 0 and stop == len(blob) and 2 not in status
                and found == np.asarray(bounds[:-1], "<i8").tobytes()):
            return [blob[a + 12:b - 4] for a, b in zip(bounds, bounds[1:])]
    return [_data(blob[a:b], path, base + a) for a, b in zip(bounds, bounds[1:])]
