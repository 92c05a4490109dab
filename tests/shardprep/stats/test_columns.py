"""``shardprep.stats.columns``: a batch's statistics from its columns (compiled from Examples, or the
column-wise readers' batches) are exactly the per-record decoder's, on any thread, split by split."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import example, framing, native
from shardprep.example import columnar
from shardprep.schema import FeatureSpec
from shardprep.stats import columns as stats_columns
from shardprep.stats import feature_stats, sketches
from tests.shardprep.stats.stats_fixtures import FEATURES, small_caps

WIDE = {**FEATURES, "k": FeatureSpec("int64", (-1,)), "b": FeatureSpec("string", (2,)), "a": FeatureSpec("float32"),
        "é": FeatureSpec("int64")}


def _wild_rows(n: int, rng: random.Random) -> list[dict]:
    """Missing values, NaN and infinities, empty lists and strings, int64's extremes, long strings."""
    def number() -> float:
        return rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-40, 3.4e38, rng.gauss(0, 1e6),
                           min(rng.lognormvariate(0, 20), 3e38) * rng.choice([-1, 1])])  # within float32

    def maybe(value):
        return None if rng.random() < 0.15 else value
    return [{"x": maybe(number()), "n": maybe(rng.choice([0, -1, 1 << 40, -(1 << 63), (1 << 63) - 1, rng.randrange(-99, 99)])),
             "c": maybe(rng.choice(["", "a", "é" * rng.randrange(50), f"s{rng.randrange(40)}", "x" * 300])),
             "v": maybe([number() for _ in range(rng.choice([0, 1, 3, 60]))]),
             "w": maybe([rng.choice(["", "a", f"{rng.randrange(10**6)}"]) for _ in range(rng.randrange(0, 4))]),
             "k": maybe([rng.randrange(-(1 << 63), 1 << 63) for _ in range(rng.randrange(0, 5))]),
             "b": maybe([f"{rng.randrange(9)}", ""]), "a": maybe(number()), "é": maybe(rng.randrange(-5, 5))}
            for _ in range(n)]


def _framed(records: list[bytes]) -> tuple[bytes, np.ndarray]:
    return framing.frame_all(records), np.cumsum([len(r) + 16 for r in records]).astype(np.uint64)


def _state(partial: dict) -> str:
    """Everything the manifest is made of, exact sums and counts included."""
    return json.dumps({"json": feature_stats.to_json(partial, WIDE),
                       "exact": {k: [s.values, s.total, s.squares, s.strings, s.bytes_total,
                                     sorted((v.hex(), c) for v, c in s.counts.items()) if s.counts is not None else None,
                                     s.hll.registers.tolist() if s.hll is not None else None,
                                     s.minimum, s.maximum, _sketch_state(s.sketch)]
                                 for k, s in sorted(partial.items())}}, sort_keys=True)


def _sketch_state(sketch: sketches.LogSketch | None) -> list | None:
    if sketch is None:
        return None
    return [sketch.zeros, *(c.keys.tolist() for c in (sketch.positive, sketch.negative)),
            *(c.counts.tolist() for c in (sketch.positive, sketch.negative))]


@pytest.mark.skipif(not native.NATIVE, reason="the compiled module is not built")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 400), caps=st.booleans(), summed=st.booleans())
def test_the_compiled_columns_give_the_per_record_statistics(seed, n, caps, summed):
    """Records as Examples (TFRecord input, the per-record encoder's rows): ``native.example_columns``
    + numpy give what the Python decoder gives, batch by batch and merged, with and without the
    switches from exact counts to sketches (then a capped string feature comes as its hashes,
    ``Hashed``), and with the numbers summed while read (``Summed``) or copied out as values."""
    rng = random.Random(seed)
    encode = example.example_encoder(WIDE, on_missing="omit", allow_non_finite=True)
    records = [encode(r) for r in _wild_rows(n, rng)]
    cuts = sorted(rng.sample(range(n + 1), min(n + 1, 7)))  # batches after the cap: hashed strings
    with small_caps() if caps else contextlib.nullcontext():
        compiled: dict = {}
        for a, b in zip([0, *cuts], [*cuts, n]):
            blob, ends = _framed(records[a:b])
            hashed = stats_columns.sketched_strings(compiled, WIDE)
            columns = stats_columns.from_examples(blob, ends, WIDE, summed=summed, hashed=hashed)
            assert columns is not None
            assert isinstance(columns["x"].values, stats_columns.Summed) == summed
            assert {name for name, c in columns.items() if isinstance(c.values, stats_columns.Hashed)} == hashed
            stats_columns.add(compiled, columns, WIDE, b - a)
        assert _state(compiled) == _state(feature_stats.batch_stats(records, WIDE))


