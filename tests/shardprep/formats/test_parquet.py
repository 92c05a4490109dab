"""Parquet's time columns: int64 in the file's own unit, the unit recorded in the schema and manifest."""
from __future__ import annotations

import datetime
import json

import pytest

from shardprep import manifest, run
from shardprep.errors import InputError
from shardprep.formats import described, expand_inputs, plan_units
from shardprep.schema import FeatureSpec

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

EPOCH = datetime.datetime(1970, 1, 1)
UNITS = {  # Arrow type -> (a value, its integer, the unit the manifest records)
    "ts_utc": (pa.timestamp("us", tz="Europe/Paris"), datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc),
               1714979289000000, "microseconds since 1970-01-01 00:00:00 UTC"),
    "ts_naive": (pa.timestamp("ms"), datetime.datetime(2024, 5, 6, 7, 8, 9), 1714979289000,
                 "milliseconds since 1970-01-01 00:00:00 (no time zone)"),
    "ts_ns": (pa.timestamp("ns"), datetime.datetime(1970, 1, 1, 0, 0, 1), 1_000_000_000,
              "nanoseconds since 1970-01-01 00:00:00 (no time zone)"),
    "day": (pa.date32(), datetime.date(2024, 5, 6), 19849, "days since 1970-01-01"),
    "day64": (pa.date64(), datetime.date(1970, 1, 2), 1, "days since 1970-01-01"),  # Parquet stores date64 as date32
    "clock": (pa.time64("us"), datetime.time(1, 2, 3), 3723_000_000, "microseconds since midnight"),
    "clock32": (pa.time32("s"), datetime.time(0, 1, 0), 60_000, "milliseconds since midnight"),  # and time32[s] as [ms]
    "took": (pa.duration("ms"), datetime.timedelta(seconds=2), 2000, "milliseconds"),
}


def _table(n: int = 40, overrides: dict | None = None):
    columns = {"id": pa.array(range(n), pa.int64())}
    for name, (type_, value, _, _) in UNITS.items():
        columns[name] = pa.array([value] * n, (overrides or {}).get(name, type_))
    return pa.table(columns)


def test_a_run_records_each_time_columns_unit_and_keeps_its_integers(tmp_path):
    pq.write_table(_table(), tmp_path / "a.parquet", row_group_size=16)
    out = tmp_path / "out"
    assert run.main(["--input", str(tmp_path / "a.parquet"), "--output", str(out), "--num-shards", "2",
                     "--no-shuffle"]) == 0
    features = manifest.load(str(out)).features
    assert {name: features[name].get("unit") for name in UNITS} == {name: u[3] for name, u in UNITS.items()}
    assert "unit" not in features["id"] and all(features[name]["dtype"] == "int64" for name in UNITS)
    from tests.conftest import read_with_tensorflow

    rows = read_with_tensorflow(str(out), "train")
    assert len(rows) == 40 and all(row[name] == u[2] for row in rows for name, u in UNITS.items())


def test_a_column_whose_unit_differs_between_files_is_refused_in_one_line(tmp_path, capsys):
    pq.write_table(_table(), tmp_path / "a.parquet")
    pq.write_table(_table(overrides={"ts_naive": pa.timestamp("us")}), tmp_path / "b.parquet")
    assert run.main(["--input", str(tmp_path / "*.parquet"), "--output", str(tmp_path / "out"), "--num-shards", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'ts_naive' counts milliseconds since" in err[0] and "but microseconds since" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_given_schema_gets_the_units_and_a_contradicting_one_is_refused(tmp_path):
    pq.write_table(_table(), tmp_path / "a.parquet")
    files = expand_inputs([str(tmp_path / "a.parquet")])
    plan_units(files)
    given = {"day": FeatureSpec("int64"), "id": FeatureSpec("int64"), "clock": FeatureSpec("string")}
    out = described(files, given)
    assert out["day"].unit == "days since 1970-01-01" and out["id"].unit == "" and out["clock"].unit == ""
    with pytest.raises(InputError, match="says feature 'day' counts hours"):
        described(files, {"day": FeatureSpec("int64", unit="hours")})


def test_the_unit_round_trips_through_json_and_only_on_int64():
    spec = FeatureSpec("int64", (), unit="days since 1970-01-01")
    assert FeatureSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    with pytest.raises(Exception, match="unit"):
        FeatureSpec("float32", (), unit="seconds")
