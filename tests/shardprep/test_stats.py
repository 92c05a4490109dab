"""Issue 36: the statistics' sketches (``shardprep.stats.sketches``): quantiles within 1% of numpy's, merges
of any partition in any order giving the same manifest JSON, HyperLogLog within 3% at a million
distinct strings, and a bounded memory per feature whatever the cardinality."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import example, framing, manifest, native, run
from shardprep.example import columnar
from shardprep.schema import FeatureSpec
from shardprep.stats import columns as stats_columns
from shardprep.stats import distinct, feature_stats, sketches

FEATURES = {"x": FeatureSpec("float32"), "n": FeatureSpec("int64"), "c": FeatureSpec("string"),
            "v": FeatureSpec("float32", (-1,)), "w": FeatureSpec("string", (-1,))}
QS = list(feature_stats.QUANTILES.values())


def _records(rows: list[dict], features: dict = FEATURES) -> list[bytes]:
    encode = example.example_encoder(features, on_missing="omit")
    return [encode(r) for r in rows]


def _bound(sorted_x: np.ndarray, q: float) -> float:
    """numpy's linear percentile interpolates x[lo] and x[hi]: each estimated within 1%, so is it."""
    rank = q * (sorted_x.size - 1)
    lo, hi = int(np.floor(rank)), int(np.ceil(rank))
    f = rank - lo
    return sketches.ALPHA * ((1 - f) * abs(sorted_x[lo]) + f * abs(sorted_x[hi])) * (1 + 1e-9) + 1e-300


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), kind=st.sampled_from(["normal", "lognormal", "uniform",
                                                                                      "ints", "mixed"]))