@pytest.mark.skipif(not native.NATIVE, reason="the compiled module is not built")
def test_walks_on_several_threads_at_once_give_what_one_gives():
    """The compiled walk runs without the GIL (a shard's statistics beside the next one's gather):
    walks on four threads at once, taking and giving back the shared bucket tables, each give exactly
    the statistics of the same batches walked alone."""
    rng = random.Random(7)
    encode = example.example_encoder(WIDE, on_missing="omit", allow_non_finite=True)
    batches = [_framed([encode(r) for r in _wild_rows(3000, rng)]) for _ in range(4)]

    def walk(order: list[int]) -> str:
        partial: dict = {}
        for i in order * 3:
            stats_columns.add_framed(partial, *batches[i], WIDE)
        return _state(partial)

    orders = [[i, (i + 1) % 4, (i + 2) % 4] for i in range(4)]
    alone = [walk(order) for order in orders]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(walk, orders * 2))
    assert together == alone * 2


@pytest.mark.skipif(not native.NATIVE, reason="the compiled module is not built")
@pytest.mark.parametrize("sizes", [(0, 0, 300), (40, 40, 300), (3000, 3000, 300), (10, 5000, 300), (3000, 3000, 9)])
def test_string_columns_sized_from_their_first_records_give_the_per_record_statistics(sizes):
    """A copied string column is sized once its first 16 records are read (issue 61): from their
    bytes per record for the whole batch. Values that grow after them (short first, long later)
    outgrow it and are grown; a batch of fewer records is never sized; every column holds the values
    the decoder reads."""
    first, later, n = sizes
    features = {"label": FeatureSpec("string"), "payload": FeatureSpec("string"), "tags": FeatureSpec("string", (-1,)),
                "n": FeatureSpec("int64")}
    rng = random.Random(n + first + later)
    encode = example.example_encoder(features, on_missing="omit")
    records = [encode({"label": rng.choice(["a", "bb"]), "n": i, "tags": [f"t{rng.randrange(9)}"] * rng.randrange(3),
                       "payload": bytes(rng.randrange(256) for _ in range(first if i < 16 else later))})
               for i in range(n)]
    columns = stats_columns.from_examples(*_framed(records), features)
    assert columns is not None
    got: dict = {}
    stats_columns.add(got, columns, features, len(records))
    assert _state(got) == _state(feature_stats.batch_stats(records, features))


def _varint(n: int, longer: bool) -> bytes:
    """``n`` (below 2**64) as a varint, with a needless 0x80 0x00 tail where ``longer`` and that keeps
    it within 10 bytes (not minimal, as the decoder reads it)."""
    longer = longer and n < 1 << 56
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n and not longer:
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)
        if not n:
            return bytes(out + b"\x00")


