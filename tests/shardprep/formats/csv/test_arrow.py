"""The column-wise CSV path gives the same records and dead letters as the per-record path.

``columnar`` is checked byte for byte against ``example_encoder`` + ``framing.frame``; the
whole fast path (pyarrow parse, checks, fall-back with skip) against the per-record reading of the
same unit, on random CSV text full of quotes, carriage returns, bad numbers and bad bytes.
"""
from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import example, formats, framing
from shardprep.config import ReshardConfig
from shardprep.example import columnar
from shardprep.formats.csv import arrow as csv_arrow
from shardprep.formats.cuts import resolve_alone
from shardprep.graph.parse import Parse
from shardprep.schema import FeatureSpec, schema_to_json

F, I64, S = "float32", "int64", "string"


# --- columnar: bytes equal to the row encoder ------------------------------------------------------

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
_int64 = st.integers(-(2**63), 2**63 - 1)
_text = st.one_of(st.text(max_size=40), st.text(max_size=3).map(lambda t: t * 6000))  # lengths past 2**14
_VALUES = {F: _finite32, I64: _int64, S: _text}


@st.composite
def _batches(draw):
    names = draw(st.lists(_names, min_size=1, max_size=7, unique=True))
    schema = {name: FeatureSpec(draw(st.sampled_from((F, I64, S))), ()) for name in names}
    rows = draw(st.lists(st.fixed_dictionaries({n: _VALUES[spec.dtype] for n, spec in schema.items()}),
                         min_size=1, max_size=12))
    return schema, rows


def _columns(schema, rows):
    out = {}
    for name, spec in schema.items():
        values = [row[name] for row in rows]
        if spec.dtype == S:
            data = [v.encode() for v in values]
            out[name] = (np.cumsum([0, *map(len, data)]), b"".join(data))
        else:
            out[name] = np.array(values, dtype=np.float32 if spec.dtype == F else np.int64)
    return out


@settings(max_examples=300, deadline=None)
@given(_batches())
def test_columnar_gives_the_row_encoders_bytes(batch):
    schema, rows = batch
    encode = example.example_encoder(schema)
    expected = [framing.frame(encode(row)) for row in rows]
    for cell_rows in (columnar._CELL_ROWS, 0):  # all cells at once (short batches), feature by feature (long ones)
        saved, columnar._CELL_ROWS = columnar._CELL_ROWS, cell_rows
        try:
            blob, ends = columnar.encode_framed(schema, _columns(schema, rows), len(rows))
        finally:
            columnar._CELL_ROWS = saved
        assert bytes(blob) == b"".join(expected)
        assert ends.tolist() == np.cumsum([len(r) for r in expected]).tolist()


def test_columnar_takes_scalar_schemas_only():
    assert columnar.supports({"a": FeatureSpec(F, ()), "b": FeatureSpec(S, ())})
    assert not columnar.supports({"a": FeatureSpec(F, (3,))})
    assert not columnar.supports({"a": FeatureSpec(I64, (-1,))})


# --- the fast path against the per-record path ------------------------------------------------------


def _config(tmp_path, schema, extra_fields="reject", batch_records=20_000, on_missing="reject"):
    return ReshardConfig(output=str(tmp_path / "out"), run_id="run-test", features=schema_to_json(schema),
                         sources=(), num_shards=1, extra_fields=extra_fields, batch_records=batch_records,
                         on_missing=on_missing)  # reject: a null is dead letter missing_value on both paths


def _reference(unit, schema, extra_fields, on_missing="reject"):
    """The per-record path alone: framed records and (position, reason, detail) of bad ones."""
    encode = example.example_encoder(schema, extra_fields=extra_fields, on_missing=on_missing)
    out = []
    for position, row in formats.read_unit(unit):
        if isinstance(row, formats.Bad):
            out.append((position, row.reason, row.detail))
            continue
        try:
            out.append(framing.frame(encode(row)))
        except example.RecordError as e:
            out.append((position, e.reason, e.detail))
    return out


def _through_parse(config, unit):
    """What ``_Parse`` reads from the unit: the fast path while it can, then the per-record path."""
    parse = Parse(config)
    parse.setup()
    out = []
    for item in parse._batches(unit):
        if isinstance(item, formats.Bad):
            out.append((item.position, item.reason, item.detail))
            continue
        for blob, ends in item:  # a batch, as the blocks it was read in
            bounds = [0, *ends.tolist()]
            out += [bytes(blob[a:b]) for a, b in zip(bounds, bounds[1:])]
    return out


def _outcome(read, *args):
    """(records, bad ones) in file order, or the InputError; dead letters and records are separate streams."""
    try:
        items = read(*args)
    except formats.InputError as e:
        return ("InputError", str(e))
    return [i for i in items if isinstance(i, bytes)], [i for i in items if isinstance(i, tuple)]


