"""The compiled JSON Lines block reader (``native.jsonl_columns``, through ``formats.jsonl_block``):
where it takes a block, the shards and dead letters are those of the per-record path; on lines aimed at
a hand-written JSON reader (escapes in keys and values, surrogate pairs, duplicate and escaped keys,
number grammar, invalid UTF-8, white space JSON does not allow, nested values of ignored fields,
lines that merge or split when joined); numbers are read exactly as orjson / ``float()`` read them;
and it does take clean blocks. ``tests/shardprep/formats/test_jsonl.py`` covers the block reading around it."""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import random

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import formats, native
from shardprep.formats import jsonl, jsonl_block
from shardprep.formats.cuts import resolve_alone
from shardprep.native import fallback
from shardprep.schema import FeatureSpec
from tests.shardprep.formats.csv.test_arrow import _config, _outcome, _reference, _through_parse

F, I64, S = "float32", "int64", "string"
pytestmark = pytest.mark.skipif(not native.NATIVE, reason="the compiled extension is not built here")

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_GOOD = {
    F: st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False).map(repr),
                 st.floats(-1e30, 1e30).map(lambda x: f"{x:.17g}"), st.integers(-(2**70), 2**70).map(str),
                 st.sampled_from(["0", "-0", "-0.0", "0e5", "-0E-0", "1E5", "1e+5", "2.5e-3", "1e-50", "3.4028235e38",
                                  "123456789012345678901234567890", "0.1000000000000000055511151231257827"])),
    I64: st.one_of(st.integers(-(2**63), 2**63 - 1).map(str), st.sampled_from(["-0", "0", "9223372036854775807"])),
    S: st.one_of(_text.map(json.dumps), _text.map(lambda t: json.dumps(t, ensure_ascii=False)),
                 st.sampled_from(['"\\ud83d\\ude00"', '"\\u0000\\/\\b\\f\\n\\r\\t\\"\\\\"', '"\\u00E9"', '""'])),
}
_ODD = st.sampled_from([
    "NaN", "-Infinity", "Infinity", "1e39", "1e400", "-1e400", "true", "false", "null", "[1]", '"7"', "{}", "1.0",
    "9223372036854775808", "-9223372036854775809", "18446744073709551616", "-18446744073709551617", "01", "1.",
    ".5", "+1", "0x10", '"\\ud800"', '"\\udc00x"', '"\\x41"', '"a\tb"', '"\\u12"', "1e", "--1", "1 2",
])
_EXTRA = st.sampled_from(['1', '"x"', '[1, {"a": [null, true, false, -1.5e3, "\\u00e9"]}]', '{}', '[]', '{"a": {"b": {}}}',
                          '"\\ud800"', 'NaN', '[1,]', '{"a" 1}', '1e400', '"12345678901234567890123"', 'tru', 'nulls',
                          "9" * 4400, "-" + "9" * 700 + ".5"])  # json's int() refuses over 4300 digits
_BLANK = st.sampled_from(["", "   ", "\r", "\x0b", "\x0c \t"])
_BAD_LINES = st.sampled_from([
    "", "   ", "\r", "\x0b", "\x0c \t", "42", "[1, 2]", '"x"', "null", "{not json", '{"a": [1,', '2]}', '{"a": 1},{"b": 2}',
    '{"x": {"y": 1}', "}", "\ufeff{}", "\x0b{}", '{"a": 1} x', "{", '{"a":1}{"b":2}', "\ud800",
])


