"""The most a run may write under ``--output`` at once: an upper bound, from the plan alone.

Every file a run creates is bounded at its largest, and the bound of the run is their sum (so it
holds whatever the order of writes and removals), plus a block (``BLOCK``) per file. The parts:

- ``spill``: the framed records once (``graph.spill``: records, then 4 or 8 bytes a record of
  ends), twice where WriteShards does not read the spill in place (Assign's ``sorted-*`` copy, with
  its own lengths); a text run's document store, token files and ``index.npy``/``units.npy`` too;
- ``shards``: the framed records once (gzip: zlib's ``deflateBound`` of them, a header a shard);
- ``indexes``: a record index per uncompressed shard (``record_index``: 16 + 8 (n + 1) bytes);
- ``rejected``: the dead letters of a run that may commit (at most ``--max-bad-records`` of them:
  more fail the run anyway), each its raw text as JSON (at most 6 bytes a byte: ``\\u0001``), a
  detail (at most 80 characters of the value, ``_show``) and where it came from;
- ``small``: the staged units, the manifest and its run copy, a text run's vocabulary, the lease.

The records: ``records`` gives, per input file, at most how many records it yields and their framed
bytes. Where the count and sizes depend on the data, the bound is a worst-case per-byte factor of
the encoding, derived from the wire format (``tf.train.Example``: per feature a map entry holding
the feature's name, a Feature and a list, each a tag and a varint length; values as varints (int64:
up to 10 bytes, any negative one), 4 bytes (float32) or their bytes with a length (string)), not
measured: a CSV field of k bytes and its separator (k + 1 input bytes) becomes at most
``entry(name, value of k bytes)`` bytes, plus its share of the record's framing (16 bytes) and
Example wrappers (``_header``), shared among its F fields (a record that commits has F fields:
``csv_columns``). JSON pays for each field's name in the input too. TFRecord
records pass through (a framed record is the same bytes). Images: their listed sizes and names.
Text runs: ``dupe_factor`` x sentences fixed-size instances (an instance takes at least one
sentence: ``text.pretraining.create_instances``) or one example per document, from the store's
counts (``text.spec.TextSpec``). Parquet: the footer's row count and uncompressed value bytes (a
dictionary-coded string column may decode to more than its uncompressed pages: not a strict bound).
gzip input: its size as the gzip trailer says (ISIZE; a file of several gzip members, or over 4
GiB decompressed, is undercounted).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from shardprep.schema import Schema

__all__ = ["BLOCK", "Records", "SpaceBound", "csv_factor", "entry_bytes", "json_factor", "records", "space_bound", "text_records",
           "varint_bytes"]

BLOCK = 4096  # what a file may take beyond its bytes: the rest of its last block (or page, on tmpfs)
FRAMING = 16  # a TFRecord's length, its crc and the data's crc
RAW_JSON = 6  # a dead letter's raw text: at most 6 bytes of JSON a byte (a control character: \u0001)
DETAIL = 80 * 6 + 256  # a dead letter's detail (``_show``: 80 characters of the value, escaped) and its other text
SMALL = 64 << 10  # the lease, the outcome, a report: each far below
MANIFEST_PER_SHARD = 512  # a shard's entry in the manifest (path, counts, crc32c, its index's)
MANIFEST_PER_FEATURE = 4 << 10  # a feature's schema and statistics in one split (quantiles, histograms: ~630 bytes)
MANIFEST_PER_TOP_VALUE = 96 + 80 * 6  # one of ``--stats-top-k`` values of a string feature (shown at most 80 characters)


class Records(NamedTuple):
    """At most ``count`` records, of at most ``framed`` bytes in all (framed as TFRecords)."""

    count: int
    framed: int

    def __add__(self, other: Any) -> Records:  # type: ignore[override]
        return Records(self.count + other.count, self.framed + other.framed)


class SpaceBound(NamedTuple):
    """Bytes a run may hold under ``--output`` at its peak, by part (the module's docstring); ``total`` is their sum."""

    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        return ", ".join(f"{name} {size / 1e6:,.1f} MB" for name, size in self.parts.items() if size)


def varint_bytes(n: int) -> int:
    """The bytes of the varint of a non-negative ``n``."""
    return max(1, (n.bit_length() + 6) // 7)


def _field(size: int) -> int:
    """A length-delimited field of ``size`` bytes with a one-byte tag."""
    return 1 + varint_bytes(size) + size


def entry_bytes(name_bytes: int, dtype: str, values: Sequence[int]) -> int:
    """The bytes of one feature's map entry in an Example (``example.wire.map_entry``), its name
    ``name_bytes`` long, holding values that take ``values`` bytes each (int64: its varint; float32:
    4; string: its length)."""
    if dtype == "string":
        content = sum(_field(k) for k in values)
    else:
        content = _field(sum(values)) if values else 0
    return _field(_field(name_bytes) + _field(_field(content)))


def _value_bytes(dtype: str, chars: int) -> int:
    """The most an input value of ``chars`` characters takes in an Example: a negative int64 10 bytes,
    a one-digit one 1 (a varint of k digits needs no more than k bytes: 10**k < 128**k), a float32 4,
    a string its bytes (a character of the input is at least one byte of it)."""
    if dtype == "int64":
        return 1 if chars <= 1 else 10
    if dtype == "float32":
        return 4
    return chars


_SIZES = (*range(0, 300), 2 ** 14 - 1, 2 ** 14, 2 ** 21 - 1, 2 ** 21, 2 ** 28 - 1, 2 ** 28)


@functools.lru_cache(maxsize=65536)
def _feature_factor(name_bytes: int, dtype: str, scalar: bool, fixed_in: int, list_in: int, header: float,
                    empty: bool) -> float:
    """The most output bytes per input byte of one feature's value: ``fixed_in`` input bytes go with
    every present field (its separator, its name in JSON, brackets ...), ``list_in`` more with every
    list element (its separator); ``header`` output bytes (the record's share) go with every field;
    ``empty``: a value of 0 characters is a present value (a string)."""
    first = 0 if empty else 1
    worst = 0.0
    for k in _SIZES[first:]:
        v = _value_bytes(dtype, k)
        out = SPREAD * entry_bytes(name_bytes, dtype, [v]) + header
        worst = max(worst, out / (fixed_in + k))
        if not scalar:  # a longer list: each more element costs k + list_in input bytes, at most v + its varints
            big = entry_bytes(name_bytes, dtype, [1 << 28]) - (1 << 28)  # the widest lengths
            worst = max(worst, (SPREAD * (big + v) + header) / (fixed_in + k),
                        SPREAD * (v + (dtype == "string") * (varint_bytes(k) + 1)) / (k + list_in))
    return worst


def _header(max_record_bytes: int) -> int:
    """A record's bytes besides its features: framing, the Example's tag and the length of its Features."""
    return FRAMING + 1 + varint_bytes(max_record_bytes)


HEADER = FRAMING + 2  # ``_header`` of a record below 128 bytes; a longer length varint takes under 1/128 of them
SPREAD = 1 + 1 / 128  # (so the features' bytes times this, plus HEADER, bound a record of any size)


def csv_factor(schema: Schema, columns: Sequence[str], *, empty_is_value: bool) -> float:
    """The most framed bytes per byte of CSV whose header has ``columns``: a record's own bytes
    (``_header``) shared by its fields, each field's entry over its value and separator."""
    f = max(1, len(columns))
    share = HEADER / f
    worst = share  # a field left empty (missing: not in the Example)
    for name in columns:
        spec = schema.get(name)
        if spec is None:
            continue
        worst = max(worst, _feature_factor(len(name.encode()), spec.dtype, spec.shape == (), 1, 1, share,
                                           empty_is_value and spec.dtype == "string"))
    return worst


def json_factor(schema: Schema) -> tuple[float, float]:
    """(framed bytes, records) at most per byte of JSON Lines or a JSON array of objects: an empty
    object (``{}`` and its newline, 3 bytes) is a record; a field is at least its quoted name, a colon,
    its value and a separator (and a list's brackets)."""
    header = HEADER
    worst = HEADER / 3  # {} and a newline: an empty Example
    for name, spec in schema.items():
        n = len(name.encode())
        scalar = spec.shape == ()
        fixed_in = n + 4 if scalar else n + 5
        # the record's header charged to its first field, with the record's braces and newline (2 bytes)
        worst = max(worst, _feature_factor(n, spec.dtype, scalar, fixed_in + 2, 1, header, spec.dtype == "string"),
                    _feature_factor(n, spec.dtype, scalar, fixed_in, 1, 0, spec.dtype == "string"))
    return worst, 1 / 3


def _fixed_example(schema: Schema, maxima: dict[str, int]) -> int:
    """The framed bytes of an Example of fixed-length int64/float32 lists (``shape`` (n,)), each value
    below ``maxima[name]`` (int64) or 4 bytes (float32)."""
    content = 0
    for name, spec in schema.items():
        count = spec.shape[0] if spec.shape else 1
        width = 4 if spec.dtype == "float32" else varint_bytes(maxima[name] - 1) if name in maxima else 10
        content += entry_bytes(len(name.encode()), spec.dtype, [width] * count)
    return FRAMING + _field(content)


def text_records(task: str, schema: Schema, *, documents: int, sentences: int, dupe_factor: int, vocab_size: int,
                 max_seq_length: int, labels: int) -> Records:
    """A text run's instances: pre-training, at most ``dupe_factor`` x ``sentences`` (each instance takes
    one sentence or more of its document); classification, one per document."""
    maxima = {"input_ids": vocab_size, "masked_lm_ids": vocab_size, "input_mask": 2, "segment_ids": 2,
              "masked_lm_positions": max_seq_length, "next_sentence_labels": 2, "label_ids": max(labels, 1)}
    count = dupe_factor * sentences if task == "bert-pretraining" else documents
    return Records(count, count * _fixed_example(schema, maxima))


def _gzip_bound(size: int) -> int:
    """zlib's ``deflateBound`` of ``size`` bytes (stored blocks at worst) and a gzip header and trailer."""
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13 + 18 + 64


def records(file: Any, units: Sequence[Any], schema: Schema, *, max_record_bytes: int, decompressed: int,
            factors: dict | None = None) -> Records:
    """At most how many records the input file ``file`` (``formats.InputFile``; ``units``: its work
    units; ``decompressed``: its bytes once un-gzipped) yields, and their framed bytes. ``factors``: the
    text formats' factors for ``schema`` found so far, by their arguments (many files share a few)."""
    size = decompressed + 1  # a last line without its newline
    factors = {} if factors is None else factors
    if file.format == "csv":
        columns = (units[0].columns if len(units) == 1 else next((u.columns for u in units if u.columns), ())
                   ) or tuple(schema)
        nulls = file.dialect.null_values if file.dialect is not None else ("",)
        count = size // max(1, len(columns))
        key = (columns, "" not in nulls)
        if (factor := factors.get(key)) is None:
            factor = factors[key] = csv_factor(schema, columns, empty_is_value="" not in nulls)
        return Records(count, math.ceil(factor * size))
    if file.format in ("jsonl", "json"):
        if (json_factors := factors.get("json")) is None:
            json_factors = factors["json"] = json_factor(schema)
        factor, per_byte = json_factors
        return Records(math.ceil(per_byte * size), math.ceil(factor * size))
    if file.format in ("tfrecord", "tfds"):  # records pass through: the same framed bytes (an empty one is 16)
        count = decompressed // FRAMING
        return Records(count, decompressed)
    if file.format == "images":
        return _image_records(file, units, schema, max_record_bytes)
    if file.format == "parquet":
        from shardprep.formats import parquet_meta

        meta = parquet_meta.footer(file).metadata
        values = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        per_record = _header(max_record_bytes) + sum(
            entry_bytes(len(n.encode()), spec.dtype, [1 << 20]) - (1 << 20) + (10 if spec.dtype == "int64" else 4)
            for n, spec in schema.items())
        return Records(meta.num_rows, meta.num_rows * per_record + values)
    raise ValueError(f"no space bound for format {file.format!r}")


def _image_records(file: Any, units: Sequence[Any], schema: Schema, max_record_bytes: int) -> Records:
    """Each image's Example: its bytes (or, re-encoded under ``--max-side`` PX, at most 6 bytes a
    pixel of PX x PX, whichever is more), its listed path, class name, digest and sizes. The images
    are the units' (``formats.images.ImageUnit``), else the file's."""
    from shardprep.formats.image_listing import ImageEntries

    listed = [u.entries for u in units if len(getattr(u, "entries", ()))] or [file.entries]
    entries = ImageEntries(tuple(p for e in listed for p in e.paths), tuple(n for e in listed for n in e.sizes))
    side = file.options.max_side
    longest = max((len(c.encode()) for c in file.classes), default=0)
    fixed = _header(max_record_bytes) + sum(
        entry_bytes(len(n.encode()), spec.dtype, [1 << 28]) - (1 << 28) + 10 for n, spec in schema.items())
    fixed += 64 + 8 + longest  # the sha256 digest (hex), the format's name, the class name
    framed = sum(max(size, 6 * side * side) if side else size for size in entries.sizes)
    framed += sum(len(p.encode("utf-8", "surrogateescape")) for p in entries.paths) + len(entries) * fixed
    return Records(len(entries), framed)


def _num_shards(config: Any, count: int, framed: int) -> int:
    """At most how many shards the run writes in all (``planning.choose_num_shards`` of each split,
    whose records and bytes are at most the run's)."""
    if config.num_shards is not None:
        per_split = config.num_shards
    else:
        per_split = config.workers * (config.shards_per_worker or max(1, math.ceil(
            framed / (config.target_shard_bytes * config.workers))))
    return max(1, len(config.splits)) * max(1, min(per_split, count))


def space_bound(*, files: Sequence[Any], units: Sequence[Any], schema: Schema, config: Any,
                decompressed: dict[int, int], text: dict | None = None) -> SpaceBound:
    """The bound of a run: ``config`` (``config.ReshardConfig``), its input ``files`` and work
    ``units``, ``decompressed`` (file index -> its bytes un-gzipped); ``text``: a text run's counts (``documents``, ``sentences``, ``store_bytes``,
    ``dupe_factor``, ``vocab_size``, ``vocab_bytes``, ``max_seq_length``, ``labels``, ``task``), after
    its store is built."""
    end_width = 4 if config.batch_bytes + 2 * (64 << 20) < 1 << 32 else 8
    by_file: dict[int, list] = {}
    for u in units:
        by_file.setdefault(u.file.index, []).append(u)
    if text is not None:
        recs = text_records(text["task"], schema, documents=text["documents"], sentences=text["sentences"],
                            dupe_factor=text["dupe_factor"], vocab_size=text["vocab_size"],
                            max_seq_length=text["max_seq_length"], labels=text["labels"])
    else:
        count = framed = 0
        factors: dict = {}
        for f in files:
            mine = by_file.get(f.index, ())
            n, size = records(f, mine, schema, max_record_bytes=mine[0].max_record_bytes if len(mine) == 1 else
                              _max_record(mine), decompressed=decompressed.get(f.index, f.size), factors=factors)
            count, framed = count + n, framed + size
        recs = Records(count, framed)
    framed = recs.framed  # the records alone, as the shards hold them
    num_shards = _num_shards(config, recs.count, framed)
    copies = 1 if config.spill_in_place else 2  # the sorted copy: the records again, with their lengths
    spill = copies * (framed + end_width * recs.count)
    splits = max(1, len(config.splits))
    batches = splits * (2 * len(units) + recs.framed // config.batch_bytes + recs.count // config.batch_records + 1)
    if config.compression == "gzip":
        shards, indexes = _gzip_bound(framed) + num_shards * 64, 0
    else:
        shards, indexes = framed, 8 * recs.count + 24 * num_shards
    parts = {"spill": spill, "shards": shards, "indexes": indexes}
    input_bytes = sum(decompressed.get(f.index, f.size) for f in files)
    url = max((len(f.url.encode()) for f in files), default=0)
    bad = min(config.max_bad_records, recs.count)
    # a dead letter's record is in no spill, shard or index: its raw bytes take what they would have, and more
    # only where 6 bytes a byte (``RAW_JSON``) is more than the records take a byte of input
    per_byte = (spill + shards + indexes) / max(1, input_bytes)
    raw = min(input_bytes, bad * _max_record(units))
    parts["rejected"] = math.ceil(max(0.0, RAW_JSON - per_byte) * raw) + bad * (DETAIL + 6 * url)
    files_made = copies * batches + 2 * num_shards + 16
    if text is not None:
        store = text["store_bytes"]
        tokens = 4 * store + 16 * (text["documents"] + len(units)) + 8 * text["sentences"]  # a token: a byte or more
        parts["text"] = store + 8 * text["documents"] + 8 * len(units) + 256 + (
            tokens if text["task"] == "bert-pretraining" else 0)
        files_made += 2 * len(units) + 4
    features = len(schema)
    top = min(config.stats_top_k, recs.count) * sum(spec.dtype == "string" for spec in schema.values())
    manifest = 64 * 1024 + MANIFEST_PER_SHARD * num_shards + (
        splits * (features * MANIFEST_PER_FEATURE + top * MANIFEST_PER_TOP_VALUE) if config.statistics else 0)
    staged = 64 * 1024 + 2048 * len(units) + sum(len(f.url.encode()) + 64 for f in files) + sum(
        24 * len(f.entries) + sum(map(len, f.entries.paths)) for f in files if f.format == "images")
    listings = 48 * batches + 32 * num_shards  # the batch listings (a row a batch), TFDS's dataset_info.json
    parts["small"] = SMALL + staged + 2 * manifest + listings + (text["vocab_bytes"] if text else 0)
    parts["blocks"] = BLOCK * files_made
    return SpaceBound(parts)


def _max_record(units: Sequence[Any] | None) -> int:
    return max((u.max_record_bytes for u in units or ()), default=64 << 20)