_NOISE = ["a", "é", " ", ",", '"', '""', "\r", "\n", "\r\n", "0", "7", "-", ".", "e", "x", "0x1", "+", "\t",
          "nan", "inf", "1e39", "\ufeff", "\x00"]


def _good(dtype):
    if dtype == F:
        return st.one_of(_finite32.map(repr), st.floats(-1e6, 1e6).map(lambda x: f"{x:.5g}"))
    if dtype == I64:
        return _int64.map(str)
    return st.lists(st.sampled_from(["a", "b", " ", ",", '"', "\n", "é", "\r\n"]), max_size=8).map("".join).map(
        lambda t: f'"{t.replace(chr(34), chr(34) * 2)}"' if any(c in t for c in ',"\n\r') else t)


@st.composite
def _csv_files(draw):
    dtypes = draw(st.lists(st.sampled_from((F, I64, S)), min_size=1, max_size=4))
    columns = [f"c{i}" for i in range(len(dtypes))]
    schema = {c: FeatureSpec(t, ()) for c, t in zip(columns, dtypes)}
    lines = []
    for _ in range(draw(st.integers(0, 25))):
        if draw(st.integers(0, 5)) == 0:  # a noisy line
            lines.append("".join(draw(st.lists(st.sampled_from(_NOISE), max_size=10))))
        else:  # now and then a blank field (spaces: a missing number, as an empty one)
            lines.append(",".join(draw(st.sampled_from(["", " ", " \t"]) if draw(st.integers(0, 15)) == 0 else _good(t))
                                  for t in dtypes))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    # names as written by hand, quoted (pyarrow, R, spreadsheets), or a quoted name over two lines
    quoting = draw(st.sampled_from(["plain", "quoted", "newline"]))
    if quoting == "newline":
        columns[-1] = "c\nz"
        schema = {c: FeatureSpec(t, ()) for c, t in zip(columns, dtypes)}
    names = columns if quoting == "plain" else [f'"{c}"' for c in columns]
    header = ",".join(names) + ending
    data = (header + ending.join(lines) + draw(st.sampled_from(["", ending]))).encode()
    if draw(st.integers(0, 7)) == 0:  # a byte that is not UTF-8, after the header
        at = draw(st.integers(len(header), len(data)))
        data = data[:at] + b"\xff" + data[at:]
    unit_bytes = draw(st.sampled_from([16, 64, 1 << 20]))
    return schema, data, unit_bytes


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(_csv_files(), st.sampled_from(["reject", "ignore"]), st.booleans(), st.sampled_from([128, 4 << 20]),
       st.sampled_from([3, 20_000]), st.sampled_from([formats.base.MAX_RECORD_BYTES, 24, 40, 70]),
       st.sampled_from(["reject", "omit"]))
def test_fast_path_equals_the_per_record_path(tmp_path, case, extra_fields, with_extra_column, block_bytes,
                                              batch_records, max_record_bytes, on_missing):
    schema, data, unit_bytes = case
    if with_extra_column:  # a column outside the schema: dropped with "ignore", every row rejected with "reject"
        schema = dict(list(schema.items())[:-1]) or schema
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    files = formats.expand_inputs([str(path)])
    try:
        units = formats.plan_units(files, unit_bytes=unit_bytes, max_record_bytes=max_record_bytes)
    except formats.InputError as e:  # every row's field count differs from the header's: refused at planning
        assert "names but the rows have" in str(e)
        return
    config = _config(tmp_path, schema, extra_fields, batch_records, on_missing)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(csv_arrow, "BLOCK_BYTES", block_bytes)  # small blocks: falling back after some were given
        patch.setattr(csv_arrow, "MIN_BLOCK_BYTES", 1)  # records around a tiny --max-record-mb, column-wise too
        for unit in map(resolve_alone, units):  # exact cuts, as Parse.process finds them before reading
            assert _outcome(_through_parse, config, unit) == _outcome(_reference, unit, schema, extra_fields,
                                                                      on_missing)


def _write_csv(path, rows, header="id,x,label,text"):
    path.write_text(header + "\n" + "".join(rows))
    files = formats.expand_inputs([str(path)])
    return formats.plan_units(files)[0]


SCHEMA = {"id": FeatureSpec(I64, ()), "x": FeatureSpec(F, ()), "label": FeatureSpec(I64, ()), "text": FeatureSpec(S, ())}


