"""The column-wise JSON Lines reader (``jsonl.framed_jsonl``, blocks of lines from ``jsonl_block``) gives the same shards and dead letters as the
per-record path on adversarial input: bad lines among good ones, lines that merge or split when
joined, long numbers, NaN, nesting, missing / extra fields, wrong types, blank and whitespace lines,
\\r\\n, BOMs, long lines, gzip (whole and broken), units cut anywhere, reads cut anywhere."""
from __future__ import annotations

import dataclasses
import gzip
import io
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardprep import formats
from shardprep.formats import jsonl, jsonl_block
from shardprep.formats.cuts import resolve_alone
from shardprep.formats.reading import BOM, open_input, read_lines
from shardprep.schema import FeatureSpec
from tests.shardprep.formats.csv.test_arrow import _config, _outcome, _reference, _through_parse

F, I64, S = "float32", "int64", "string"
NAMES = ["a", "b", "é"]

_NUMBERS = st.one_of(
    st.floats(width=32).map(repr), st.floats(allow_nan=False).map(repr), st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["-9223372036854775809", "-9223372036854775808", "9223372036854775808", "18446744073709551615",
                     "18446744073709551616", "-0", "-0.0", "1e400", "-1e-400", "1E5", "NaN", "Infinity",
                     "-Infinity", "1.00000000000000000000001", "3.4028235e38", "3.4028236e38"]),
)
_VALUES = st.one_of(
    _NUMBERS, st.text(max_size=8).map(json.dumps), st.text(max_size=8).map(lambda t: json.dumps(t, ensure_ascii=False)),
    st.sampled_from(["true", "null", "[1]", "[1.5, 2]", '{"x": 1}', '"7"', '"\\ud800"', '"\\u0030123456789012345678"',
                     '"12345678901234567890"', '"-1234567890123456789"', '"a\\"b\\\\"', '""']),
)
# Lines that are bad alone, or that make one object only with a neighbour (or two objects of one line)
_ODD_LINES = ["", " ", "\t", "\x0b", "\x0c", "\r", "42", "[]", "[{}]", '"s"', "null", "{not json", "\xff{}", "{",
              "}", '{"a": 1', '"b": 2}', '{"a": 1}, {"a": 2}', '{"a": 1}{"a": 2}', '{"a": [1,', "2]}", "{}",
              '\ufeff{"a": 1}', '{"a": 1} x', '{"a": 1, "a": "dup"}', '{"a": {"b": {"c": [[[]]]}}}']


@st.composite
def _lines(draw, names):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(_ODD_LINES))
    keys = list(names)
    if kind == 1:
        keys.append("extra")
    elif kind == 2 and len(keys) > 1:
        keys.pop(draw(st.integers(0, len(keys) - 1)))
    elif kind == 3:
        keys = draw(st.permutations(keys))
    space = draw(st.sampled_from(["", " ", "  \t"]))
    fields = f",{space}".join(f"{json.dumps(k, ensure_ascii=draw(st.booleans()))}:{space}{draw(_VALUES)}" for k in keys)
    return space + "{" + fields + "}" + space


@st.composite
def _files(draw):
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    schema = {name: FeatureSpec(draw(st.sampled_from((F, I64, S))), ()) for name in names}
    clean = draw(st.booleans())  # mostly good lines (long fast runs), or anything
    lines = [draw(_lines(names)) if not clean or draw(st.integers(0, 30)) == 0 else
             "{" + ", ".join(f"{json.dumps(n)}: {draw(_VALUES)}" for n in names) + "}"
             for _ in range(draw(st.integers(1, 40)))]
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = draw(st.sampled_from(["", "\ufeff"])) + newline.join(lines) + draw(st.sampled_from(["", newline, "\n\n"]))
    return schema, text.encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff")


def _lines_file(data: bytes) -> bool:
    """Not a JSON array (refused at planning: ``jsonl.check_json_lines``)."""
    return not data.removeprefix(BOM).lstrip().startswith(b"[")


def _units(path, data: bytes, unit_bytes: int, gz: bool) -> list[formats.WorkUnit]:
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    file = formats.InputFile(0, str(path), path.stat().st_size, "jsonl", gz)
    return [resolve_alone(u) if u.nominal else u for u in jsonl.JsonLinesFormat().plan(file, unit_bytes)]


def _with(block_bytes: int, batch_rows: int, read):
    """``read()`` with blocks of ``block_bytes`` and line-by-line batches of ``batch_rows``."""
    old = jsonl_block.BLOCK_BYTES, jsonl.FAST_BATCH_ROWS
    jsonl_block.BLOCK_BYTES, jsonl.FAST_BATCH_ROWS = block_bytes, batch_rows
    try:
        return read()
    finally:
        jsonl_block.BLOCK_BYTES, jsonl.FAST_BATCH_ROWS = old


_settings = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_settings
@given(_files(), st.sampled_from(["reject", "ignore"]), st.sampled_from([7, 64, 1 << 20]), st.sampled_from([2, 8192]),
       st.sampled_from([16, 100, 1 << 30]), st.sampled_from([48, 1 << 20]), st.booleans())
