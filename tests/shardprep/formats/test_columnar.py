"""The column-wise Parquet and JSON Lines paths give the same records and dead letters as the
per-record paths: on random tables and lines, with nulls, non-finite and out-of-range values, wrong
types and extra columns, whatever the batch at which the fall-back happens."""
from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import formats
from shardprep.formats import jsonl, parquet
from shardprep.schema import FeatureSpec
from tests.shardprep.formats.csv.test_arrow import _config, _outcome, _reference, _through_parse

F, I64, S = "float32", "int64", "string"

_floats = st.one_of(st.floats(width=32), st.floats(), st.sampled_from([math.nan, math.inf, 1e39, -0.0]))
_ints = st.integers(-(2**63), 2**63 - 1)
_text = st.text(max_size=12)
# Arrow type -> values strategy (None: a null)
_COLUMNS = {
    "float64": (pa.float64(), _floats),
    "float32": (pa.float32(), st.floats(width=32)),
    "int64": (pa.int64(), _ints),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), _text),
    "binary": (pa.binary(), st.binary(max_size=8)),
    "date32": (pa.date32(), st.integers(-10_000, 10_000)),
    "dict": (pa.dictionary(pa.int32(), pa.string()), st.sampled_from(["a", "bb", "é"])),
}


@st.composite
def _tables(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(_COLUMNS)), min_size=1, max_size=5))
    n = draw(st.integers(1, 40))
    columns = {}
    for i, kind in enumerate(kinds):
        type_, values = _COLUMNS[kind]
        nulls = draw(st.booleans())
        items = [None if nulls and draw(st.integers(0, 9)) == 0 else draw(values) for _ in range(n)]
        if kind == "date32":
            array = pa.array(items, pa.int32()).cast(pa.date32())
        elif kind == "dict":
            array = pa.array(items, pa.string()).dictionary_encode()
        else:
            array = pa.array(items, type_)
        columns[f"c{i}"] = array
    names = list(columns)
    features = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    schema = {name: FeatureSpec(draw(st.sampled_from((F, I64, S))), ()) for name in features}
    return pa.table(columns), schema


def _units(path, unit_bytes=1 << 30):
    file = formats.InputFile(0, str(path), path.stat().st_size, "parquet", False)
    return parquet.ParquetFormat().plan(file, unit_bytes)


def _unit(path):
    (unit,) = _units(path)
    return unit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_tables(), st.sampled_from(["reject", "ignore"]), st.sampled_from([3, 20_000]), st.sampled_from([4, 65536]),
       st.sampled_from([16, 7]), st.sampled_from([1 << 30, 1]), st.sampled_from(["reject", "omit"]))
def test_parquet_fast_path_equals_the_per_record_path(tmp_path, case, extra_fields, batch_records, fast_rows,
                                                      group_rows, unit_bytes, on_missing):
    """Whole files and files in row ranges (``unit_bytes=1``: every row group cut into ranges); a
    null a dead letter, or left out (the default)."""
    table, schema = case
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=group_rows)
    old, parquet.FAST_BATCH_ROWS = parquet.FAST_BATCH_ROWS, fast_rows
    try:
        for unit in _units(path, unit_bytes):
            got = _outcome(_through_parse, _config(tmp_path, schema, extra_fields, batch_records, on_missing), unit)
            assert got == _outcome(_reference, unit, schema, extra_fields, on_missing)
    finally:
        parquet.FAST_BATCH_ROWS = old


def test_clean_parquet_goes_column_wise_whole(tmp_path):
    table = pa.table({"x": pa.array([0.5, 1.25, -3.0]), "n": pa.array([1, 2, 3]), "s": pa.array(["a", "é", ""]),
                      "d": pa.array([1, 2, 3], pa.int32()).cast(pa.date32())})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    schema = {"x": FeatureSpec(F, ()), "n": FeatureSpec(I64, ()), "s": FeatureSpec(S, ()), "d": FeatureSpec(I64, ())}
    batches = list(parquet.framed_parquet(_unit(path), schema, "reject"))
    assert sum(len(b.ends) for b in batches) == 3
    assert _outcome(_through_parse, _config(tmp_path, schema), _unit(path)) == \
        _outcome(_reference, _unit(path), schema, "reject")


