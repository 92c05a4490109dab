"""Statistics of a batch from its columns: ``shardprep.stats.feature_stats.FeatureStats`` with numpy and pyarrow,
no Python call per record or per value.

The columns come from where the values already are: the column-wise readers' batches
(``example.columnar.ColumnBatch``: CSV, Parquet, JSON Lines, images) or, for records that arrive as
Examples (TFRecord, TFDS, rows the per-record encoder wrote), the compiled reader
``native.example_columns``. ``add`` gives exactly what ``feature_stats.batch_stats`` (the per-record
Python decoder, the fallback where the compiled reader declines a batch or is not built) gives for
the same records: the same counts, the same exact integer sums, minima, maxima and sketch states
(``tests/shardprep/stats/test_columns.py`` checks it on random records), so the manifest does not depend on
which path read a batch.

Work per batch: a few numpy calls per dtype over all features' values at once (``reduceat``,
``bincount``, one ``LogSketch.of_many``), a few per list or string feature; strings are counted by
``pyarrow.compute.value_counts`` (a Python object per distinct value of the batch, while the
feature's exact counts are kept; once they are capped, the distinct values go straight to the
HyperLogLog through ``native.hash_values``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from shardprep import native
from shardprep.schema import FeatureSpec
from shardprep.stats import feature_stats, number_sums, sketches
from shardprep.stats.distinct import HyperLogLog, StringCounts, binary_hashes, column_hashes, distinct_of, value_offsets
from shardprep.stats.sketches import BUCKET_TABLE, Counts, LogSketch

__all__ = ["COLUMN_BYTES", "COLUMN_ROWS", "COUNTING_THREAD", "FRAMED_BATCH", "MAX_SUMMED", "Column", "Hashed", "Summed",
           "add", "add_blocks", "add_framed", "from_columnar", "from_examples", "joined", "sketched_strings", "taken"]

COUNTING_THREAD = "shardprep-statistics"  # the thread Parse and WriteShards count on (``background.Behind``)

@dataclasses.dataclass(frozen=True)
class Column:
    """One feature's values in a batch of ``n`` records: ``values`` a float32 / int64 array, or for
    strings a pyarrow binary array; ``lengths`` each record's number of values (int64, -1 where it
    leaves the feature out), None where every record holds exactly one."""

    values: Any
    lengths: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class Hashed:
    """A string feature's batch as ``native.example_columns`` gives it where its statistics keep only
    the distinct-count sketch (its partial is capped): each value's hash and its end offset as if its
    bytes were there (their sizes), no bytes copied."""

    hashes: np.ndarray  # uint64, ``distinct.column_hashes``' own
    offsets: np.ndarray  # int64, len + 1, from 0

    @classmethod
    def of_sizes(cls, hashes: np.ndarray, sizes: np.ndarray) -> Hashed:
        return cls(hashes, np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))))

    def take(self, index: np.ndarray) -> Hashed:
        return Hashed.of_sizes(self.hashes[index], np.diff(self.offsets)[index])


def _binary(offsets: np.ndarray, data: Any) -> pa.Array:
    """A zero-copy binary array over ``(offsets, data)`` (offsets need not start at 0)."""
    offsets = np.ascontiguousarray(offsets)
    kind = pa.large_binary() if offsets.dtype == np.int64 else pa.binary()
    if offsets.dtype not in (np.int64, np.int32):
        offsets, kind = offsets.astype(np.int64), pa.large_binary()
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(kind, offsets.size - 1, [None, pa.py_buffer(offsets), buffer])


def from_columnar(columns: Mapping[str, Any], features: Mapping[str, FeatureSpec],
                  hashed: frozenset[str] = frozenset()) -> dict[str, Column]:
    """The columns of ``example.columnar`` (scalars: arrays, strings as ``(offsets, data)``); the
    string features named in ``hashed`` as their hashes (``Hashed``: their bytes are not needed)."""
    return {name: Column(_hashed(*columns[name]) if name in hashed
                         else _binary(*columns[name]) if spec.dtype == "string" else columns[name])
            for name, spec in features.items()}


def _hashed(offsets: np.ndarray, data: Any) -> Hashed:
    offsets = np.asarray(offsets, np.int64)
    return Hashed(column_hashes(data, offsets), offsets - offsets[0])


@dataclasses.dataclass(frozen=True)
class Summed:
    """A number feature's batch as ``native.example_columns`` sums it while reading (no values
    copied out): exactly what ``add`` derives from the values (finite ones: their count, minimum,
    maximum, exact sums, zeros and log-bucket counts by index in ``sketches.BUCKET_TABLE.bounds``)."""

    values: int
    minimum: float | int | None
    maximum: float | int | None
    total: int
    squares: int
    zeros: int
    positive: tuple[int, bytes]  # (first bound index, int64 counts from it)
    negative: tuple[int, bytes]

    def sketch(self) -> LogSketch:
        return LogSketch(_bucket_counts(*self.positive), _bucket_counts(*self.negative), self.zeros)


def _bucket_counts(first: int, dense: bytes) -> Counts:
    counts = np.frombuffer(dense, np.int64)
    at = np.flatnonzero(counts)
    return Counts((at + (first + BUCKET_TABLE.low)).astype(np.int64), counts[at].copy()).collapse_lowest(sketches.MAX_BUCKETS)


FRAMED_BATCH = 8192  # records read into columns at a time (``add_framed``): their copies stay small
COLUMN_ROWS = 1 << 16  # column-wise rows counted at a time (``joined``): a batch's fixed cost over many rows,
COLUMN_BYTES = 32 << 20  # or fewer, of this many bytes of records (a wide table's rows)
MAX_SUMMED = 64  # number features summed by the compiled reader while reading (more: their values, numpy)


def from_examples(blob: bytes | bytearray, ends: np.ndarray, features: Mapping[str, FeatureSpec],
                  summed: bool = True, hashed: frozenset[str] = frozenset()) -> dict[str, Column] | None:
    """The columns of a framed batch of Examples (``native.example_columns``), or None where it
    declines (then ``feature_stats.batch_stats`` decodes the records). With ``summed`` (and at most
    ``MAX_SUMMED`` number features), number features come already summed (``Summed``); the string
    features named in ``hashed`` come as their hashes (``Hashed``)."""
    names = sorted(features, key=lambda name: name.encode("utf-8"))
    kinds = bytes(3 if name in hashed else native.kind_of(features[name].dtype) for name in names)
    numbers = sum(1 for kind in kinds if kind in (1, 2))
    extra = BUCKET_TABLE if summed and 0 < numbers <= MAX_SUMMED else ()
    got = native.example_columns(blob, np.ascontiguousarray(ends, np.uint64),
                                 tuple(name.encode("utf-8") for name in names), kinds, *extra)
    if got is None:
        return None
    lengths = np.frombuffer(got[0], np.int64).reshape(len(ends), len(names)).T  # [feature][record]: views
    out = {}
    for f, (name, values) in enumerate(zip(names, got[1])):
        dtype = features[name].dtype
        if name in hashed:
            column: Any = Hashed(np.frombuffer(values[0], np.uint64), np.frombuffer(values[1], np.int64))
        elif dtype == "string":
            data, offsets = values
            column = _binary(np.frombuffer(offsets, np.int64), data)
        elif extra:
            column = _summed_of(values)
        else:
            column = np.frombuffer(values, np.float32 if dtype == "float32" else np.int64)
        out[name] = Column(column, lengths[f])
    return out


def add_framed(into: MutableMapping[str, feature_stats.FeatureStats], blob: bytes | bytearray | np.ndarray,
               ends: np.ndarray, features: Mapping[str, FeatureSpec]) -> None:
    """Adds framed Examples (record ``i`` ends at ``ends[i]``) to ``into``: the compiled reader's
    columns, ``FRAMED_BATCH`` records at a time, else Python's decoder."""
    view = memoryview(blob).cast("B")
    for lo in range(0, len(ends), FRAMED_BATCH):
        start = int(ends[lo - 1]) if lo else 0
        part = np.asarray(ends[lo:lo + FRAMED_BATCH], np.uint64) - np.uint64(start)
        piece = view[start:int(ends[min(lo + FRAMED_BATCH, len(ends)) - 1])]
        columns = from_examples(piece, part, features, hashed=sketched_strings(into, features))
        if columns is not None:
            add(into, columns, features, len(part))
            continue
        starts = [0, *part[:-1].tolist()]
        feature_stats.merge(into, feature_stats.batch_stats([piece[a + 12:b - 4] for a, b in zip(starts, part.tolist())], features))


