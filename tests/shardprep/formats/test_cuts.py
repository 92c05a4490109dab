"""Issue 17 (2): cuts of large CSV / JSON Lines files found inside the pipeline from range counts.

The launcher plans nominal byte ranges from file sizes; ``formats.cuts.resolve`` (over the
``CutTable`` of every range's quote and newline counts) must land every cut on the byte and line
number the old launcher-side scan found (``cuts_reference.find_cuts``), and the units together must
read every record of the file exactly once, as the file read in one piece does.
"""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import formats, naming, run
from shardprep.formats import InputError, InputFile, WorkUnit
from shardprep.formats.cuts import CutTable, RangeCount, count_range, line_units, resolve
from tests.cuts_reference import reference_ranges

PIECES = {  # what the generated files are made of: fields, quoted newlines, stray quotes, \r\n, empty lines
    "csv": [b"a", b"12", b",", b",", b"\n", b"\r\n", b"\n\n", b'"x\ny"', b'"q ""z"" \r\n w"', b'"', b'5" tv', b"long" * 9],
    "jsonl": [b'{"a": 1}', b'{"s": "x\\ny"}', b"\n", b"\r\n", b"\n\n", b"[1]", b"{bad", b'{"l": "' + b"z" * 40 + b'"}'],
}


def _file(tmp_path, kind: str, data: bytes, name: str = "f") -> InputFile:
    path = tmp_path / f"{name}.{kind}"
    path.write_bytes(data)
    return InputFile(0, str(path), len(data), kind, False)


def _exact(units: list[WorkUnit]) -> list[WorkUnit]:
    """The units resolved as Parse resolves them: a table from every range's counts (shuffled, some twice)."""
    counts = [count_range(u) for u in units if u.nominal]
    rng = random.Random(len(counts))
    counts += rng.sample(counts, len(counts) // 3)
    rng.shuffle(counts)
    table = CutTable(counts)
    return [resolve(u, table) for u in units]


def _records(units: list[WorkUnit]) -> list:
    out = []
    for unit in units:
        out += [(pos, row if isinstance(row, dict) else (row.reason, row.raw)) for pos, row in formats.read_unit(unit)]
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["csv", "jsonl"]), seed=st.integers(0, 2**32 - 1), length=st.integers(1, 40))
def test_in_pipeline_cuts_equal_the_launcher_scan_and_read_each_record_once(tmp_path, kind, seed, length):
    rng = random.Random(seed)
    body = b"".join(rng.choice(PIECES[kind]) for _ in range(length))
    data = (b"h1,h2\n" if kind == "csv" else b"") + body
    file = _file(tmp_path, kind, data)
    whole = WorkUnit(file, 0, 0, file.size, 1, ("h1", "h2"))
    try:
        expected = _records([whole])
    except InputError:
        expected = None
    quotes = kind == "csv"
    for unit_bytes in range(1, file.size + 2):
        units = _exact(line_units(file, unit_bytes, columns=whole.columns, quotes=quotes))
        got = [(u.start, u.end, u.first_position) for u in units if u.start < u.end]
        assert got == reference_ranges(file.url, file.size, unit_bytes, quotes=quotes), unit_bytes
        assert sum(u.end - u.start for u in units) == file.size and not any(u.nominal for u in units)
        try:
            records = _records(units)
        except InputError as e:  # a stray quote pair that puts a cut inside a record: refused, never wrong rows
            assert "runs past the planned cut" in str(e)
            continue
        if expected is not None:
            assert records == expected, unit_bytes