@pytest.mark.parametrize("fast_rows, grouped_cells", [(65536, 1 << 24), (4, 1 << 24), (65536, 0)])
def test_a_wide_parquet_file_read_a_group_of_columns_at_a_time_equals_the_per_record_path(
        tmp_path, monkeypatch, fast_rows, grouped_cells):
    """Past ``READ_COLUMNS`` columns a short unit's columns are read a group after another (in one
    batch or several, joined), a long one all at once in batches of ``BATCH_CELLS`` (ints, floats,
    strings, dates; in row groups, cut into row ranges): the same records as row by row."""
    monkeypatch.setattr(parquet, "FAST_BATCH_ROWS", fast_rows)
    monkeypatch.setattr(parquet, "GROUPED_CELLS", grouped_cells)
    n, width = 23, parquet.READ_COLUMNS + 7
    kinds = [(pa.int64(), I64, lambda i, r: i * r - 7), (pa.float64(), F, lambda i, r: i / (r + 1)),
             (pa.string(), S, lambda i, r: f"v{i % 5}{'é' * (r % 3)}"), (pa.int32(), S, lambda i, r: i - r)]
    columns, schema = {}, {}
    for i in range(width):
        type_, dtype, value = kinds[i % len(kinds)]
        columns[f"c{i:05d}"] = pa.array([value(i, r) for r in range(n)], type_)
        schema[f"c{i:05d}"] = FeatureSpec(dtype, ())
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path, row_group_size=10)
    for unit_bytes in (1 << 30, 1):  # whole, and each row group cut into ranges (of a row each: three tried)
        units = _units(path, unit_bytes)
        assert (len(units) == 1) == (unit_bytes > 1)
        for unit in units[::10]:
            got = _outcome(_through_parse, _config(tmp_path, schema), unit)
            assert len(got[0]) == unit.end - unit.start and got == _outcome(_reference, unit, schema, "reject")


@pytest.mark.parametrize("values, type_, dtype", [([1.0, None], pa.float64(), F), ([1.0, math.nan], pa.float64(), F),
                                                  ([2**63 + 1, 1], pa.uint64(), I64), ([1, None], pa.int64(), I64),
                                                  ([None, 2], pa.int32(), I64), ([None, 2], pa.int64(), F)])
@pytest.mark.parametrize("others", [0, 1, parquet.READ_COLUMNS + 1])  # more int columns: converted together; wide
def test_parquet_values_to_check_row_by_row_fall_back(tmp_path, values, type_, dtype, others):
    path = tmp_path / "t.parquet"
    columns = {"x": pa.array(values, type_), **{f"y{i}": pa.array([i, i]) for i in range(others)}}
    pq.write_table(pa.table(columns), path)
    schema = {name: FeatureSpec(dtype if name == "x" else I64, ()) for name in columns}
    with pytest.raises(formats.Unsupported):
        list(parquet.framed_parquet(_unit(path), schema, "reject"))
    assert _outcome(_through_parse, _config(tmp_path, schema), _unit(path)) == \
        _outcome(_reference, _unit(path), schema, "reject")


# --- JSON Lines ------------------------------------------------------------------------------------

_JSON_VALUES = st.one_of(
    st.floats(width=32).map(repr), st.floats(allow_nan=False).map(repr), st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["NaN", "Infinity", "1e39", "true", "null", "[1]", "[1.5]", '"7"', "{}", '"\\ud800"', "1.0", '" "']),
    st.text(max_size=6).map(json.dumps),
)


@st.composite
def _jsonl_files(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "é", "x y"]), min_size=1, max_size=3, unique=True))
    schema = {name: FeatureSpec(draw(st.sampled_from((F, I64, S))), ()) for name in names}
    lines = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.integers(0, 19))
        keys = list(names) + ([draw(st.sampled_from(["extra", "\ud83d"]))] if kind == 0 else [])  # a lone surrogate key
        if kind == 1 and len(keys) > 1:
            keys = keys[1:]  # a missing field
        fields = ", ".join(f"{json.dumps(k)}: {draw(_JSON_VALUES)}" for k in keys)
        line = {2: "", 3: "42", 4: "{not json", 5: "\xff"}.get(kind, "{" + fields + "}")
        lines.append(line)
    return schema, "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_jsonl_files(), st.sampled_from(["reject", "ignore"]), st.sampled_from([3, 20_000]), st.sampled_from([2, 8192]),
       st.sampled_from(["reject", "omit"]))
def test_jsonl_fast_path_equals_the_per_record_path(tmp_path, case, extra_fields, batch_records, fast_rows, on_missing):
    schema, text = case
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff"))
    file = formats.InputFile(0, str(path), path.stat().st_size, "jsonl", False)
    (unit,) = jsonl.JsonLinesFormat().plan(file, 1 << 30)
    old, jsonl.FAST_BATCH_ROWS = jsonl.FAST_BATCH_ROWS, fast_rows
    try:
        got = _outcome(_through_parse, _config(tmp_path, schema, extra_fields, batch_records, on_missing), unit)
    finally:
        jsonl.FAST_BATCH_ROWS = old
    assert got == _outcome(_reference, unit, schema, extra_fields, on_missing)


def test_clean_jsonl_goes_column_wise_whole(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"x": 0.5, "n": 3, "s": "é"}\n\n{"x": 2, "n": -1, "s": ""}\n')
    file = formats.InputFile(0, str(path), path.stat().st_size, "jsonl", False)
    (unit,) = jsonl.JsonLinesFormat().plan(file, 1 << 30)
    schema = {"x": FeatureSpec(F, ()), "n": FeatureSpec(I64, ()), "s": FeatureSpec(S, ())}
    assert sum(len(b.ends) for b in jsonl.framed_jsonl(unit, schema, "reject")) == 2
    assert _outcome(_through_parse, _config(tmp_path, schema), unit) == _outcome(_reference, unit, schema, "reject")
