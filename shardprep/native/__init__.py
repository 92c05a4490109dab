"""The compiled hot path (``_native``, a C extension) or its exactly equivalent Python twin (``fallback``).

Functions: ``crc32c``, ``blake2b8`` (the split hash), ``split_indices`` (a batch of records -> split
numbers), ``scan`` (whole TFRecord frames of a buffer, with their CRC status and whether each Example
conforms to the schema, so that it can pass through as it is) and ``conforms``; and the layout
steps of the column-wise encoder and the shard writer: ``interleave`` (records built from one piece
of every column each), ``fill_data_crcs`` (framed records' data CRCs, written in place), ``gather``
(a packed batch's records in a given order) and ``scatter`` (pieces of one buffer, each to its
place in another); ``pread_records`` (byte ranges of an open file, back to back, without mapping it);
``line_counts`` (the quote and newline bytes of a block, for cutting CSV and JSON Lines);
``jsonl_columns`` (a block of JSON Lines -> columns, where provably exact; its twin declines
every block, leaving it to the per-line path); ``decode_example`` (a tf.train.Example as {name:
[values]}, or None where ``example.decoder`` would refuse it; its twin declines every record);
``example_columns`` (a framed batch of Examples -> per-feature values and per-record lengths,
number features already summed and capped strings as their hashes, for ``shardprep.stats.columns``;
its twin declines every batch), ``sum_numbers`` (a number column's count, min, max, exact sums and
log-bucket counts; its twin declines every column), ``hash_values`` (the distinct-count sketch's
64-bit hash of each value of a column) and ``minhash`` (MinHash signatures of a batch of texts: ``text.minhash``;
its twin declines every batch); ``feistel`` (the shuffle's keyed permutation, or its
inverse, in place: ``shardprep.permutation``).
``NATIVE`` says which one loaded: an install without a C compiler still works, more slowly.
``SHARDPREP_NATIVE=0`` in the environment forces the fallback (benchmarks, tests).
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

from shardprep.schema import Schema

__all__ = ["CONFORMS", "CRC_BAD", "NATIVE", "REENCODE", "blake2b8", "conforms", "crc32c", "decode_example",
           "example_columns", "example_spec", "feistel", "fill_data_crcs", "gather", "hash_values",
           "interleave", "jsonl_columns", "kind_of", "line_counts", "minhash", "pread_records", "scan", "scatter",
           "split_indices", "sum_numbers"]

CONFORMS, REENCODE, CRC_BAD = 0, 1, 2  # ``scan``'s status of one frame (REENCODE: the encoder decides)
_KINDS = {"string": 0, "float32": 1, "int64": 2}


def _implementation() -> tuple[ModuleType, bool]:
    """The compiled module, unless it is missing or ``SHARDPREP_NATIVE=0``; else the Python twin."""
    if os.environ.get("SHARDPREP_NATIVE", "1") != "0":
        try:
            return importlib.import_module("shardprep.native._native"), True
        except ImportError:
            pass
    return importlib.import_module("shardprep.native.fallback"), False


_impl, NATIVE = _implementation()
blake2b8, conforms, crc32c, fill_data_crcs, gather, interleave, scan, split_indices = (
    _impl.blake2b8, _impl.conforms, _impl.crc32c, _impl.fill_data_crcs, _impl.gather, _impl.interleave, _impl.scan,
    _impl.split_indices)
line_counts = _impl.line_counts
scatter = _impl.scatter  # (blob, int64 starts, lengths, dests, out): blob's pieces to their places in out
pread_records = _impl.pread_records  # (fd, int64 starts, int64 lengths): those bytes of the file, back to back
feistel = _impl.feistel  # (uint64 values, keys, half, n, inverse), in place
decode_example = _impl.decode_example  # Example bytes -> {name: [values]}, or None (example.decoder)
jsonl_columns = _impl.jsonl_columns  # a block of JSON Lines -> columns, or None (formats.jsonl_block)
example_columns = _impl.example_columns  # (blob, ends, names, kinds) -> (lengths, columns), or None (stats.columns)
hash_values = _impl.hash_values  # (data, int64 offsets, seed) -> uint64 bytes (distinct.HyperLogLog)
minhash = _impl.minhash  # (texts, int64 offsets, uint32 a, b, shingle, seed) -> uint32 signatures, or None (text.minhash)
sum_numbers = _impl.sum_numbers  # (values, kind, bounds, inv_log, low) -> a number column's sums, or None (stats.columns)


def kind_of(dtype: str) -> int:
    """A feature dtype as the compiled functions take it (0 string, 1 float32, 2 int64)."""
    return _KINDS[dtype]


def example_spec(schema: Schema) -> tuple[tuple[bytes, int, int], ...]:
    """The schema as ``scan`` reads it: (UTF-8 name, kind, value count or -1), in sorted-name order."""
    return tuple((name.encode("utf-8"), _KINDS[schema[name].dtype],
                  1 if schema[name].shape == () else schema[name].shape[0]) for name in sorted(schema))