def sketched_strings(into: Mapping[str, feature_stats.FeatureStats], features: Mapping[str, FeatureSpec]) -> frozenset[str]:
    """The string features whose partial in ``into`` keeps only the distinct-count sketch (capped):
    a batch needs their values' hashes only (``Hashed``)."""
    return frozenset(name for name, s in into.items() if features[name].dtype == "string" and s.counts is None)


def add_blocks(partial: dict[int, dict], blocks: Sequence[tuple[Mapping[str, Any], np.ndarray | None, int]],
               split: int, features: Mapping[str, FeatureSpec]) -> None:
    """Adds column-wise blocks (each: ``example.columnar``'s columns, its records' splits or None, its
    number of records) to ``partial`` (split -> feature -> statistics) as one batch: all to ``split``,
    or each record to its split. A string feature whose partial keeps only its sketch (capped), or
    whose records of a split in these blocks alone are over the caps (``feature_stats.over_cap``:
    ``cap`` would drop their counts), comes as its hashes (``Hashed``): its bytes are neither joined
    nor cut by split (a long text column: hashed once, where it lies)."""
    which = None if blocks[0][1] is None else np.concatenate([w for _, w, _ in blocks])
    splits = [split] if which is None else np.flatnonzero(np.bincount(which)).tolist()
    capped = {s: sketched_strings(partial.get(s, {}), features) for s in splits}
    hashes: dict[str, Column] = {}
    for name in _may_cap(blocks, which, capped, features):
        hashes.update(joined([from_columnar(c, {name: features[name]}, frozenset([name])) for c, _, _ in blocks]))
        for s in splits:
            if name not in capped[s] and feature_stats.over_cap(*_distinct(hashes[name].values.take(which == s))):
                capped[s] = capped[s] | {name}
    hashed = frozenset().union(*capped.values())
    exact = {name: spec for name, spec in features.items() if any(name not in capped[s] for s in splits)}
    columns = joined([from_columnar(c, exact) for c, _, _ in blocks])
    rest = {name: features[name] for name in hashed if name not in hashes}
    hashes.update(joined([from_columnar(c, rest, hashed) for c, _, _ in blocks]))
    for s in splits:
        mine = {**columns, **{name: hashes[name] for name in capped[s]}}
        if len(splits) == 1:
            add(partial.setdefault(s, {}), mine, features, sum(n for _, _, n in blocks))
        else:
            index = np.flatnonzero(which == s)
            add(partial.setdefault(s, {}), taken(mine, index), features, len(index))


