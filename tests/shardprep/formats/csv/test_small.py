"""Small CSV files read whole (``formats.csv.small``) give what the reference path (``source``) gives.

Random small files full of quotes, carriage returns, blank lines, BOMs, NULs and bad bytes: the
rows of a whole-file unit, and the header a file gets when its line 1 was met before, are those of
the per-line reader with no memory of other files, or the same refusal.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import formats
from shardprep.formats.csv import small, source
from shardprep.formats.csv.dialect import CsvDialect
from shardprep.formats.cuts import line_units

_PIECES = ["a", "1", "é", " ", ",", ";", '"', '""', "\r", "\n", "\n", "\r\n", "\ufeff", "\x00", "x y", "NA", ""]
_BAD_BYTES = [b"", b"", b"", b"\xff", b"\xe2\x82"]


def _file(tmp_path, name: str, data: bytes, dialect: CsvDialect) -> formats.InputFile:
    path = tmp_path / name
    path.write_bytes(data)
    return formats.InputFile(0, str(path), len(data), "csv", False, dialect=dialect)


def _reference_rows(unit, lists):
    saved, source.WHOLE_FILE_BYTES = source.WHOLE_FILE_BYTES, -1  # every unit through the per-line reader
    try:
        return _outcome(lambda: list(source.read_csv(unit, lists=lists)))
    finally:
        source.WHOLE_FILE_BYTES = saved


def _outcome(read):
    try:
        return [(p, (r.reason, r.detail, r.raw) if isinstance(r, formats.Bad) else r) for p, r in read()]
    except formats.InputError as e:
        return str(e)


_text = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


@given(header=st.sampled_from(["a,b\n", "a;b,c\n", '"a,1",b\n', "\ufeffa,b\r\n", "a,b,b\n", "\n", ""]), body=_text,
       bad=st.sampled_from(_BAD_BYTES), where=st.integers(0, 60), delimiter=st.sampled_from([",", ";"]),
       header_line=st.booleans(), lists=st.booleans())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_whole_small_file_reads_as_the_reference_reads_it(tmp_path, header, body, bad, where, delimiter, header_line,
                                                            lists):
    data = (header + body).encode()
    data = data[:where] + bad + data[where:]
    dialect = CsvDialect(delimiter=delimiter, header=header_line, null_values=("", "NA"))
    file = _file(tmp_path, "f.csv", data, dialect)
    try:
        unit = line_units(file, 1 << 20, columns=source.read_header(file), quotes=True)[0]
    except formats.InputError:
        return
    expected = _reference_rows(unit, lists)
    fast = small.whole_file_rows(data, columns=unit.columns, dialect=dialect, first_position=1, lists=lists)
    assert fast is None or fast == expected
    assert _outcome(lambda: list(source.read_csv(unit, lists=lists))) == expected


@given(header=st.sampled_from(["id,x,text\n", "\ufeffid;x\r\n", 'id,"x, y",z\n']), body=_text,
       bad=st.sampled_from(_BAD_BYTES), where=st.integers(0, 60), delimiter=st.sampled_from([",", ";"]))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_known_header_line_gives_the_header_the_reference_gives(tmp_path, header, body, bad, where, delimiter):
    dialect = CsvDialect(delimiter=delimiter)
    first = _file(tmp_path, "first.csv", header.encode(), dialect)
    data = (header + body).encode()
    data = data[:len(header.encode()) + where] + bad + data[len(header.encode()) + where:]
    file = _file(tmp_path, "f.csv", data, dialect)
    small._known.clear()
    expected = _outcome(lambda: [(0, source.read_header(file))])
    small._known.clear()
    _outcome(lambda: [(0, source.read_header(first))])  # line 1 met before, in another file
    assert _outcome(lambda: [(0, source.read_header(file))]) == expected


def test_the_fast_paths_take_a_plain_small_file(tmp_path):
    """Part files of one writer: the second file's header from the first's line 1, its rows from one reader."""
    dialect = CsvDialect()
    small._known.clear()
    text = 'id,x,label,text\n1,-2.5,3,"delta, epsilon"\n2,,4,zeta\n'
    one, two = (_file(tmp_path, f"part-{i}.csv", text.encode(), dialect) for i in range(2))
    assert source.read_header(one) == ("id", "x", "label", "text")
    assert small.known_header(text.encode(), dialect, source.HEADER_CHECK_ROWS) == ("id", "x", "label", "text")
    unit = line_units(two, 1 << 20, columns=source.read_header(two), quotes=True)[0]
    rows = small.whole_file_rows(text.encode(), columns=unit.columns, dialect=dialect, first_position=1, lists=False)
    assert rows == [(2, {"id": "1", "x": "-2.5", "label": "3", "text": "delta, epsilon"}),
                    (3, {"id": "2", "x": None, "label": "4", "text": "zeta"})]
    assert list(source.read_csv(unit)) == rows


@pytest.mark.parametrize("body", ["1,2\n3\n", '1,"2\n', "1,2\r3\n", "1,\xff\n"])
def test_what_the_reference_would_judge_is_left_to_it(body):
    dialect = CsvDialect()
    data = ("a,b\n" + body).encode("utf-8", "surrogateescape") if "\xff" not in body else b"a,b\n1,\xff\n"
    assert small.whole_file_rows(data, columns=("a", "b"), dialect=dialect, first_position=1, lists=False) is None