def test_quantiles_are_within_one_percent_of_numpys(seed, n, kind):
    rng = np.random.default_rng(seed)
    x = {"normal": lambda: rng.normal(rng.uniform(-100, 100), rng.uniform(0.1, 1e3), n),
         "lognormal": lambda: rng.lognormal(0, 5, n) * rng.choice([-1, 1]),
         "uniform": lambda: rng.uniform(-1e4, 1e4, n),
         "ints": lambda: rng.integers(-50, 50, n).astype(np.float64),
         "mixed": lambda: np.concatenate([np.zeros(n // 3), rng.normal(0, 1e-3, n - n // 3)])}[kind]()
    x = x.astype(np.float32).astype(np.float64)
    sketch = sketches.LogSketch.of(x)
    got = sketch.quantiles(QS, float(x.min()), float(x.max()))
    ordered = np.sort(x)
    for q, value in zip(QS, got):
        want = np.percentile(x, 100 * q)
        assert abs(value - want) <= _bound(ordered, q), (q, value, want)
    assert sketch.zeros == int(np.count_nonzero(x == 0)) and sketch.count == n


def _rows(n: int, rng: random.Random) -> list[dict]:
    return [{"x": None if rng.random() < 0.1 else rng.choice([0.0, rng.gauss(0, 10), rng.lognormvariate(0, 8)]),
             "n": rng.randrange(-3, 1000),
             "c": f"s{rng.randrange(400)}", "v": [rng.random() for _ in range(rng.randrange(0, 40))],
             "w": [f"{rng.randrange(10**9)}" for _ in range(rng.randrange(0, 3))]} for _ in range(n)]


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
    with _small_caps() if caps else contextlib.nullcontext():
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
    with _small_caps() if caps else contextlib.nullcontext(), pytest.MonkeyPatch.context() as mp:
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


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_any_partition_merged_in_any_order_gives_the_same_json(seed):
    """With the caps small (distinct strings, list lengths, buckets), so every switch from exact counts
    to a sketch happens at some point of some partitions: still the same JSON bytes."""
    with _small_caps():
        _check_partition(seed)


def _check_partition(seed: int) -> None:
    rng = random.Random(seed)
    records = _records(_rows(300, random.Random(seed % 7)))
    whole = json.dumps(feature_stats.to_json(feature_stats.batch_stats(records, FEATURES), FEATURES), sort_keys=True)
    cuts = sorted(rng.sample(range(1, len(records)), rng.randrange(1, 30)))
    parts = [feature_stats.batch_stats(records[a:b], FEATURES) for a, b in zip([0, *cuts], [*cuts, len(records)])]
    rng.shuffle(parts)
    while len(parts) > 1:  # a random tree of merges
        i = rng.randrange(len(parts) - 1)
        parts[i:i + 2] = [feature_stats.merge(parts[i], parts[i + 1]) if rng.random() < 0.5 else feature_stats.merge(parts[i + 1],
                                                                                                        parts[i])]
    merged = pickle.loads(pickle.dumps(parts[0]))  # partials travel between workers pickled
    assert json.dumps(feature_stats.to_json(merged, FEATURES), sort_keys=True) == whole


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
    with _small_caps() if caps else contextlib.nullcontext():
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


@contextlib.contextmanager
def _small_caps():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(feature_stats, "MAX_DISTINCT", 150)
        mp.setattr(feature_stats, "MAX_LENGTHS", 12)
        mp.setattr(sketches, "MAX_BUCKETS", 64)
        yield


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_pending_string_counts_count_as_counted_ones(seed):
    """A batch's values kept uncounted (``StringCounts.pending``, counted with the other parts when
    asked) give the same mapping, hashes' sketch and pickled state as each batch counted at once."""
    rng = random.Random(seed)
    batches = [pa.array([b"v%d" % rng.randrange(rng.choice([3, 50, 10**6])) for _ in range(rng.randrange(0, 60))],
                        rng.choice([pa.binary(), pa.large_binary()])) for _ in range(rng.randrange(1, 8))]
    eager, lazy = distinct.StringCounts(), distinct.StringCounts()
    for i, values in enumerate(batches):
        eager = eager.merge(distinct.StringCounts.of(values))
        lazy = lazy.merge(distinct.StringCounts.pending(values))
        if i % 3 == 2:
            assert len(lazy) == len(eager)  # counted together here: the later parts join the counted one
    assert lazy.items() == eager.items() and lazy.top(5) == eager.top(5) and lazy.held_bytes == eager.held_bytes
    hashes, held = distinct.StringCounts.pending(pa.concat_arrays([b.cast(pa.large_binary()) for b in batches])) \
        .distinct_hashes()  # the cap's test without counting: the distinct values' hashes and bytes
    assert held == eager.held_bytes and np.array_equal(hashes, np.unique(eager.hashes()))
    hashes, held = distinct.StringCounts.pending(batches).distinct_hashes()  # the batches as pieces, not joined
    assert held == eager.held_bytes and np.array_equal(hashes, np.unique(eager.hashes()))
    assert np.array_equal(distinct.HyperLogLog.of_hashes(lazy.hashes()).registers,
                          distinct.HyperLogLog.of_hashes(eager.hashes()).registers)
    assert pickle.loads(pickle.dumps(lazy)).items() == eager.items()


def test_small_caps_switch_to_sketches():
    rows = _rows(300, random.Random(1))
    with _small_caps():
        doc = feature_stats.to_json(feature_stats.batch_stats(_records(rows), FEATURES), FEATURES)
    assert doc["w"]["distinct_capped"] and doc["w"]["distinct_estimated"] and "top" not in doc["w"]
    distinct = len({v for r in rows for v in r["w"]})
    assert doc["w"]["distinct"] == pytest.approx(distinct, rel=0.05)
    assert doc["c"]["distinct_capped"] and doc["c"]["distinct_estimated"]
    assert sum(doc["v"]["length_histogram"]["counts"]) == 300  # from the sketch of lengths


def test_histograms_and_byte_lengths():
    rng = random.Random(3)
    rows = _rows(500, rng)
    doc = feature_stats.to_json(feature_stats.batch_stats(_records(rows), FEATURES), FEATURES)
    xs = [r["x"] for r in rows if r["x"] is not None]
    x = doc["x"]
    assert x["zeros"] == sum(v == 0 for v in xs)
    assert sum(x["histogram"]["counts"]) == len(xs) and len(x["histogram"]["edges"]) == 11
    assert x["histogram"]["edges"][0] == x["min"] and x["histogram"]["edges"][-1] == x["max"]
    assert x["quantile_histogram"]["edges"][0] == x["min"] and x["quantile_histogram"]["edges"][-1] == x["max"]
    assert sum(x["quantile_histogram"]["counts"]) == len(xs)
    assert list(x["quantiles"]) == ["p1", "p5", "p25", "p50", "p75", "p95", "p99"]
    lengths = [len(r["v"]) for r in rows]
    lo, hi = min(lengths), max(lengths)
    want = [0] * 10
    for n in lengths:
        want[min((n - lo) * 10 // (hi - lo), 9)] += 1
    assert doc["v"]["length_histogram"] == {"edges": [lo + (hi - lo) * i / 10 for i in range(11)], "counts": want}
    sizes = [len(r["c"]) for r in rows]
    c = doc["c"]
    assert (c["bytes_min"], c["bytes_max"]) == (min(sizes), max(sizes))
    assert c["bytes_mean"] == pytest.approx(sum(sizes) / len(sizes)) and c["distinct_estimated"] is False
    assert "length_histogram" not in doc["c"] and "quantiles" not in doc["c"]


def test_hyperloglog_is_within_three_percent_at_a_million():
    values = [b"v%d" % i for i in range(1_000_000)]
    halves = distinct.HyperLogLog.of(values[::2]).merge(distinct.HyperLogLog.of(values[1::2]))
    assert abs(halves.estimate() - 1_000_000) <= 30_000
    assert np.array_equal(halves.registers, distinct.HyperLogLog.of(values).registers)
    small = distinct.HyperLogLog.of(values[:1000])
    assert abs(small.estimate() - 1000) <= 30


def test_long_values_hash_in_lanes_alike_and_still_count_distinct():
    """``native.hash_values`` takes a value's 32-byte blocks in four lanes: the Python twin gives the
    same bits at every length around the blocks, and texts that differ in one byte anywhere (one lane's
    word, the tail) still count as distinct within the HyperLogLog's error."""
    from shardprep.native import fallback

    rng = np.random.default_rng(7)
    values = [rng.bytes(n) for n in (0, 1, 7, 8, 31, 32, 33, 40, 63, 64, 65, 96, 100, 400) for _ in range(5)]
    data, offsets = b"".join(values), np.cumsum([0] + [len(v) for v in values]).astype(np.int64)
    for seed in (0, 99, 2**63 - 1):
        assert native.hash_values(data, offsets, seed) == fallback.hash_values(data, offsets.tobytes(), seed)
    base = bytearray(rng.bytes(400))
    texts = []
    for i in range(100_000):  # one byte changed, at a place that moves through every lane and the tail
        t = bytearray(base)
        t[i % 400] = (t[i % 400] + 1 + i // 400) % 256
        texts.append(bytes(t))
    assert abs(distinct.HyperLogLog.of(texts).estimate() - len(set(texts))) <= 0.03 * len(set(texts))


def test_a_million_distinct_strings_keep_the_stats_small():
    """Exact counts are dropped past the cap: the merged partial pickles (as it travels) to well under 1 MB."""
    features = {"w": FeatureSpec("string", (-1,)), "x": FeatureSpec("float32")}
    encode = example.example_encoder(features, on_missing="omit")
    merged: dict = {}
    peak = 0
    for batch in range(20):
        records = [encode({"w": [b"%d-%d" % (batch, i * 10 + j) for j in range(10)], "x": float(i)})
                   for i in range(5000)]
        merged = feature_stats.merge(merged, feature_stats.batch_stats(records, features))
        peak = max(peak, len(pickle.dumps(merged)) if merged["w"].counts is None else 0)
    assert merged["w"].counts is None and 0 < peak < 1_000_000
    doc = feature_stats.to_json(merged, features)
    assert doc["w"]["distinct_estimated"] and abs(doc["w"]["distinct"] - 1_000_000) <= 30_000
    assert doc["w"]["bytes_min"] == 3 and doc["x"]["quantiles"]["p50"] == pytest.approx(2499.5, rel=0.01)


def test_wide_rows_allocate_only_what_they_hold():
    """2,000 numeric columns of 2 rows: the sketches hold the buckets seen (a few per column)."""
    features = {f"f{i}": FeatureSpec("float32") for i in range(2000)}
    encode = example.example_encoder(features, on_missing="omit")
    records = [encode({f"f{i}": float(i + r) for i in range(2000)}) for r in range(2)]
    partial = feature_stats.batch_stats(records, features)
    assert max(len(s.sketch.positive) for s in partial.values()) <= 2
    assert len(pickle.dumps(partial)) < 2000 * 1000


@pytest.mark.slow
def test_every_engine_writes_the_same_statistics_bytes(tmp_path):
    """The manifest's statistics (sketches included, the id column past the exact cap) on the local
    engine in one process and by default, with one unit and with many, on Dask with two workers and
    on Beam's runner: the same JSON bytes. The CSV's first rows hold missing values (the per-record
    path), the rest none (the column-wise path); its shards read back as TFRecord input (the compiled
    reader, counted in WriteShards: locally and on Beam, whose bundles end in ``flush``) give the same
    statistics again: each record keeps its split (a hash of its bytes)."""
    rng = random.Random(11)
    lines = ["x,n,city,id,label"]
    for i in range(4000):
        x = "NA" if i % 17 == 0 and i < 1500 else f"{rng.lognormvariate(0, 3) * rng.choice([-1, 1, 0]):.6g}"
        lines.append(f"{x},{rng.randrange(-9, 10**6)},c{rng.randrange(3000)},u{i},{i % 3}")
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n")
    docs = {}
    split = ["--num-shards", "3", "--split", "train=0.7,eval=0.3"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(feature_stats, "MAX_DISTINCT", 1000)  # in this process: the local engine's workers fork from it
        for name, extra in {"one": ["--unit-mb", "1", "--local-workers", "1"], "default": [],
                            "many": ["--unit-mb", "0.005"], "many-1": ["--unit-mb", "0.005", "--local-workers", "1"],
                            "dask": ["--unit-mb", "0.005", "--runner", "dask", "--dask-workers", "2"],
                            "beam": ["--unit-mb", "0.005", "--runner", "beam"]}.items():
            out = tmp_path / name
            assert run.main(["--input", str(src), "--output", str(out), *split, *extra]) == 0  # statistics: on by default
            docs[name] = json.dumps(manifest.load(str(out)).statistics, sort_keys=True)
        m = manifest.load(str(tmp_path / "one"))
        shards = [str(tmp_path / "one" / s.path) for sp in m.splits.values() for s in sp.shards]
        for name, extra in {"tfrecord": [], "tfrecord-beam": ["--runner", "beam"]}.items():  # counted in WriteShards
            out = tmp_path / name
            assert run.main([a for s in shards for a in ("--input", s)] + ["--output", str(out), *split, *extra]) == 0
            docs[name] = json.dumps(manifest.load(str(out)).statistics, sort_keys=True)
    if {"dask", "beam"} - set(docs):
        pytest.fail("an engine did not run")
    assert len(set(docs.values())) == 1, {k: v[:300] for k, v in docs.items()}
    assert json.loads(docs["one"])["train"]["id"]["distinct_capped"]
    train = json.loads(docs["one"])["train"]
    assert set(train["x"]["quantiles"]) == set(feature_stats.QUANTILES) and train["city"]["bytes_min"] == 2


def test_the_cost_benchmark_runs_on_a_small_csv(capsys):
    from benchmarks import stats_cost
    assert stats_cost.main(["--mb", "0.2", "--tfrecord-mb", "0.3", "--distinct", "70000",
                            "--contender-records", "500", "--wide", "300"]) == 0
    out = capsys.readouterr().out
    assert "TFDV-style per-record Python" in out and "tfrecord --local-workers 1" in out and "70,000 distinct" in out


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=50))
def test_mean_and_std_are_the_exact_fractions_rounded_once(values):
    """``to_json`` divides the exact integer sums (int / int: correctly rounded) instead of building
    Fractions: the same floats as ``float(Fraction(...))``."""
    from fractions import Fraction
    features = {"n": FeatureSpec("int64")}
    doc = feature_stats.to_json(feature_stats.batch_stats(_records([{"n": v} for v in values], features), features), features)["n"]
    mean = Fraction(sum(values), len(values))
    variance = max(Fraction(sum(v * v for v in values), len(values)) - mean * mean, Fraction(0))
    assert doc["mean"] == float(mean) and doc["std"] == float(variance) ** 0.5