def _other_writers_example(row: dict, floats: frozenset[str], rng: random.Random) -> bytes:
    """``row`` ({name: list}, float32 lists for the names in ``floats``, int64 lists otherwise) as
    another writer may encode it: each list packed or unpacked (fixed32 floats, one varint field per
    int64), varints minimal or not."""
    def field(tag: int, payload: bytes) -> bytes:
        return bytes([tag]) + _varint(len(payload), rng.random() < 0.2) + payload
    entries = b""
    for name, vals in row.items():
        if name in floats:
            raw = [struct.pack("<f", v) for v in vals]
            lst = field(0x12, field(0x0A, b"".join(raw)) if rng.random() < 0.5 else b"".join(b"\x0d" + r for r in raw))
        else:
            ints = [_varint(v & (2**64 - 1), rng.random() < 0.2) for v in vals]
            lst = field(0x1A, field(0x0A, b"".join(ints)) if rng.random() < 0.5 else b"".join(b"\x08" + i for i in ints))
        entries += field(0x0A, field(0x0A, name.encode()) + field(0x12, lst))
    return field(0x0A, entries)


@pytest.mark.skipif(not native.NATIVE, reason="the compiled module is not built")
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), summed=st.booleans())
def test_lists_packed_or_not_give_the_per_record_statistics(seed, n, summed):
    """Number lists written unpacked (a fixed32 field per float, a varint field per int64) or packed,
    with longer varints than protobuf writes: the compiled columns (values or sums) read the values
    the decoder reads (wire.h's wire_floats and wire_ints)."""
    rng = random.Random(seed)
    features = {"v": FeatureSpec("float32", (-1,)), "k": FeatureSpec("int64", (-1,))}
    rows = [{"v": [rng.gauss(0, 1e3) for _ in range(rng.randrange(4))],
             "k": [rng.choice([0, -1, 1 << 40, -(1 << 63), (1 << 63) - 1, rng.randrange(-99, 99)]) for _ in range(rng.randrange(4))]}
            for _ in range(n)]
    records = [_other_writers_example(row, frozenset({"v"}), rng) for row in rows]
    columns = stats_columns.from_examples(*_framed(records), features, summed=summed)
    assert columns is not None
    got: dict = {}
    stats_columns.add(got, columns, features, len(records))
    assert _state(got) == _state(feature_stats.batch_stats(records, features))


def test_the_compiled_reader_declines_what_it_does_not_read_as_the_decoder():
    """A key given twice (the decoder keeps the last), values of another kind, a cut-off record: None."""
    features = {"x": FeatureSpec("float32")}
    one = example.example_encoder(features)({"x": 1.0})
    entry = one[2:]  # the Features message's entries (one), after the Example's tag and length
    twice = b"\x0a" + bytes([2 * len(entry)]) + entry + entry
    other = example.example_encoder({"x": FeatureSpec("int64")})({"x": 3})
    for record in (twice, other, one[:-1]):
        assert stats_columns.from_examples(*_framed([record]), features) is None
    assert stats_columns.from_examples(*_framed([one]), features) is not None


SCALARS = {"x": FeatureSpec("float32"), "n": FeatureSpec("int64"), "c": FeatureSpec("string"),
           "d": FeatureSpec("string")}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 500), caps=st.booleans(), summed=st.booleans())
