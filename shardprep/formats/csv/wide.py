"""The column-wise path of a wide CSV unit: the csv module's rows, turned into columns, encoded by ``example.columnar``.

pyarrow's CSV reader costs memory and time per column for every reader it opens, so past ``WIDE_COLUMNS`` columns a unit is
read by the per-record reader (``formats.csv.source.read_csv``, given as ``records``, rows as lists) and
its rows are turned into columns here, ``BATCH_CELLS`` cells at a time. The contract is
``formats.csv.arrow``'s: exactly the records the per-record path would give, or ``Unsupported``
before the first batch that might differ (a bad record, a missing value, a number that is not
plain decimal digits, a float that is not finite in float32), and the per-record path goes on
from there. int64 text is checked and converted as ``csv.arrow`` does it; float32 text goes
through Python's ``float``, as the per-record encoder's.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from shardprep.example import columnar
from shardprep.formats.base import Bad, Record, Unsupported, WorkUnit
from shardprep.formats.csv.arrow import numbers
from shardprep.framing import FramedBatch
from shardprep.schema import Schema

__all__ = ["BATCH_CELLS", "WIDE_COLUMNS", "wide_batches"]

WIDE_COLUMNS = 2000  # more columns than this: this path, not pyarrow's reader
BATCH_CELLS = 1 << 20  # cells turned into columns at once (~60 bytes each as Python text): per batch, the
# encoder's fixed cost per column is a small share of the column's >= 1M / columns cells


def wide_batches(unit: WorkUnit, schema: Schema, records: Iterator[Record]) -> Iterator[FramedBatch]:
    """Framed records of ``unit``'s rows (``records``: ``read_csv(unit, lists=True)``) in file order."""
    index = {name: i for i, name in enumerate(unit.columns)}
    picks = [(name, index[name]) for name in schema]  # usable(): every feature is a column
    per_batch = max(1, BATCH_CELLS // len(unit.columns))
    rows: list[list] = []
    try:
        for position, row in records:
            if isinstance(row, Bad):
                yield from _encode(rows, schema, picks)
                raise Unsupported(f"record {position}: {row.reason}")
            rows.append(row)
            if len(rows) >= per_batch:
                yield from _encode(rows, schema, picks)
                rows = []
        yield from _encode(rows, schema, picks)
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()


def _encode(rows: list[list], schema: Schema, picks: list[tuple[str, int]]) -> Iterator[FramedBatch]:
    if not rows:
        return
    n = len(rows)
    if any(None in row for row in rows):  # a null value: which column's (one of the features)?
        name = next((name for name, i in picks if any(row[i] is None for row in rows)), None)
        if name is not None:
            raise Unsupported(f"column {name!r} holds an empty value")
    table = list(zip(*rows))  # the file's columns, n values each
    by_dtype: dict[str, list[str]] = {"string": [], "float32": [], "int64": []}
    for name, _ in picks:
        by_dtype[schema[name].dtype].append(name)
    index = dict(picks)
    columns: dict = {}
    try:
        for dtype, names in by_dtype.items():
            if not names:
                continue
            flat = list(itertools.chain.from_iterable(table[index[name]] for name in names))
            if dtype == "string":
                columns.update(zip(names, columnar.utf8_columns(flat, n)))
            elif dtype == "float32":
                try:
                    whole = pa.array(np.fromiter(map(float, flat), dtype=np.float64, count=len(flat)))
                except ValueError:
                    raise Unsupported("a float32 column holds a value that is not a number") from None
                columns.update(numbers(dtype, names, whole, n))
            else:
                columns.update(numbers(dtype, names, pa.array(flat, pa.string()), n))
    except pa.ArrowException as e:
        raise Unsupported(f"a value pyarrow cannot convert: {e}") from None
    yield from columnar.framed_batches(schema, columns, n)