def _may_cap(blocks: Sequence[tuple[Mapping[str, Any], np.ndarray | None, int]], which: np.ndarray | None,
             capped: Mapping[int, frozenset[str]], features: Mapping[str, FeatureSpec]) -> list[str]:
    """The string features, of blocks cut by split, not capped in some split whose values in the
    blocks are over the caps' bytes or count: those that a split's records alone may cap."""
    if which is None:  # one split: ``_strings`` tests the batch by its hashes, with no copy
        return []
    return [name for name, spec in features.items() if spec.dtype == "string"
            and not all(name in capped[s] for s in capped)
            and (which.size > feature_stats.MAX_DISTINCT
                 or sum(int(c[name][0][-1] - c[name][0][0]) for c, _, _ in blocks) > feature_stats.MAX_HELD_BYTES)]


def _distinct(values: Hashed) -> tuple[int, int, int]:
    """``feature_stats.over_cap``'s arguments of strings given by their hashes."""
    sizes = np.diff(values.offsets)
    distinct, held = distinct_of(values.hashes, sizes)
    return distinct.size, int(sizes.sum()), held


def joined(batches: Sequence[Mapping[str, Column]]) -> dict[str, Column]:
    """Batches of scalar columns (``from_columnar``) as one, their records back to back."""
    if len(batches) == 1:
        return dict(batches[0])
    out = {}
    for name in batches[0]:
        parts = [batch[name].values for batch in batches]
        if isinstance(parts[0], Hashed):
            out[name] = Column(Hashed.of_sizes(np.concatenate([p.hashes for p in parts]),
                                               np.concatenate([np.diff(p.offsets) for p in parts])))
        elif isinstance(parts[0], pa.Array):  # strings: their pieces (``_strings`` joins them only where small)
            if len({part.type for part in parts}) > 1:  # binary and large_binary (32- and 64-bit offsets)
                parts = [part.cast(pa.large_binary()) for part in parts]
            out[name] = Column(pa.chunked_array(parts))
        else:
            out[name] = Column(np.concatenate(parts))
    return out