def test_block_reader_equals_the_per_record_path(tmp_path, case, extra_fields, block_bytes, batch_rows, unit_bytes,
                                                 max_record, gz):
    schema, data = case
    assume(_lines_file(data))
    config = _config(tmp_path, schema, extra_fields, batch_records=5)
    for unit in _units(tmp_path / ("t.jsonl.gz" if gz else "t.jsonl"), data, unit_bytes, gz):
        unit = dataclasses.replace(unit, max_record_bytes=max_record)
        if unit.start >= unit.end and not gz:
            continue  # no record starts in it: the pipeline skips it
        got = _with(block_bytes, batch_rows, lambda u=unit: _outcome(_through_parse, config, u))
        assert got == _outcome(_reference, unit, schema, extra_fields)


@settings(_settings, max_examples=60)
@given(_files(), st.sampled_from([5, 64, 1 << 20]), st.sampled_from([16, 100, 1 << 30]))
def test_blocks_hold_the_lines_read_lines_gives(tmp_path, case, block_bytes, unit_bytes):
    _, data = case
    assume(_lines_file(data))
    for unit in _units(tmp_path / "t.jsonl", data, unit_bytes, False):
        with open_input(unit.file, unit.start) as stream:
            expected = [line for offset, line in read_lines(stream, unit.start) if offset < unit.end]
        got = _with(block_bytes, 8192, lambda u=unit: list(jsonl_block.blocks(u)))
        assert all(block.endswith(b"\n") for block in got[:-1])
        assert [line for block in got for line in io.BytesIO(block).readlines()] == expected


def test_a_broken_gzip_stream_and_a_long_line_go_to_the_per_record_path(tmp_path):
    rows = b"".join(b'{"a": %d}\n' % i for i in range(5000))
    schema = {"a": FeatureSpec(I64, ())}
    (unit,) = _units(tmp_path / "t.jsonl.gz", rows, 1 << 30, True)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(path.read_bytes()[:-30])  # truncated
    unit = dataclasses.replace(unit, file=dataclasses.replace(unit.file, size=path.stat().st_size))
    with pytest.raises(formats.Unsupported):
        list(jsonl.framed_jsonl(unit, schema, "reject"))
    config = _config(tmp_path, schema)
    got = _outcome(_through_parse, config, unit)
    assert got == _outcome(_reference, unit, schema, "reject") and got[1][0][1] == "gzip_truncated"
    (unit,) = _units(tmp_path / "t.jsonl", rows + b'{"a": "' + b"x" * 100 + b'"}\n', 1 << 30, False)
    unit = dataclasses.replace(unit, max_record_bytes=50)
    got = _with(64, 8192, lambda: _outcome(_through_parse, config, unit))
    assert got == _outcome(_reference, unit, schema, "reject") and got[1] == [(5001, "record_too_large", got[1][0][2])]


def test_clean_lines_are_read_in_blocks(tmp_path):
    rows = [{"a": i * 0.5, "b": -(2**63) + i, "é": "é" * (i % 3)} for i in range(300)]
    text = "\ufeff" + "\r\n".join(json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(rows)) + "\r\n"
    (unit,) = _units(tmp_path / "t.jsonl", text.encode(), 1 << 30, False)
    schema = {"a": FeatureSpec(F, ()), "b": FeatureSpec(I64, ()), "é": FeatureSpec(S, ())}
    assert sum(len(b.ends) for b in _with(1000, 64, lambda: list(jsonl.framed_jsonl(unit, schema, "reject")))) == 300
    assert _outcome(_through_parse, _config(tmp_path, schema), unit) == _outcome(_reference, unit, schema, "reject")


@pytest.mark.parametrize("raw, reason", [(b'{"x": -9223372036854775809}', "out_of_range"),
                                         (b'{"x": 18446744073709551616}', "out_of_range"),
                                         (b'{"x": 1.5}', "type_mismatch")])
def test_integers_outside_int64_are_read_exactly(tmp_path, raw, reason):
    """orjson reads integers below -2**63 or from 2**64 as floats: those lines are read by json, exactly."""
    (unit,) = _units(tmp_path / "t.jsonl", raw + b"\n", 1 << 30, False)
    records, bad = _outcome(_through_parse, _config(tmp_path, {"x": FeatureSpec(I64, ())}), unit)
    assert not records and bad[0][1] == reason and raw[6:-1].decode() in bad[0][2]


_SMALL_LINES = st.lists(st.sampled_from(['{"a": 1}', '{"a": "x", "b": 2.5}', "", " ", "\t\r", "[1]", "{bad", '"s"',
                                         '{"a": 1, "a": 2}', '{"é": null}', "\r"]), max_size=8)


@given(lines=_SMALL_LINES, bom=st.booleans(), last_newline=st.booleans(), first=st.sampled_from([1, 7]))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_whole_small_file_reads_as_the_streamed_reader_reads_it(tmp_path, lines, bom, last_newline, first):
    """A small file read whole (one read, its lines split in memory) gives the records and dead letters of
    the reader that streams it through ``read_lines``."""
    data = (BOM if bom else b"") + "\n".join(lines).encode() + (b"\n" if last_newline and lines else b"")
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    file = formats.InputFile(0, str(path), len(data), "jsonl", False)
    unit = formats.WorkUnit(file, 0, 0, len(data), first)

    def read():
        return [(p, (r.reason, r.detail, r.raw) if isinstance(r, formats.Bad) else r) for p, r in jsonl.read_jsonl(unit)]

    whole = read()
    saved, jsonl.READ_BLOCK = jsonl.READ_BLOCK, -1  # the streamed reader
    try:
        assert whole == read()
    finally:
        jsonl.READ_BLOCK = saved