@st.composite
def _lines(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "é", "x y", "t"]), min_size=1, max_size=4, unique=True))
    schema = {name: FeatureSpec(draw(st.sampled_from((F, I64, S))), ()) for name in names}
    mode = draw(st.sampled_from(["good", "mostly good", "any"]))  # good: blocks the compiled reader takes
    clean = mode != "any"
    lines = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(5 if mode == "good" else 0, 39 if clean else 14))
        if kind == 0 or (mode == "good" and kind == 39):
            lines.append(draw(_BLANK if mode == "good" else _BAD_LINES))
            continue
        fields = [(json.dumps(n, ensure_ascii=draw(st.booleans())), draw(_GOOD[schema[n].dtype])) for n in names]
        if kind == 1:
            fields.append((json.dumps("extra"), draw(_EXTRA)))
        elif kind == 2:
            fields.pop(draw(st.integers(0, len(fields) - 1)))
        elif kind == 3:
            fields.append(draw(st.sampled_from(fields)))  # a duplicate key
        elif kind == 4:
            k = draw(st.integers(0, len(fields) - 1))
            fields[k] = (fields[k][0], draw(_ODD))
        elif kind == 5:
            fields[0] = ('"\\u0061"' if names[0] == "a" else fields[0][0], fields[0][1])  # an escaped key
        fields = draw(st.permutations(fields))
        space = draw(st.sampled_from(["", " ", "\t", "  "]))
        body = f",{space}".join(f"{k}{space}:{space}{v}" for k, v in fields)
        tail = draw(st.sampled_from(["", " ", "\r"]))
        lines.append(f"{space}{{{space}{body}{space}}}{tail}")
    data = ("\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if not clean and draw(st.booleans()):  # invalid UTF-8 (or an encoded surrogate) somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])) + data[at:]
    return schema, data


def _units(path, *, gz: bool, unit_bytes: int, max_record: int) -> list[formats.WorkUnit]:
    file = formats.InputFile(0, str(path), path.stat().st_size, "jsonl", gz)
    try:
        planned = jsonl.JsonLinesFormat().plan(file, unit_bytes)
    except formats.InputError:  # a file that starts as a JSON array: both paths refuse it at planning
        return []
    units = [resolve_alone(u) if u.nominal else u for u in planned]
    return [dataclasses.replace(u, max_record_bytes=max_record) for u in units if u.start < u.end or gz]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_lines(), st.sampled_from(["reject", "ignore"]), st.sampled_from([2, 8192]), st.sampled_from([7, 2 << 20]),
       st.sampled_from([1 << 30, 50]), st.sampled_from([64 << 20, 40]), st.booleans())
def test_compiled_blocks_equal_the_per_record_path(tmp_path, monkeypatch, case, extra_fields, fast_rows, block,
                                                   unit_bytes, max_record, gz):
    schema, data = case
    path = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    monkeypatch.setattr(jsonl, "FAST_BATCH_ROWS", fast_rows)
    monkeypatch.setattr(jsonl_block, "BLOCK_BYTES", block)
    config = _config(tmp_path, schema, extra_fields, batch_records=3)
    for unit in _units(path, gz=gz, unit_bytes=unit_bytes, max_record=max_record):
        assert _outcome(_through_parse, config, unit) == _outcome(_reference, unit, schema, extra_fields)


def test_clean_blocks_go_through_compiled_code(tmp_path, monkeypatch):
    rows = [{"x": 0.5, "n": -3, "s": "é\u2028\"q\"", "junk": [1, {"k": None}]}, {"s": "", "n": 2**62, "x": 7, "junk": "\u00e9"}]
    data = b"\xef\xbb\xbf" + b"\n\r\n".join(orjson.dumps(r) for r in rows) + b"\n" + json.dumps(rows[0]).encode() + b"\r\n"
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    (unit,) = _units(path, gz=False, unit_bytes=1 << 30, max_record=1 << 20)
    schema = {"x": FeatureSpec(F, ()), "n": FeatureSpec(I64, ()), "s": FeatureSpec(S, ())}
    monkeypatch.setattr(jsonl, "_json_row", None)  # the per-line parse must not be needed
    assert sum(len(b.ends) for b in jsonl.framed_jsonl(unit, schema, "ignore")) == 3
    monkeypatch.undo()
    assert _outcome(_through_parse, _config(tmp_path, schema, "ignore"), unit) == \
        _outcome(_reference, unit, schema, "ignore")


def test_without_the_compiled_reader_every_block_goes_line_by_line(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"x": 0.5}\n{"x": 2}\n{"x": "bad"}\n{"x": 1}\n')
    (unit,) = _units(path, gz=False, unit_bytes=1 << 30, max_record=1 << 20)
    schema = {"x": FeatureSpec(F, ())}
    expected = _outcome(_reference, unit, schema, "reject")
    monkeypatch.setattr(native, "jsonl_columns", fallback.jsonl_columns)
    assert _outcome(_through_parse, _config(tmp_path, schema), unit) == expected
    assert len(expected[0]) == 3 and len(expected[1]) == 1


def _value(text: str, dtype: str):
    """What the compiled reader makes of one value: a float64, an int, or None (declined)."""
    got = native.jsonl_columns(b'{"v": %s}' % text.encode(), (b"v",), bytes([native.kind_of(dtype)]), False, 1 << 20,
                               False)
    if got is None:
        return None
    return np.frombuffer(got[1][0], np.float64 if dtype == F else np.int64)[0].item()