def taken(columns: Mapping[str, Column], index: np.ndarray) -> dict[str, Column]:
    """The records at ``index`` (int64, in its order) of scalar columns (the column-wise readers'
    batches, cut by split)."""
    at = pa.array(index)
    return {name: Column(_take_chunks(c.values, index) if isinstance(c.values, pa.ChunkedArray)
                         else c.values.take(at) if isinstance(c.values, pa.Array) else c.values.take(index)
                         if isinstance(c.values, Hashed) else c.values[index])
            for name, c in columns.items()}


def _take_chunks(values: pa.ChunkedArray, index: np.ndarray) -> pa.ChunkedArray:
    """``values.take(index)``, chunk by chunk where ``index`` rises: a split's few records of a long
    text column's pieces, taken without joining all the pieces first (as pyarrow's take does)."""
    if index.size > 1 and not (index[1:] > index[:-1]).all():
        return values.take(pa.array(index))
    bounds = np.cumsum([0] + [len(chunk) for chunk in values.chunks])
    cuts = np.searchsorted(index, bounds).tolist()
    return pa.chunked_array([chunk.take(pa.array(index[a:b] - lo)) for chunk, lo, a, b
                             in zip(values.chunks, bounds.tolist(), cuts, cuts[1:]) if b > a], values.type)


def add(into: MutableMapping[str, feature_stats.FeatureStats], columns: Mapping[str, Column],
        features: Mapping[str, FeatureSpec], n: int) -> None:
    """Adds a batch of ``n`` records, given by its columns, to ``into`` (``feature_stats.merge``)."""
    batch = {name: feature_stats.FeatureStats() for name in features}
    numbers: dict[str, list[tuple[feature_stats.FeatureStats, np.ndarray]]] = {"int64": [], "float32": []}
    for name, spec in features.items():
        s, column = batch[name], columns[name]
        _presence(s, spec, column.lengths, n)
        if spec.dtype == "string":
            prior = into.get(name)
            _strings(s, column.values, capped=prior is not None and prior.counts is None)
        elif isinstance(column.values, Summed):
            _summed(s, column.values)
        else:
            numbers[spec.dtype].append((s, np.asarray(column.values)))
    ints = [(s, x.astype(np.int64, copy=False)) for s, x in numbers["int64"]]
    floats = [(s, x.astype(np.float32, copy=False)) for s, x in numbers["float32"]]
    if 0 < len(ints) + len(floats) <= MAX_SUMMED and _sum_columns(ints, floats):
        ints = floats = []  # summed in one compiled pass each
    if floats and not np.isfinite(np.concatenate([x for _, x in floats])).all():  # as stats: NaN, inf left out
        floats = [(s, x if np.isfinite(x).all() else x[np.isfinite(x)]) for s, x in floats]
    number_sums.int_sums(ints)
    number_sums.float_sums(floats)
    sketched = ints + floats
    for (s, _), sketch in zip(sketched, LogSketch.of_many([x for _, x in sketched])):  # one float64 copy of all
        s.sketch = sketch
    later = {name: s for name, s in batch.items() if name in into}
    into.update((name, s) for name, s in batch.items() if name not in into)  # this batch's own objects: taken as they are
    feature_stats.merge(into, later)


