"""``shardprep.stats.feature_stats`` (issue 36): merges of any partition in any order give the same
manifest JSON, small caps switch to sketches, a bounded memory per feature whatever the cardinality,
exact means and standard deviations, and every engine writes the same statistics bytes."""
from __future__ import annotations

import json
import os
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import example, manifest, run
from shardprep.schema import FeatureSpec
from shardprep.stats import feature_stats
from tests.shardprep.stats.stats_fixtures import FEATURES, small_caps


def _records(rows: list[dict], features: dict = FEATURES) -> list[bytes]:
    encode = example.example_encoder(features, on_missing="omit")
    return [encode(r) for r in rows]


def _rows(n: int, rng: random.Random) -> list[dict]:
    return [{"x": None if rng.random() < 0.1 else rng.choice([0.0, rng.gauss(0, 10), rng.lognormvariate(0, 8)]),
             "n": rng.randrange(-3, 1000),
             "c": f"s{rng.randrange(400)}", "v": [rng.random() for _ in range(rng.randrange(0, 40))],
             "w": [f"{rng.randrange(10**9)}" for _ in range(rng.randrange(0, 3))]} for _ in range(n)]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_any_partition_merged_in_any_order_gives_the_same_json(seed):
    """With the caps small (distinct strings, list lengths, buckets), so every switch from exact counts
    to a sketch happens at some point of some partitions: still the same JSON bytes."""
    with small_caps():
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


def test_small_caps_switch_to_sketches():
    rows = _rows(300, random.Random(1))
    with small_caps():
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


def test_the_cost_benchmark_makes_and_measures_the_long_string_tables(tmp_path, capsys):
    """Issue 61's shapes, small: a CSV of ~400-byte texts and Examples with bytes features, each in
    three uneven files, re-sharded with statistics off and on."""
    from benchmarks import stats_cost
    paths = stats_cost.write_strings_csv(tmp_path, 2000)
    sizes = [os.path.getsize(p) for p in paths]
    assert len(paths) == 3 and sizes[0] > sizes[1] > sizes[2] and 400 < sum(sizes) / 2000 < 500
    tfrecords, records = stats_cost.write_bytes_tfrecords(tmp_path, 2)
    assert len(tfrecords) == 3 and records > 1000
    assert stats_cost.main(["--shape", "strings", "--shape", "bytes", "--rows", "3000", "--bytes-mb", "1",
                            "--modes", "1"]) == 0
    out = capsys.readouterr().out
    assert "strings  --local-workers 1" in out and "bytes    --local-workers 1" in out and "train=0.9,eval=0.1" in out


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