@pytest.mark.parametrize("header", ["id,x,label,text", '"id","x","label","text"', '\ufeff"id",x,"label",text\r'])
def test_clean_csv_goes_column_wise_whole(tmp_path, header):
    """Quoted names too (pyarrow, R and spreadsheets write them): the header is still one line."""
    rows = [f'{i},{i / 7:.4f},{i % 3},"t, {i}"\n' for i in range(5000)]
    unit = _write_csv(tmp_path / "a.csv", rows, header)
    batches = list(csv_arrow.framed_batches(unit, SCHEMA, "reject"))  # raises Unsupported if it stepped aside
    assert sum(len(ends) for _, ends in batches) == 5000
    assert b"".join(bytes(b) for b, _ in batches) == b"".join(r for r in _reference(unit, SCHEMA, "reject"))


@pytest.mark.parametrize("bad, reason", [
    ("0x10,1.5,1,t", "type_mismatch"),      # pyarrow reads hex ints; Python's int() does not
    ("5,1e39,1,t", "out_of_range"),         # beyond float32
    ("6,,1,t", "missing_value"),
    ("7,1.5,1", "csv_columns"),
    ("8,1.5,1,a\rb", "csv_parse"),          # a lone \r: pyarrow would take it for a line end
])
@pytest.mark.parametrize("batch_records", [500, 20_000])  # batches given before the fall-back, or none
def test_a_bad_row_late_in_the_unit_falls_back_with_its_exact_line(tmp_path, monkeypatch, bad, reason, batch_records):
    monkeypatch.setattr(csv_arrow, "BLOCK_BYTES", 4096)  # many blocks: the fall-back skips those already given
    rows = [f"{i},{i / 7:.4f},{i % 3},text {i}\n" for i in range(3000)]
    rows[2500] = bad + "\n"
    unit = _write_csv(tmp_path / "a.csv", rows)
    records, bad_items = _outcome(_through_parse, _config(tmp_path, SCHEMA, batch_records=batch_records), unit)
    assert (records, bad_items) == _outcome(_reference, unit, SCHEMA, "reject")
    assert [(p, r) for p, r, _ in bad_items] == [(2502, reason)]  # line 1 is the header
    assert len(records) == 2999


def test_a_unit_ending_inside_quotes_is_left_to_the_per_record_path(tmp_path):
    unit = _write_csv(tmp_path / "a.csv", ["1,1.5,1,ok\n", '2,2.5,0,"never closed\n', "3,3.5,1,more\n"])
    with pytest.raises(csv_arrow.Unsupported):
        list(csv_arrow.framed_batches(unit, SCHEMA, "reject"))
    records, bad_items = _outcome(_through_parse, _config(tmp_path, SCHEMA), unit)
    assert (records, bad_items) == _outcome(_reference, unit, SCHEMA, "reject")
    assert len(records) == 1 and bad_items[0][:2] == (3, "csv_parse")


def test_truncated_gzip_falls_back(tmp_path):
    rows = "".join(f"{i},{i}.5,{i % 2},row {i}\n" for i in range(20000))
    data = gzip.compress(("id,x,label,text\n" + rows).encode())
    path = tmp_path / "a.csv.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    unit = formats.plan_units(formats.expand_inputs([str(path)]))[0]
    records, bad_items = _outcome(_through_parse, _config(tmp_path, SCHEMA), unit)
    assert (records, bad_items) == _outcome(_reference, unit, SCHEMA, "reject")
    assert len(records) > 1000 and [b[1] for b in bad_items] == ["gzip_truncated"]


def test_pyarrow_reads_numbers_as_python_does(tmp_path):
    """pyarrow reads 20,000 random decimal spellings (long ones, exponents, signs, subnormals) to the
    same float32 bits as Python's float(), and plain integers to the same int64 as int()."""
    rng = np.random.default_rng(5)
    digits = lambda k: "".join(map(str, rng.integers(0, 10, k)))  # noqa: E731
    texts = []
    for _ in range(20000):
        mantissa = digits(rng.integers(1, 20)) + rng.choice(["", "." + digits(rng.integers(0, 25))])
        exponent = rng.choice(["", f"e{rng.integers(-75, 10)}", f"E+{rng.integers(0, 10)}"])
        texts.append(rng.choice(["", "-", "+"]) + mantissa + exponent)
    ints = [t for t in texts if "." not in t and "e" not in t.lower() and not t.startswith("+") and abs(int(t)) < 2**63]
    for dtype, values in ((F, texts), (I64, ints)):
        path = tmp_path / f"{dtype}.csv"
        path.write_text("x,y\n" + "".join(f"{t},{t}\n" for t in values))
        schema = {"x": FeatureSpec(dtype, ()), "y": FeatureSpec(S, ())}
        unit = formats.plan_units(formats.expand_inputs([str(path)]))[0]
        fast = b"".join(bytes(blob) for blob, _ in csv_arrow.framed_batches(unit, schema, "reject"))
        assert fast == b"".join(_reference(unit, schema, "reject")), dtype
        assert len(values) > 2000
