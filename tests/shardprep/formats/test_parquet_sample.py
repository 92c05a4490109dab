"""Parquet's schema sample (``parquet.sample_parquet``): the columns whose Arrow type and footer
statistics decide what inference makes of them are not read, and the schema (and its warnings) is
the one the rows themselves give, on random files: nulls, all-null columns, statistics left out,
integers past 2**24, lists, row groups cut by the sample's quota, a column's type differing between
files."""
from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import schema as schema_mod
from shardprep.formats import expand_inputs, files, parquet
from shardprep.formats.base import Format

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_BIG = 2**40
_KINDS = {  # name -> (Arrow type, values)
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int64": (pa.int64(), st.integers(-1000, 1000)),
    "int64_big": (pa.int64(), st.integers(-_BIG, _BIG)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "bool": (pa.bool_(), st.booleans()),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "string": (pa.string(), st.text(max_size=4)),
    "binary": (pa.binary(), st.binary(max_size=4)),
    "null": (pa.null(), st.none()),
    "date32": (pa.date32(), st.integers(-10_000, 10_000)),
    "dict": (pa.dictionary(pa.int32(), pa.string()), st.sampled_from(["a", "bb"])),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
}


@st.composite
def _files(draw):
    names = [f"c{i}" for i in range(draw(st.integers(1, 4)))]
    out = []
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 12))
        columns = {}
        for name in names:
            type_, values = _KINDS[draw(st.sampled_from(sorted(_KINDS)))]
            nulls = draw(st.sampled_from(["none", "some", "head", "all"]))
            items = []
            for i in range(n):
                null = nulls == "all" or (nulls == "head" and i < n // 2) or (nulls == "some" and draw(st.booleans()))
                items.append(None if null else draw(values))
            if pa.types.is_date32(type_):
                array = pa.array(items, pa.int32()).cast(type_)
            elif pa.types.is_dictionary(type_):
                array = pa.array(items, pa.string()).dictionary_encode()
            else:
                array = pa.array(items, type_)
            columns[name] = array
        out.append((pa.table(columns), draw(st.sampled_from([1, 3, 5])), draw(st.booleans())))
    return out, draw(st.sampled_from([1, 4, 7, 1000]))


def _outcome(rows):
    try:
        return schema_mod.infer_schema(rows, text=False)
    except schema_mod.SchemaError as e:
        return str(e)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_files())
def test_the_sample_infers_what_reading_every_column_infers(tmp_path_factory, caplog, case):
    tables, max_rows = case
    tmp = tmp_path_factory.mktemp("sample")
    for i, (table, group_rows, statistics) in enumerate(tables):
        pq.write_table(table, tmp / f"t{i}.parquet", row_group_size=group_rows, write_statistics=statistics)
    inputs = expand_inputs([str(tmp / "*.parquet")])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardprep"):
        got = _outcome(files.sample_rows(inputs, max_rows=max_rows))
        warned = [r.getMessage() for r in caplog.records]
        caplog.clear()
        original = parquet.ParquetFormat.sample
        parquet.ParquetFormat.sample = Format.sample  # every row read, as before the sample was typed
        try:
            expected = _outcome(files.sample_rows(inputs, max_rows=max_rows))
        finally:
            parquet.ParquetFormat.sample = original
        assert got == expected
        assert warned == [r.getMessage() for r in caplog.records]