def test_odd_quotes_unit_zero_reads_the_file_the_others_nothing(tmp_path):
    file = _file(tmp_path, "csv", b'h\n5" tv\n' + b"x\n" * 50)
    units = line_units(file, 10, columns=("h",), quotes=True)
    assert len(units) == -(-file.size // 10) and all(u.nominal for u in units)  # planned from the size alone
    exact = _exact(units)
    assert [(u.start, u.end) for u in exact] == [(0, file.size)] + [(file.size, file.size)] * (len(units) - 1)
    assert [pos for pos, _ in _records(exact)] == list(range(2, 53))
    assert [pos for pos, _ in formats.read_unit(units[0])] == list(range(2, 53))  # resolved alone, outside a pipeline
    assert list(formats.read_unit(units[1])) == []


def test_a_record_longer_than_a_unit_leaves_the_units_it_spans_empty(tmp_path):
    file = _file(tmp_path, "jsonl", b'{"a": 1}\n{"b": "' + b"z" * 100 + b'"}\n{"c": 3}\n')
    exact = _exact(line_units(file, 16, quotes=False))
    assert [(u.start, u.end, u.first_position) for u in exact if u.start < u.end] == [(0, 119, 1), (119, 128, 3)]
    assert sum(u.start == u.end for u in exact) == len(exact) - 2  # 128 bytes: 8 nominal units


def test_small_and_gzip_files_are_one_exact_unit(tmp_path):
    small = _file(tmp_path, "csv", b"h\n1\n")
    assert line_units(small, 4, quotes=True) == [WorkUnit(small, 0, 0, 4, 1)]
    gz = InputFile(0, small.url, 100, "csv", True)
    assert not line_units(gz, 10, quotes=True)[0].nominal


def test_the_table_refuses_a_missing_range_or_a_conflicting_duplicate():
    with pytest.raises(RuntimeError, match="lacks a unit"):
        CutTable([RangeCount(0, 0, 1, 2), RangeCount(0, 2, 1, 2)])
    with pytest.raises(RuntimeError, match="two different counts"):
        CutTable([RangeCount(0, 0, 1, 2), RangeCount(0, 0, 1, 3)])
    table = CutTable([RangeCount(3, 1, 3, 5), RangeCount(3, 0, 1, 4), RangeCount(7, 0, 1, 0)])
    assert table.at(3, 0) == (0, 0) and table.at(3, 1) == (1, 4)
    assert not table.odd_quotes(3) and table.odd_quotes(7)
    with pytest.raises(RuntimeError, match="lacks unit 2 of file 3"):
        table.at(3, 2)
    assert CutTable([])._keys.size == 0
    file = InputFile(3, "unused.csv", 25, "csv", False)
    with pytest.raises(RuntimeError, match="lacks unit 2 of file 3"):  # the file's last range never counted
        resolve(line_units(file, 10, quotes=True)[0], table)


def _dead_letters(out) -> list[tuple[str, int, str]]:
    lines = [json.loads(line) for path in sorted(out.glob(f"*/{naming.REJECTED}/*.jsonl")) for line in path.open()]
    return sorted((d["source"].rsplit("/", 1)[-1], d["position"], d["reason"]) for d in lines)


def test_a_run_with_tiny_units_writes_the_same_shards_and_dead_letter_lines(tmp_path):
    rng = random.Random(5)
    rows = [b"id,text"]
    for i in range(400):
        kind = rng.random()
        text = b'"multi\nline ""%d"""' % i if kind < 0.2 else b"x" * rng.randint(0, 300) if kind < 0.9 else b"a,b,c"
        rows.append(b"%d,%s" % (i, text))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_bytes(b"\r\n".join(rows[:200]) + b"\n")
    (tmp_path / "in" / "b.csv").write_bytes(b"\n".join([rows[0], *rows[200:]]) + b"\n\n")
    outs = {}
    for unit_mb in ("0.001", "64"):  # 1 kB units: nominal ranges, many shorter than one record; and one unit a file
        out = tmp_path / f"out-{unit_mb}"
        code = run.main(["--input", str(tmp_path / "in" / "*.csv"), "--output", str(out), "--num-shards", "3",
                         "--unit-mb", unit_mb, "--statistics", "off", "--max-bad-records", "1000"])
        assert code == 0
        outs[unit_mb] = out
    small, large = outs.values()
    shards = sorted(p.name for p in small.glob("*/train/*.tfrecord*"))
    assert len(shards) == 3
    for name in shards:
        (a,), (b,) = small.glob(f"*/train/{name}"), large.glob(f"*/train/{name}")
        assert a.read_bytes() == b.read_bytes()
    assert _dead_letters(small) == _dead_letters(large) and len(_dead_letters(small)) > 20


def test_default_unit_size_follows_the_input_size_alone():
    mib = 1 << 20
    assert formats.auto_unit_bytes(0) == formats.auto_unit_bytes(100 * mib) == 16 * mib  # never below 16 MiB
    assert formats.auto_unit_bytes(297_577_091) == 18 * mib  # one 298 MB file: 16 units, not 5 of 64 MiB
    assert formats.auto_unit_bytes(300 * mib + 1) == 19 * mib  # whole MiB, rounded up
    assert formats.auto_unit_bytes(16 * 64 * mib) == formats.auto_unit_bytes(10**13) == 64 * mib  # 1 GiB on: 64 MiB


@pytest.mark.slow
def test_default_units_cut_a_large_file_and_give_the_shards_of_one_unit(tmp_path, capsys):
    """Without --unit-mb, one ~20 MB CSV file is cut into 16 MiB units (it would be one at 64), with
    the same shards."""
    rng = random.Random(3)
    lines = [b"id,x,text"] + [b"%d,%.5f,%s" % (i, rng.random(), b"w" * rng.randint(10, 180)) for i in range(200_000)]
    path = tmp_path / "in" / "big.csv"
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines) + b"\n")
    size = path.stat().st_size
    assert 16 << 20 < size <= 2 * (16 << 20)
    common = ["--input", str(path), "--num-shards", "3", "--statistics", "off"]
    assert run.main([*common, "--output", str(tmp_path / "auto")]) == 0
    assert "1 input files, 2 work units" in capsys.readouterr().err
    assert run.main([*common, "--output", str(tmp_path / "one"), "--unit-mb", "64"]) == 0
    assert "1 input files, 1 work units" in capsys.readouterr().err
    for shard in sorted((tmp_path / "one").glob("*/train/*.tfrecord*")):
        (twin,) = (tmp_path / "auto").glob(f"*/train/{shard.name}")
        assert twin.read_bytes() == shard.read_bytes()