_NUMBERS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr), st.integers(-(2**80), 2**80).map(str),
    st.builds(lambda d, f, e: f"{d}.{f}e{e}", st.integers(0, 10**20), st.integers(0, 10**30), st.integers(-340, 320)),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**17), 10**17), st.integers(-30, 30)),
)


@settings(max_examples=3000, deadline=None)
@given(_NUMBERS)
def test_numbers_are_read_as_orjson_reads_them(text):
    as_float = _value(text, F)
    expected = float(json.loads(text))  # correctly rounded; orjson agrees (it refuses only infinities)
    if math.isinf(expected):
        assert as_float is None or math.isinf(as_float)
        return
    assert as_float == expected and math.copysign(1, as_float) == math.copysign(1, expected)
    value = orjson.loads(text)
    assert _value(text, I64) == (value if type(value) is int and -(2**63) <= value < 2**63 else None)


def _line_by_line(data: bytes, schema, extra_fields: str):
    """The block's columns as the per-line parse gives them, or None where it raises ``Unsupported``."""
    try:
        batches = list(jsonl._line_by_line(data, True, 1 << 20, schema, extra_fields))
    except formats.Unsupported:
        return None
    return b"".join(bytes(b.blob) for b in batches)


@settings(max_examples=400, deadline=None)
@given(_lines(), st.sampled_from(["reject", "ignore"]))
def test_a_block_taken_gives_the_bytes_of_the_line_by_line_parse(case, extra_fields):
    schema, data = case
    got = jsonl_block.block_columns(data, schema, jsonl_block.native_spec(schema), extra_fields=extra_fields,
                                    max_record_bytes=1 << 20, bom=True)
    if got is not None:  # declined blocks go line by line: nothing to compare
        expected = _line_by_line(data, schema, extra_fields)
        assert expected is not None
        assert bytes(jsonl.columnar.encode_framed(schema, *got)[0]) == expected


@pytest.mark.parametrize("seed", range(12))
def test_a_wide_schema_is_read_through_its_names_table(seed):
    """Past ``J_SCAN_FIELDS`` (64) features a key that is not the last one's successor is found in a
    hash table of the names: lines in order, shuffled, with a key twice, one missing, an extra one
    and an escaped one give the line-by-line parse's bytes, or are declined where that path words a
    dead letter."""
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(rng.choice([65, 300, 2000]))] + ["é", "x y"]
    schema = {name: FeatureSpec(rng.choice((F, I64, S)), ()) for name in names}
    value = {F: lambda: repr(rng.uniform(-1e3, 1e3)), I64: lambda: str(rng.randrange(-2**40, 2**40)),
             S: lambda: json.dumps("".join(rng.choice("ab\u00e9 ") for _ in range(rng.randrange(4))))}
    lines, kinds = [], set()
    for _ in range(rng.randrange(1, 12)):
        fields = [(json.dumps(n), value[schema[n].dtype]()) for n in names]
        kind = rng.randrange(8) if seed % 2 else rng.choice((0, 3, 4, 5, 6, 7))  # odd seeds: lines it declines too
        kinds.add(kind)
        if kind == 1:
            fields.append(rng.choice(fields))  # a key twice
        elif kind == 2:
            fields.pop(rng.randrange(len(fields)))
        elif kind == 3:
            fields.insert(rng.randrange(len(fields)), ('"extra"', "1"))
        elif kind == 4:
            fields[0] = ('"\\u0063' + names[0][1:] + '"', fields[0][1])  # "c0" with an escaped letter
        if kind in (5, 6):
            rng.shuffle(fields)
        lines.append("{" + ", ".join(f"{k}: {v}" for k, v in fields) + "}")
    data = ("\n".join(lines) + "\n").encode()
    for extra_fields in ("reject", "ignore"):
        got = jsonl_block.block_columns(data, schema, jsonl_block.native_spec(schema), extra_fields=extra_fields,
                                        max_record_bytes=1 << 26, bom=True)
        expected = _line_by_line(data, schema, extra_fields)
        if not kinds & {1, 2} and (extra_fields == "ignore" or 3 not in kinds):  # clean: the compiled reader takes it
            assert got is not None
        if got is not None:
            assert expected is not None
            assert bytes(jsonl.columnar.encode_framed(schema, *got)[0]) == expected
