"""CSV dialects and missing values: sniffed delimiters, no header, null values, nullable features,
--required and --on-missing, header/row count mismatches, files that disagree, JSON array files;
the column-wise and per-record CSV paths give the same bytes in every dialect."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardprep import example, formats, framing, manifest, run
from shardprep.formats.csv import arrow as csv_arrow
from shardprep.formats.csv import source as csv_format
from shardprep.formats.csv.dialect import sniff_delimiter
from shardprep.schema import FeatureSpec


@pytest.mark.parametrize("text, expected", [
    ("a,b,c\n1,2,3\n", ","),
    ("a;b;c\n1,5;2,5;3\n", ";"),               # decimal commas: ; splits every line the same way
    ("a\tb\n1\t2\n", "\t"),
    ("a|b|c\n1|2|3\n", "|"),
    ('a,b\n"x;y;z",2\n', ","),                 # a delimiter inside quotes does not count
    ("one\n1\n2\n", None),                     # a single column: nothing to sniff
    ("a,b\n1,2\n3,4,5\n", None),               # no candidate splits every line alike
])
def test_sniff_delimiter(text, expected):
    assert sniff_delimiter(text.encode(), complete=True) == expected


def _reshard(tmp_path: Path, *args: str, inputs: str = "in/*") -> int:
    return run.main(["--input", str(tmp_path / inputs), "--output", str(tmp_path / "out"), "--num-shards", "1",
                     "--overwrite", *args])


def _examples(tmp_path: Path) -> list[dict]:
    rows = []
    for path in sorted((tmp_path / "out").rglob("*.tfrecord")):
        with open(path, "rb") as f:
            rows += [example.decode_example(r) for r in framing.read_records(f, check_crc=True)]
    return rows


def _write(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_tsv_with_na_values_infers_numbers_and_marks_nullable(tmp_path, capsys):
    _write(tmp_path, "a.tsv.csv", "x\tn\tcity\n1.5\t3\tParis\nNA\t4\t\n2.5\tNA\tLyon\n")
    assert _reshard(tmp_path) == 0
    assert "CSV delimiter '\\t' (sniffed" in capsys.readouterr().err
    features = manifest.load(str(tmp_path / "out")).features
    assert features["x"] == {"dtype": "float32", "shape": [], "nullable": True, "missing": 1}
    assert features["n"] == {"dtype": "int64", "shape": [], "nullable": True, "missing": 1}
    assert features["city"]["nullable"] and features["city"]["missing"] == 1
    by_city = {tuple(e.get("city", [b"-"]))[0]: e for e in _examples(tmp_path)}
    assert set(by_city) == {b"Paris", b"Lyon", b"-"}
    assert "x" not in by_city[b"-"] and by_city[b"-"]["n"] == [4]  # the missing value is left out, never a string
    assert "n" not in by_city[b"Lyon"] and by_city[b"Lyon"]["x"] == [2.5]


def test_semicolons_no_header_and_column_names(tmp_path):
    _write(tmp_path, "a.csv", "1;x\n2;y\n3;z\n")
    assert _reshard(tmp_path, "--no-header", "--column-names", "id,word") == 0
    assert sorted((e["id"][0], e["word"][0]) for e in _examples(tmp_path)) == [(1, b"x"), (2, b"y"), (3, b"z")]


def test_no_header_alone_names_the_columns_and_a_numeric_header_is_told_of_it(tmp_path, capsys):
    _write(tmp_path, "a.csv", "1,0.5,x\n2,1.5,y\n3,2.5,z\n")
    assert _reshard(tmp_path, "--no-header") == 0
    assert sorted((e["c0"][0], e["c2"][0]) for e in _examples(tmp_path)) == [(1, b"x"), (2, b"y"), (3, b"z")]
    assert "named c0, c1" in capsys.readouterr().err
    _write(tmp_path, "a.csv", "1,0.5\n2,1.5\n3,2.5\n")
    assert _reshard(tmp_path) == 0  # a numeric first line is taken as the header, with a warning
    err = capsys.readouterr().err
    assert "looks like data" in err and "--no-header" in err


def test_given_delimiter_space_and_custom_null_values(tmp_path):
    _write(tmp_path, "a.csv", "a b\n1 -\n2 7\n")
    assert _reshard(tmp_path, "--delimiter", "space", "--null-values", "-") == 0
    features = manifest.load(str(tmp_path / "out")).features
    assert features["b"]["dtype"] == "int64" and features["b"]["missing"] == 1


def test_required_and_on_missing_reject_make_dead_letters(tmp_path, capsys):
    _write(tmp_path, "a.csv", "x,label\n1,a\n2,\nNA,b\n")
    assert _reshard(tmp_path, "--required", "label", "--max-bad-records", "5") == 0
    m = manifest.load(str(tmp_path / "out"))
    assert m.rejected.by_reason == {"missing_value": 1} and m.features["x"]["missing"] == 1
    assert _reshard(tmp_path, "--on-missing", "reject", "--max-bad-records", "5") == 0
    assert manifest.load(str(tmp_path / "out")).rejected.by_reason == {"missing_value": 2}
    assert _reshard(tmp_path, "--required", "nope") == 2
    assert "--required nope: not a feature" in capsys.readouterr().err


@pytest.mark.parametrize("text, args, message", [
    ("a,b\n1,2,3\n4,5,6\n", (), "the CSV header has 2 names but the rows have 3 fields"),
    ("1,1\n1,2\n", (), "pass --no-header"),
    ("1,2\n", ("--no-header", "--column-names", "a,b,c"), "--column-names has 3 names but the rows have 2 fields"),
    ("a,b\n1,2\n", ("--delimiter", "ab"), "--delimiter 'ab': expected one character"),
])
def test_refusals_name_the_counts_and_flags(tmp_path, capsys, text, args, message):
    _write(tmp_path, "a.csv", text)
    assert _reshard(tmp_path, *args) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], err


def test_files_that_disagree_on_the_delimiter_are_refused(tmp_path, capsys):
    _write(tmp_path, "a.csv", "a,b\n1,2\n")
    _write(tmp_path, "b.csv", "a;b\n1;2\n")
    assert _reshard(tmp_path) == 2
    assert "disagree on the delimiter" in capsys.readouterr().err


def test_json_array_file_is_read_as_records(tmp_path):
    _write(tmp_path, "a.json", json.dumps([{"x": 1.5, "k": "a"}, {"x": None, "k": "b"}, {"x": 3.0, "k": "c"}]))
    assert _reshard(tmp_path) == 0
    m = manifest.load(str(tmp_path / "out"))
    assert m.accounting.written == 3 and m.features["x"]["missing"] == 1


def _unit(path: Path, **dialect) -> formats.WorkUnit:
    files = csv_format.resolve_dialects(formats.expand_inputs([str(path)]), **dialect)
    (unit,) = formats.plan_units(files)
    return unit


def _per_record(unit, schema) -> list[bytes]:
    encode = example.example_encoder(schema, on_missing="omit")
    return [framing.frame(encode(row)) for _, row in formats.read_unit(unit)]


@pytest.mark.parametrize("delimiter", ["\t", ";", "|"])
def test_column_wise_path_reads_other_delimiters_with_the_same_bytes(tmp_path, delimiter):
    d = delimiter
    rows = [f'{i}{d}{i / 7:.4f}{d}"w{d} {i}"\n' for i in range(2000)]
    path = _write(tmp_path, "a.csv", f"id{d}x{d}w\n" + "".join(rows))
    schema = {"id": FeatureSpec("int64"), "x": FeatureSpec("float32"), "w": FeatureSpec("string")}
    unit = _unit(path)
    assert unit.file.dialect.delimiter == d
    fast = b"".join(bytes(blob) for blob, _ in csv_arrow.framed_batches(unit, schema, "reject"))
    assert fast == b"".join(_per_record(unit, schema))


def test_column_wise_path_hands_a_null_to_the_per_record_path(tmp_path):
    path = _write(tmp_path, "a.csv", "id,w\n1,a\n2,NA\n3,\n")
    schema = {"id": FeatureSpec("int64"), "w": FeatureSpec("string")}
    unit = _unit(path)
    with pytest.raises(csv_arrow.Unsupported):
        list(csv_arrow.framed_batches(unit, schema, "reject"))
    decoded = [example.decode_example(r[12:-4]) for r in _per_record(unit, schema)]
    assert decoded == [{"id": [1], "w": [b"a"]}, {"id": [2]}, {"id": [3]}]
    keep_empty = _unit(path, null_values=("NA",))  # the empty field is a string again
    assert [example.decode_example(r[12:-4]) for r in _per_record(keep_empty, schema)][2] == {"id": [3], "w": [b""]}