def _sum_columns(ints: list[tuple[feature_stats.FeatureStats, np.ndarray]],
                 floats: list[tuple[feature_stats.FeatureStats, np.ndarray]]) -> bool:
    """The number columns summed by ``native.sum_numbers`` (one pass each, as ``from_examples``
    sums them while reading); False, nothing changed, where it declines (its Python twin)."""
    got = []
    for kind, items in ((2, ints), (1, floats)):
        for s, x in items:
            summed = native.sum_numbers(np.ascontiguousarray(x), kind, *BUCKET_TABLE)
            if summed is None:
                return False
            got.append((s, summed))
    for s, summed in got:
        _summed(s, _summed_of(summed))
    return True


def _summed_of(values: tuple) -> Summed:
    """The ``Summed`` of a tuple of ``native.example_columns`` / ``sum_numbers``."""
    count, lo, hi, pos, neg, squares, zeros, positive, negative = values
    return Summed(count, lo, hi, int.from_bytes(pos, "little") - int.from_bytes(neg, "little"),
                  int.from_bytes(squares, "little"), zeros, positive, negative)


def _summed(s: feature_stats.FeatureStats, x: Summed) -> None:
    """What ``number_sums.int_sums`` / ``float_sums`` and ``LogSketch.of_many`` give for the values ``x`` sums."""
    if x.values:
        s.values, s.minimum, s.maximum, s.total, s.squares = x.values, x.minimum, x.maximum, x.total, x.squares
    s.sketch = x.sketch()


def _presence(s: feature_stats.FeatureStats, spec: FeatureSpec, lengths: np.ndarray | None, n: int) -> None:
    if lengths is None:
        s.count = n
        have = np.ones(n, np.int64) if spec.shape != () else None
    elif spec.shape == ():  # a count is all a scalar needs
        s.count = int(np.count_nonzero(lengths >= 0))
        s.missing = n - s.count
    else:
        have = lengths[lengths >= 0]
        s.count = int(have.size)
        s.missing = n - s.count
    if spec.shape != () and s.count:
        s.length_min, s.length_max = int(have.min()), int(have.max())
        s.lengths = Counts.of(have)
        if len(s.lengths) > feature_stats.MAX_LENGTHS:
            s.lengths = LogSketch.of_counts(s.lengths)


def _strings(s: feature_stats.FeatureStats, values: pa.Array | pa.ChunkedArray | Hashed, capped: bool) -> None:
    """Lengths, exact counts (or, past the cap or where ``into`` is already capped, the HyperLogLog).
    Values in pieces (``joined``) are kept in pieces where the batch is over the cap's bytes (its
    test hashes them where they are: a long text column is not copied), else joined."""
    pieces = [] if isinstance(values, Hashed) else [piece for piece in getattr(values, "chunks", [values]) if len(piece)]
    sizes = np.diff(values.offsets) if isinstance(values, Hashed) else np.concatenate(
        [np.diff(value_offsets(piece)) for piece in pieces] or [np.zeros(0, np.int64)])
    if not sizes.size:
        return
    s.strings = int(sizes.size)
    s.bytes_total, s.bytes_min, s.bytes_max = int(sizes.sum()), int(sizes.min()), int(sizes.max())
    if capped or isinstance(values, Hashed):  # the partial holds no counts any more: the values straight to the sketch
        hashes = values.hashes if isinstance(values, Hashed) else np.concatenate([binary_hashes(p) for p in pieces])
        s.counts, s.hll = None, HyperLogLog.of_hashes(hashes)
        return
    if len(pieces) > 1 and s.bytes_total <= feature_stats.MAX_HELD_BYTES:
        pieces = [pa.concat_arrays(pieces)]  # one part for the batch: as many parts to merge as batches
    s.counts = StringCounts.pending(pieces)  # counted with the partial's other parts, when they near the cap
    feature_stats.cap(s)
