"""A split's mergeable statistics state (``feature_stats.FeatureStats`` by feature) as bytes, and back.

A run keeps it beside its shards (``DIR/<run>/statistics/<split>.sketch``, named by the manifest's
``sketches``), so that an append merges the data set's state with its own records' and writes the
statistics of every record (``shardprep.generations``) without reading the old shards: counts,
missing, min/max, exact sums (mean, std), the number sketches (quantiles, histograms, zeros), list
lengths, exact string counts or their HyperLogLog. Every merge is the one ``feature_stats.merge`` makes
inside a run, so the merged statistics are those a single run over all records computes.

The file is a NumPy ``.npz`` (a zip of arrays, read with ``allow_pickle=False``: never code) whose
``meta`` array holds the scalars as JSON; Python's exact integer sums are kept as decimal strings.
"""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa

from shardprep import fs, members, naming, record_index
from shardprep.errors import ManifestError
from shardprep.manifest import SketchInfo
from shardprep.stats.distinct import HyperLogLog, StringCounts
from shardprep.stats.feature_stats import FeatureStats
from shardprep.stats.sketches import Counts, LogSketch

__all__ = ["dumps", "loads", "read", "write"]

_SCALARS = ("count", "missing", "values", "minimum", "maximum", "length_min", "length_max", "strings",
            "bytes_total", "bytes_min", "bytes_max")
FORMAT = "shardprep.sketches/1"


def _counts(arrays: dict[str, np.ndarray], key: str, c: Counts) -> None:
    arrays[f"{key}.k"], arrays[f"{key}.c"] = np.asarray(c.keys, np.int64), np.asarray(c.counts, np.int64)


def _get_counts(z: Any, key: str) -> Counts:
    return Counts(np.asarray(z[f"{key}.k"], np.int64), np.asarray(z[f"{key}.c"], np.int64))


def _sketch(arrays: dict[str, np.ndarray], key: str, s: LogSketch) -> int:
    _counts(arrays, f"{key}.p", s.positive)
    _counts(arrays, f"{key}.n", s.negative)
    return s.zeros


def _get_sketch(z: Any, key: str, zeros: int) -> LogSketch:
    return LogSketch(_get_counts(z, f"{key}.p"), _get_counts(z, f"{key}.n"), zeros)


def dumps(stats: dict[str, FeatureStats]) -> bytes:
    """The state of one split's statistics, by feature name."""
    meta: dict[str, Any] = {"format": FORMAT, "features": []}
    arrays: dict[str, np.ndarray] = {}
    for i, name in enumerate(sorted(stats)):
        s = stats[name]
        doc: dict[str, Any] = {"name": name, **{k: getattr(s, k) for k in _SCALARS},
                               "total": str(s.total), "squares": str(s.squares)}
        if s.counts is not None:
            values, counts = s.counts.values, s.counts.counts
            values = values.cast(pa.large_binary()) if values.type != pa.large_binary() else values
            offsets = (np.frombuffer(values.buffers()[1], np.int64)[values.offset:values.offset + len(values) + 1]
                       if len(values) else np.zeros(1, np.int64))
            data = np.frombuffer(values.buffers()[2], np.uint8) if len(values) else np.zeros(0, np.uint8)
            arrays[f"{i}.so"] = np.asarray(offsets - offsets[0], np.int64)
            arrays[f"{i}.sv"] = data[offsets[0]:offsets[-1]]
            arrays[f"{i}.sc"] = np.asarray(counts, np.int64)
            doc["strings_counted"] = True
        if s.sketch is not None:
            doc["sketch_zeros"] = _sketch(arrays, f"{i}.q", s.sketch)
        if isinstance(s.lengths, Counts):
            _counts(arrays, f"{i}.l", s.lengths)
            doc["lengths"] = "counts"
        elif isinstance(s.lengths, LogSketch):
            doc["lengths"], doc["lengths_zeros"] = "sketch", _sketch(arrays, f"{i}.l", s.lengths)
        if s.hll is not None:
            arrays[f"{i}.h"] = np.asarray(s.hll.registers, np.uint8)
        meta["features"].append(doc)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def loads(data: bytes) -> dict[str, FeatureStats]:
    """``dumps``'s state back; ``ValueError`` for bytes that are not one."""
    try:
        z = np.load(io.BytesIO(data), allow_pickle=False)
        meta = json.loads(bytes(z["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"not a statistics state ({type(e).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError("not a statistics state (format)")
    out = {}
    for i, doc in enumerate(meta["features"]):
        s = FeatureStats(**{k: doc[k] for k in _SCALARS}, total=int(doc["total"]), squares=int(doc["squares"]),
                         counts=None)
        if doc.get("strings_counted"):
            offsets, data_ = np.asarray(z[f"{i}.so"], np.int64), np.asarray(z[f"{i}.sv"], np.uint8)
            values = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                                      [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data_.tobytes())])
            counts = StringCounts.__new__(StringCounts)
            counts.__setstate__((values, np.asarray(z[f"{i}.sc"], np.int64)))
            s.counts = counts
        if "sketch_zeros" in doc:
            s.sketch = _get_sketch(z, f"{i}.q", doc["sketch_zeros"])
        if doc.get("lengths") == "counts":
            s.lengths = _get_counts(z, f"{i}.l")
        elif doc.get("lengths") == "sketch":
            s.lengths = _get_sketch(z, f"{i}.l", doc["lengths_zeros"])
        if f"{i}.h" in z.files:
            s.hll = HyperLogLog(np.asarray(z[f"{i}.h"], np.uint8))
        out[doc["name"]] = s
    return out


def write(root: str, run_id: str, split: str, stats: dict[str, FeatureStats]) -> SketchInfo:
    """Stores a split's state in the run's folder (atomically; replacing an earlier one); returns its entry."""
    data = dumps(stats)
    path = naming.sketch_path(run_id, split)
    with fs.write_atomic(naming.join(root, path)) as f:
        f.write(data)
    return SketchInfo(path, len(data), record_index.crc32c_hex(data))


def read(root: str, info: SketchInfo, *, field: str) -> dict[str, FeatureStats]:
    """A state the manifest names (``field``: where), checked against its size and crc32c."""
    data = members.read_member(root, info.path, field=field, size=info.num_bytes)
    if len(data) != info.num_bytes or record_index.crc32c_hex(data) != info.crc32c:
        raise ManifestError(f"{naming.join(root, info.path)} ({field}) is not the file the manifest names: its size "
                            f"or crc32c differs; run python -m shardprep.verify {root}")
    try:
        return loads(data)
    except ValueError as e:
        raise ManifestError(f"{naming.join(root, info.path)} ({field}): {e}") from None
