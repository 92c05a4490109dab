"""``shardprep.formats.parquet_meta``: the schema sample's kinds from a Parquet file's footer: a
column its Arrow type and statistics settle is decided without a read (a wide table of small
numbers: none read); the ones they leave open (big integers, nulls in the sampled rows, lists) are
named to be read; the unit a time column's integers count."""
from __future__ import annotations

import pytest

from shardprep.formats import expand_inputs, parquet_meta

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _file(path):
    (file,) = expand_inputs([str(path)])
    return file


def test_a_wide_table_of_small_numbers_is_sampled_without_a_read(tmp_path):
    names = [f"c{i}" for i in range(3000)]
    pq.write_table(pa.table({n: pa.array([i % 7, None, 3], pa.int64()) for i, n in enumerate(names)}),
                   tmp_path / "w.parquet")
    decided, read = parquet_meta.sample_kinds(_file(tmp_path / "w.parquet"), 1000)
    assert read == [] and set(decided) == set(names) and set(map(type, decided.values())) == {int}


def test_columns_the_type_or_statistics_leave_open_are_read(tmp_path):
    pq.write_table(pa.table({
        "small": pa.array([1, 2], pa.int64()),
        "big": pa.array([1, 2**30], pa.int64()),  # past 2**24: the float32 warning needs its values
        "head_null": pa.array([None, "x"], pa.string()),  # null in the one row sampled
        "list": pa.array([[1], [2, 3]], pa.list_(pa.int64())),
        "empty": pa.array([None, None], pa.null()),
        "text": pa.array(["a", "b"]),
    }), tmp_path / "t.parquet")
    decided, read = parquet_meta.sample_kinds(_file(tmp_path / "t.parquet"), 1)
    assert decided == {"small": 0, "empty": None, "text": ""}
    assert read == ["big", "head_null", "list"]


def test_every_arrow_time_type_names_what_its_integer_counts():
    assert parquet_meta.time_unit(pa.timestamp("s", tz="UTC")) == "seconds since 1970-01-01 00:00:00 UTC"
    assert parquet_meta.time_unit(pa.timestamp("ns")) == "nanoseconds since 1970-01-01 00:00:00 (no time zone)"
    assert parquet_meta.time_unit(pa.date32()) == "days since 1970-01-01"
    assert parquet_meta.time_unit(pa.date64()) == "milliseconds since 1970-01-01"
    assert parquet_meta.time_unit(pa.time32("s")) == "seconds since midnight"
    assert parquet_meta.time_unit(pa.time64("ns")) == "nanoseconds since midnight"
    assert parquet_meta.time_unit(pa.duration("us")) == "microseconds"
    assert [parquet_meta.time_unit(t) for t in (pa.int64(), pa.string(), pa.float64())] == ["", "", ""]