def test_column_batches_give_the_per_record_statistics(seed, n, caps, summed):
    """The column-wise readers' batches (``columnar.ColumnBatch``), whole and cut by a split mask:
    their columns give what decoding their records gives, the numbers summed by the compiled
    ``native.sum_numbers`` or by numpy (more than ``MAX_SUMMED`` number features)."""
    rng = np.random.default_rng(seed)
    x = np.clip(rng.choice([0.0, 1.5, -2.0, 1e-30, 3e38], n) * rng.lognormal(0, 3, n), -3.4e38, 3.4e38)
    words = [b"", b"a", "é".encode(), b"long" * 40] + [b"w%d" % i for i in range(300)]
    c = [words[i] for i in rng.integers(0, len(words), n)]
    columns = {"x": x.astype(np.float32), "n": rng.integers(-(1 << 63), (1 << 63) - 1, n, dtype=np.int64),
               "c": (np.cumsum([0] + [len(v) for v in c]).astype(np.int64), b"".join(c)),
               "d": (np.zeros(n + 1, np.int32), b"")}
    keep = rng.random(n) < 0.6
    with small_caps() if caps else contextlib.nullcontext(), pytest.MonkeyPatch.context() as mp:
        if not summed:
            mp.setattr(stats_columns, "MAX_SUMMED", 0)
        for batch in columnar.framed_batches(SCALARS, columns, n):
            assert isinstance(batch, columnar.ColumnBatch)
            starts = [0, *batch.ends[:-1].tolist()]
            records = [bytes(batch.blob[a + 12:b - 4]) for a, b in zip(starts, batch.ends.tolist())]
            got: dict = {}
            stats_columns.add(got, stats_columns.from_columnar(batch.columns, SCALARS), SCALARS, n)
            assert _state(got) == _state(feature_stats.batch_stats(records, SCALARS))
            cut: dict = {}
            stats_columns.add(cut, stats_columns.taken(stats_columns.from_columnar(batch.columns, SCALARS),
                                                       np.flatnonzero(keep)), SCALARS, int(keep.sum()))
            assert _state(cut) == _state(feature_stats.batch_stats([r for r, k in zip(records, keep) if k], SCALARS))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), blocks=st.integers(1, 12), splits=st.integers(1, 3), caps=st.booleans())
def test_blocks_counted_together_give_each_splits_per_record_statistics(seed, blocks, splits, caps):
    """Parse's column-wise blocks, held and counted a few at a time (``add_blocks``: joined, each
    record to its split, a string feature capped in a split's partial as its hashes, its bytes
    neither joined nor cut): each split's statistics are those of decoding its records."""
    rng = np.random.default_rng(seed)
    words = [b"", b"a", "é".encode(), b"long" * 40] + [b"w%d" % i for i in range(300)]
    partial: dict = {}
    records: dict[int, list[bytes]] = {}
    with small_caps() if caps else contextlib.nullcontext():
        held = []
        for _ in range(blocks):
            n = int(rng.integers(1, 120))
            c = [words[i] for i in rng.integers(0, len(words), n)]
            columns = {"x": rng.normal(0, 1e3, n).astype(np.float32), "n": rng.integers(-99, 99, n, dtype=np.int64),
                       "c": (np.cumsum([0] + [len(v) for v in c]).astype(np.int64 if rng.random() < 0.5 else np.int32),
                             b"".join(c)),
                       "d": (np.zeros(n + 1, np.int32), b"")}
            which = rng.choice(splits, n, p=[0.6, 0.3, 0.1][:splits] / np.sum([0.6, 0.3, 0.1][:splits]))
            batch = next(iter(columnar.framed_batches(SCALARS, columns, n)))
            starts = [0, *batch.ends[:-1].tolist()]
            for s, a, b in zip(which.tolist(), starts, batch.ends.tolist()):
                records.setdefault(s, []).append(bytes(batch.blob[a + 12:b - 4]))
            held.append((batch.columns, which.astype(np.int8) if splits > 1 else None, n))
            if rng.random() < 0.4:  # counted now: the next blocks meet partials that may be capped
                stats_columns.add_blocks(partial, held, 0, SCALARS)
                held = []
        if held:
            stats_columns.add_blocks(partial, held, 0, SCALARS)
        assert sorted(partial) == sorted(records)
        for s, mine in records.items():
            assert _state(partial[s]) == _state(feature_stats.batch_stats(mine, SCALARS)), s


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), blocks=st.integers(1, 6), splits=st.integers(2, 3), caps=st.booleans())
def test_long_texts_cut_by_split_give_each_splits_per_record_statistics(seed, blocks, splits, caps):
    """Issue 61: blocks whose long texts in a split are over the caps by themselves (bytes, or with
    the small caps the count) come to that split as their hashes, not cut out of the blocks and
    counted; every split, capped or not, has the statistics of decoding its records."""
    rng = np.random.default_rng(seed)
    repeated = [b"r%d " % i * 60 for i in range(5)]  # long values that repeat: held bytes below the total
    partial: dict = {}
    records: dict[int, list[bytes]] = {}
    shares = np.array([0.8, 0.15, 0.05][:splits]) / np.sum([0.8, 0.15, 0.05][:splits])
    with small_caps() if caps else contextlib.nullcontext(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(feature_stats, "MAX_HELD_BYTES", 6000)
        for _ in range(blocks):
            held = []
            for _ in range(int(rng.integers(1, 4))):
                n = int(rng.integers(1, 90))
                c = [repeated[i % 5] if i % 3 == 0 else b"t%d " % int(rng.integers(1 << 40)) * int(rng.integers(0, 40))
                     for i in rng.integers(0, 1 << 20, n).tolist()]
                columns = {"x": rng.normal(0, 1e3, n).astype(np.float32), "n": rng.integers(-99, 99, n, dtype=np.int64),
                           "c": (np.cumsum([0] + [len(v) for v in c]).astype(np.int64), b"".join(c)),
                           "d": (np.zeros(n + 1, np.int32), b"")}
                which = rng.choice(splits, n, p=shares)
                batch = next(iter(columnar.framed_batches(SCALARS, columns, n)))
                starts = [0, *batch.ends[:-1].tolist()]
                for s, a, b in zip(which.tolist(), starts, batch.ends.tolist()):
                    records.setdefault(s, []).append(bytes(batch.blob[a + 12:b - 4]))
                held.append((batch.columns, which.astype(np.int8), n))
            stats_columns.add_blocks(partial, held, 0, SCALARS)
        assert sorted(partial) == sorted(records)
        for s, mine in records.items():
            assert _state(partial[s]) == _state(feature_stats.batch_stats(mine, SCALARS)), s


def test_a_split_over_the_caps_alone_is_capped_beside_one_under_them():
    """One batch of blocks, a fresh partial: the split whose long texts are over the held bytes by
    themselves is capped at once (its texts as hashes), the small split keeps exact counts."""
    n = 400
    texts = [b"text %d " % i * 30 for i in range(n)]
    columns = {"x": np.zeros(n, np.float32), "n": np.arange(n), "d": (np.zeros(n + 1, np.int32), b""),
               "c": (np.cumsum([0] + [len(v) for v in texts]).astype(np.int64), b"".join(texts))}
    which = (np.arange(n) % 10 == 0).astype(np.int8)  # split 1: 40 texts, ~8 KB; split 0: 360, ~75 KB
    batch = next(iter(columnar.framed_batches(SCALARS, columns, n)))
    partial: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(feature_stats, "MAX_HELD_BYTES", 50_000)
        stats_columns.add_blocks(partial, [(batch.columns, which, n)], 0, SCALARS)
    assert partial[0]["c"].counts is None and partial[0]["c"].hll is not None
    assert partial[1]["c"].counts is not None and len(partial[1]["c"].counts) == 40


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))
def test_records_taken_from_pieces_are_those_of_the_joined_column(sizes, seed):
    """``taken`` on a string column in pieces (``joined``) takes each piece's records where they are:
    the same values, in the same order, as taking them from the pieces joined."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    pieces = [pa.array([b"v%d" % int(v) * int(rng.integers(0, 4)) for v in rng.integers(0, 50, k)], pa.large_binary())
              for k in sizes]
    column = stats_columns.Column(pa.chunked_array(pieces, pa.large_binary()))
    whole = pa.concat_arrays(pieces)
    rising = np.flatnonzero(rng.random(len(whole)) < 0.4)
    shuffled = rng.permutation(len(whole))[:max(0, len(whole) // 2)]
    for index in (rising, shuffled, np.arange(len(whole)), np.zeros(0, np.int64)):
        got = stats_columns.taken({"c": column}, index.astype(np.int64))["c"].values
        assert got.to_pylist() == whole.take(pa.array(index.astype(np.int64))).to_pylist()
