"""The bad-input corpus: every case is a small file made here, run through the real CLI, with its outcome.

Each case is (name, what it is, a function writing the input under ``tmp/in``, extra CLI args, the
expected outcome). Outcomes:

- ``works()``: the run commits; nothing is rejected (BOM, CRLF, a 10 MB field ... must simply work).
- ``dead_letter(reason, positions)``: the run commits with ``--max-bad-records len(positions)``; the
  records at those 1-based positions (CSV/JSON Lines: the file's line; TFRecord/Parquet: the record
  number) are dead letters with that reason, each naming its source file and position.
- ``refused(substring, code)``: the run stops with exit ``code`` and one ``shardprep.run: error:`` line
  holding ``substring``; nothing is committed.

Every case checks: no traceback; when a manifest is written, ``read == written + rejected`` and
``written + rejected`` equals the records the test wrote (nothing lost), and ``verify`` passes.
``tests/reliability_table.py`` prints RELIABILITY.md's table from this same list.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest

from shardprep import example, framing, fs, local_files, manifest, run, schema, verify
from tests.conftest import run_cli

# --- outcomes --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # "works" | "dead_letter" | "refused"
    reason: str = ""
    positions: tuple[int, ...] = ()
    message: str = ""
    code: int = 0

    def describe(self) -> str:
        if self.kind == "works":
            return "works, nothing rejected"
        if self.kind == "dead_letter":
            where = ", ".join(map(str, self.positions))
            return f"dead letter `{self.reason}` x{len(self.positions)} (at {where})"
        return f"refused, exit {self.code}: \"{self.message}\""


def works() -> Outcome:
    return Outcome("works")


def dead_letter(reason: str, *positions: int) -> Outcome:
    return Outcome("dead_letter", reason=reason, positions=positions)


def refused(message: str, code: int = 2) -> Outcome:
    """Exit 2: refused before the pipeline ran (bad flags or input); exit 1: the run itself failed."""
    return Outcome("refused", message=message, code=code)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    what: str
    make: Callable[[Path], int]  # writes the input under tmp/in; returns the records it holds
    outcome: Outcome
    args: tuple[str, ...] = ()  # "{tmp}" is replaced by the case's folder
    glob: str = "in/*"
    check: Callable[[Path], None] | None = None  # more checks on the committed data set
    subprocess: bool = False  # run through a real `python -m shardprep.run` process


# --- input writers ---------------------------------------------------------------------------------

HEADER = "id,x,text"
SCHEMA = {"id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
          "text": {"dtype": "string", "shape": []}}


def _inp(tmp: Path, name: str) -> Path:
    (tmp / "in").mkdir(parents=True, exist_ok=True)
    return tmp / "in" / name


def _csv_rows(n: int = 10) -> list[str]:
    return [f"{i},{i / 10},text {i}" for i in range(n)]


def csv_file(*, bad: dict[int, str | bytes] | None = None, n: int = 10, name: str = "a.csv",
             eol: str = "\n", bom: bool = False, extra: tuple[str, ...] = (),
             records: int | None = None) -> Callable[[Path], int]:
    """A header and ``n`` good rows; ``bad`` replaces the row on that 1-based file line.

    Returns the records the file holds: its non-blank lines after the header, or ``records``.
    """

    def make(tmp: Path) -> int:
        lines: list[bytes] = [HEADER.encode()] + [r.encode() for r in _csv_rows(n)] + [e.encode() for e in extra]
        for line, text in (bad or {}).items():
            lines[line - 1] = text if isinstance(text, bytes) else text.encode()
        data = eol.encode().join(lines) + eol.encode()
        _inp(tmp, name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
        return records if records is not None else len(lines) - 1 - sum(1 for x in lines[1:] if not x.strip())

    return make


def raw_file(name: str, data: bytes, records: int = 0) -> Callable[[Path], int]:
    def make(tmp: Path) -> int:
        _inp(tmp, name).write_bytes(data)
        return records

    return make


def _json_rows(n: int = 10) -> list[dict]:
    return [{"id": i, "x": i / 10, "text": f"text {i}"} for i in range(n)]


def jsonl_file(*, bad: dict[int, str | bytes | dict] | None = None, n: int = 10, name: str = "a.jsonl",
               rows: list[dict] | None = None) -> Callable[[Path], int]:
    """``n`` good JSON objects, one per line; ``bad`` replaces the object on that 1-based line."""

    def make(tmp: Path) -> int:
        lines = [json.dumps(r).encode() for r in (rows if rows is not None else _json_rows(n))]
        for line, value in (bad or {}).items():
            if isinstance(value, dict):
                value = json.dumps(value)
            lines[line - 1] = value if isinstance(value, bytes) else value.encode()
        _inp(tmp, name).write_bytes(b"\n".join(lines) + b"\n")
        return len(lines)

    return make


def gzip_truncated(name: str, data: bytes, keep: float = 0.6) -> Callable[[Path], int]:
    """``data`` gzipped and cut to ``keep`` of its size; returns the records the stream still gives + 1.

    The records a reader can still decompress are good; the one the stream breaks inside is the
    dead letter (for CSV, the header line is not a record).
    """

    def make(tmp: Path) -> int:
        packed = gzip.compress(data, mtime=0)
        _inp(tmp, name).write_bytes(packed[: int(len(packed) * keep)])
        return -1  # counted by the case's outcome instead (see _expected_records)

    return make


def _records(n: int = 10) -> list[bytes]:
    encode = example.example_encoder(schema.schema_from_json(SCHEMA))
    return [encode({"id": i, "x": i / 10, "text": f"text {i}"}) for i in range(n)]


def tfrecord_file(edit: Callable[[list[bytes]], bytes], name: str = "a.tfrecord", n: int = 10) -> Callable[[Path], int]:
    """A TFRecord file of ``n`` Examples, its framed records passed to ``edit`` to be broken."""

    def make(tmp: Path) -> int:
        _inp(tmp, name).write_bytes(edit([framing.frame(r) for r in _records(n)]))
        return n

    return make


def _flip(frame: bytes, at: int) -> bytes:
    b = bytearray(frame)
    b[at] ^= 0x01
    return bytes(b)


def parquet_file(edit: Callable[[bytes], bytes] = lambda b: b, *, table: Callable[[], object] | None = None,
                 n: int = 10) -> Callable[[Path], int]:
    def make(tmp: Path) -> int:
        import pyarrow as pa
        import pyarrow.parquet as pq

        t = table() if table else pa.Table.from_pylist(_json_rows(n))
        buf = io.BytesIO()
        pq.write_table(t, buf, row_group_size=4)
        _inp(tmp, "a.parquet").write_bytes(edit(buf.getvalue()))
        return t.num_rows

    return make


def _struct_table():
    import pyarrow as pa

    return pa.Table.from_pylist([{"id": i, "point": {"a": i, "b": 2 * i}} for i in range(5)])


def _one_struct_table():
    import pyarrow as pa

    return pa.Table.from_pylist([{"id": i, "point": {"a": i, "b": 2 * i} if i == 2 else None} for i in range(5)])


def _null_table():
    import pyarrow as pa

    rows = _json_rows(10)
    rows[2]["x"] = None
    return pa.Table.from_pylist(rows)


def _int_null_table():
    import pyarrow as pa

    rows = _json_rows(10)
    rows[2]["id"] = None  # an int64 column (converted with the other integer columns at once)
    return pa.Table.from_pylist(rows)


def schema_file(doc: str | None, then: Callable[[Path], int]) -> Callable[[Path], int]:
    """Writes ``doc`` to tmp/schema.json (None: no file), then the input."""

    def make(tmp: Path) -> int:
        if doc is not None:
            (tmp / "schema.json").write_text(doc)
        return then(tmp)

    return make


def unreadable(tmp: Path) -> int:
    path = _inp(tmp, "a.csv")
    csv_file()(tmp)
    path.chmod(0)
    return 10


def output_inside_input(tmp: Path) -> int:
    jsonl_file()(tmp)
    old = tmp / "in" / "ds" / "notes"  # the output folder already holds a JSON Lines file
    old.mkdir(parents=True)
    (old / "rejected-00000-of-00001.jsonl").write_text('{"id": 1}\n')
    return 10


def big_field(tmp: Path) -> int:
    rows = _csv_rows(5)
    rows[2] = "2,0.2," + "y" * (10 * 1024 * 1024)
    _inp(tmp, "a.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return 5


def two_files_one_bad(tmp: Path) -> int:
    csv_file(name="a.csv")(tmp)
    csv_file(name="b.csv", bad={7: "6,0.6"})(tmp)
    return 20


def mixed_type_after_sample(tmp: Path) -> int:
    rows = _json_rows(1200)
    rows[1149]["x"] = "not a number"
    return jsonl_file(rows=rows)(tmp)


LIMIT = 1 << 20  # --max-record-mb 1: CSV still column-wise (pyarrow blocks of half the limit)
# CSV records of these sizes (newline included) after 2000 small rows; "q": over two quoted lines
AROUND_LIMIT = [(LIMIT, ""), (LIMIT + 1, ""), (LIMIT - 1, ""), (LIMIT + 80_000, ""), (LIMIT + 1, "q"), (LIMIT, "q"),
                (2 * LIMIT, "")]


def records_around_the_limit(tmp: Path) -> int:
    rows = _csv_rows(2000)
    for size, kind in AROUND_LIMIT:
        head = f"{len(rows)},0.5,"
        text = "y" * (size - len(head) - 1 - (3 if kind else 0))  # the quotes and the quoted newline
        rows.append(head + (f'"{text[:1000]}\n{text[1000:]}"' if kind else text))
    rows += _csv_rows(10)
    _inp(tmp, "a.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return len(rows)


def _too_large_lines() -> tuple[int, ...]:
    line, out = 2002, []  # the header, then 2000 small rows
    for size, kind in AROUND_LIMIT:
        if size > LIMIT:
            out.append(line)
        line += 2 if kind else 1
    return tuple(out)


def _uint64_rows() -> list[dict]:
    return [{"id": 2**64 - 1 - i, "x": i / 10} for i in range(10)]


def _uint64_table():
    import pyarrow as pa

    return pa.table({"id": pa.array([r["id"] for r in _uint64_rows()], pa.uint64()), "x": [r["x"] for r in _uint64_rows()]})


def ids_kept_whole(out: Path) -> None:
    """uint64 ids past int64: a string feature holding every digit."""
    assert manifest.load(str(out)).features["id"]["dtype"] == "string"
    assert sorted(r["id"][0] for r in _decoded(out)) == sorted(str(r["id"]).encode() for r in _uint64_rows())


SURROGATES = {3: '{"id": 2, "x": 0.2, "text": "\\ud83d"}', 5: '{"id": 4, "x": 0.4, "text": ["a", "\\udc00"]}',
              7: '{"id": 6, "x": 0.6, "text": "t", "\\ud83d": 1}'}


def raw_lines_kept(lines: dict[int, str]) -> Callable[[Path], None]:
    """Each dead letter's raw text is its input line, as written."""
    def check(out: Path) -> None:
        dead = [json.loads(line) for f in out.glob("run-*/rejected/*.jsonl") for line in f.read_text().splitlines()]
        assert {d["position"]: d["raw"] for d in dead} == lines

    return check


# --- checks on committed data sets ---------------------------------------------------------------


def _decoded(out: Path) -> list[dict]:
    m = manifest.load(str(out))
    rows = []
    for split in m.splits.values():
        for s in split.shards:
            data = fs.read_bytes(str(out / s.path))
            if m.compression == "gzip":
                data = gzip.decompress(data)
            rows += [example.decode_example(r) for r in framing.read_records(io.BytesIO(data))]
    return rows


def features_are(*names: str) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        assert sorted(manifest.load(str(out)).features) == sorted(names)

    return check


def clean_text(out: Path) -> None:
    """Header names without a BOM, values without a carriage return."""
    assert sorted(manifest.load(str(out)).features) == ["id", "text", "x"]
    texts = sorted(r["text"][0] for r in _decoded(out))
    assert texts == sorted(f"text {i}".encode() for i in range(10)), texts[:3]


def nullable(name: str, missing: int) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        spec = manifest.load(str(out)).features[name]
        assert (spec.get("nullable"), spec.get("missing")) == (True, missing), spec

    return check


def dtype_is(name: str, dtype: str) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        assert manifest.load(str(out)).features[name]["dtype"] == dtype

    return check


def big_value_whole(out: Path) -> None:
    sizes = sorted(len(r["text"][0]) for r in _decoded(out))
    assert sizes[-1] == 10 * 1024 * 1024


# --- the corpus ------------------------------------------------------------------------------------

S = "--schema={tmp}/schema.json"
SCHEMA_DOC = json.dumps(SCHEMA)
GOOD_CSV = "\n".join([HEADER, *_csv_rows(10)]) + "\n"
GOOD_JSONL = "".join(json.dumps(r) + "\n" for r in _json_rows(10))

CASES: list[Case] = [
    # CSV
    Case("csv_too_many_columns", "CSV row with 4 fields under a 3-column header",
         csv_file(bad={5: "3,0.3,text,extra"}), dead_letter("csv_columns", 5), subprocess=True),
    Case("csv_too_few_columns", "CSV row with 2 fields", csv_file(bad={5: "3,0.3"}), dead_letter("csv_columns", 5)),
    Case("csv_unterminated_quote_at_end", "last CSV row opens a quote that never closes",
         csv_file(extra=('10,1.0,"never closed',)), dead_letter("csv_parse", 12)),
    Case("csv_unterminated_quote_mid_file", "a quote opened on line 5 never closes: by RFC 4180 lines 5-11 are "
         "one record (4 in all), kept whole in the dead letter's raw text",
         csv_file(bad={5: '3,0.3,"oops'}, records=4), dead_letter("csv_parse", 5)),
    Case("csv_invalid_utf8", "CSV row with a Latin-1 byte", csv_file(bad={5: b"3,0.3,caf\xe9"}),
         dead_letter("invalid_utf8", 5)),
    Case("csv_carriage_return_unquoted", "a bare \\r inside an unquoted CSV field",
         csv_file(bad={5: "3,0.3,te\rxt"}), dead_letter("csv_parse", 5)),
    Case("csv_type_mismatch", "CSV value 'abc' in a float32 column (--schema)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,abc,text"})), dead_letter("type_mismatch", 5), args=(S,)),
    Case("csv_missing_value", "empty CSV value in an int64 column (--schema, --on-missing reject)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: ",0.3,text"})), dead_letter("missing_value", 5), args=(S, "--on-missing=reject")),
    Case("csv_missing_value_omitted", "empty CSV value in an int64 column: left out, the feature nullable",
         schema_file(SCHEMA_DOC, csv_file(bad={5: ",0.3,text"})), works(), args=(S,), check=nullable("id", 1)),
    Case("csv_missing_value_required", "empty CSV value in a --required column",
         schema_file(SCHEMA_DOC, csv_file(bad={5: ",0.3,text"})), dead_letter("missing_value", 5),
         args=(S, "--required=id")),
    Case("csv_int64_overflow", "CSV integer beyond int64 in an int64 column (--schema)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "99999999999999999999,0.3,text"})), dead_letter("out_of_range", 5),
         args=(S,)),
    Case("csv_float32_overflow", "CSV value 1e39 in a float32 column (--schema)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,1e39,text"})), dead_letter("out_of_range", 5), args=(S,)),
    Case("csv_nan", "CSV value nan in a float32 column (--schema; nan not a --null-values)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,nan,text"})), dead_letter("non_finite", 5),
         args=(S, "--null-values=")),
    Case("csv_nan_missing", "CSV value nan in a float32 column: a default null value, left out",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,nan,text"})), works(), args=(S,), check=nullable("x", 1)),
    Case("csv_minus_infinity", "CSV value -Infinity in a float32 column (--schema)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,-Infinity,text"})), dead_letter("non_finite", 5), args=(S,)),
    Case("csv_float_beyond_double", "CSV value 1e400 (beyond a double) in a float32 column (--schema)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,1e400,text"})), dead_letter("out_of_range", 5), args=(S,)),
    Case("csv_record_too_large", "one CSV line of 2 MiB with --max-record-mb 1",
         csv_file(bad={5: "3,0.5," + "y" * (2 << 20)}), dead_letter("record_too_large", 5),
         args=("--max-record-mb", "1")),
    Case("csv_records_around_the_limit", "CSV records of 1 MiB, 1 MiB - 1, and 1 MiB + 1 or + 80 kB (one line, or "
         "two quoted lines) with --max-record-mb 1: only those over it are rejected, column-wise too",
         records_around_the_limit, dead_letter("record_too_large", *_too_large_lines()), args=("--max-record-mb", "1")),
    Case("csv_blank_number_omitted", "CSV value of spaces in a float32 column: missing, left out (as an empty one)",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3,  ,text"})), works(), args=(S,), check=nullable("x", 1)),
    Case("csv_blank_number_rejected", "CSV value of spaces in a float32 column with --on-missing reject",
         schema_file(SCHEMA_DOC, csv_file(bad={5: "3, \t ,text"})), dead_letter("missing_value", 5),
         args=(S, "--on-missing=reject")),
    Case("csv_blank_lines", "blank lines between CSV rows (skipped, line numbers still exact)",
         csv_file(bad={4: "", 7: "5,0.5"}), dead_letter("csv_columns", 7)),
    Case("csv_bad_rows_in_second_file", "second of two CSV files has a short row",
         two_files_one_bad, dead_letter("csv_columns", 7), glob="in/*.csv"),
    Case("csv_empty_file", "a 0-byte CSV file", raw_file("a.csv", b""),
         refused("found no valid records to infer a schema")),
    Case("csv_empty_file_with_schema", "a 0-byte CSV file with --schema",
         schema_file(SCHEMA_DOC, raw_file("a.csv", b"")), refused("received no records", 1), args=(S,)),
    Case("csv_header_only", "a CSV file with a header and no rows", raw_file("a.csv", b"id,x,text\n"),
         refused("found no valid records to infer a schema")),
    Case("csv_duplicate_columns", "CSV header 'id,x,x'", raw_file("a.csv", b"id,x,x\n1,2,3\n", 1),
         refused("repeats column name(s) 'x'"), subprocess=True),
    Case("csv_empty_column_name", "CSV header 'id,,text'", raw_file("a.csv", b"id,,text\n1,2,3\n", 1),
         refused("has no name for column(s) 2")),
    Case("csv_10mb_field", "one CSV field of 10 MiB", big_field, works(), check=big_value_whole),
    Case("csv_bom", "CSV starting with a UTF-8 BOM", csv_file(bom=True), works(), check=clean_text),
    Case("csv_crlf", "CSV with \\r\\n line ends", csv_file(eol="\r\n"), works(), check=clean_text),
    Case("csv_bom_crlf_gzip", "gzipped CSV with a BOM and \\r\\n line ends",
         raw_file("a.csv.gz", gzip.compress(b"\xef\xbb\xbf" + GOOD_CSV.replace("\n", "\r\n").encode(), mtime=0), 10),
         works(), check=clean_text),
    Case("csv_truncated_gzip", "gzipped CSV cut at 60%",
         gzip_truncated("a.csv.gz", ("\n".join([HEADER, *_csv_rows(4000)]) + "\n").encode()),
         dead_letter("gzip_truncated", -1)),
    Case("too_many_bad_records", "2 bad CSV rows without --max-bad-records",
         csv_file(bad={3: "1", 6: "4"}), refused("2 bad records (more than --max-bad-records 0)", 1),
         subprocess=True),
    Case("every_record_bad", "every CSV row too short (schema inferred)",
         csv_file(bad={i: "1" for i in range(2, 12)}), refused("the CSV header has 3 names but the rows have 1 fields")),
    Case("every_record_bad_with_schema", "every CSV row too short, --schema and --max-bad-records 100",
         schema_file(SCHEMA_DOC, csv_file(bad={i: "1" for i in range(2, 12)})),
         refused("the CSV header has 3 names but the rows have 1 fields"),
         args=(S, "--max-bad-records", "100")),
    # JSON Lines
    Case("jsonl_invalid_json", "a JSON Lines line cut mid-object", jsonl_file(bad={5: '{"id": 4, "x": '}),
         dead_letter("json_invalid", 5)),
    Case("jsonl_nan", "a JSON Lines value NaN", jsonl_file(bad={5: '{"id": 4, "x": NaN, "text": "t"}'}),
         dead_letter("non_finite", 5)),
    Case("jsonl_infinity", "a JSON Lines value Infinity", jsonl_file(bad={5: '{"id": 4, "x": Infinity, "text": "t"}'}),
         dead_letter("non_finite", 5)),
    Case("jsonl_array_line", "a JSON Lines line holding an array", jsonl_file(bad={5: "[1, 2]"}),
         dead_letter("json_not_object", 5)),
    Case("jsonl_scalar_line", "a JSON Lines line holding a number", jsonl_file(bad={5: "42"}),
         dead_letter("json_not_object", 5)),
    Case("jsonl_invalid_utf8", "a JSON Lines line with a Latin-1 byte",
         jsonl_file(bad={5: b'{"id": 4, "x": 0.4, "text": "caf\xe9"}'}), dead_letter("invalid_utf8", 5)),
    Case("jsonl_lone_surrogate", "JSON Lines lone surrogate escapes (\\ud83d) in a value, a list and a key",
         jsonl_file(bad=SURROGATES), dead_letter("invalid_utf8", *SURROGATES), check=raw_lines_kept(SURROGATES),
         subprocess=True),
    Case("json_array_lone_surrogate", "a lone surrogate escape in element 2 of a .json array",
         raw_file("a.json", b'[{"id": 1, "text": "a"}, {"id": 2, "text": "\\ud83d"}, {"id": 3, "text": "c"}]', 3),
         dead_letter("invalid_utf8", 2), check=raw_lines_kept({2: '{"id": 2, "text": "\\ud83d"}'})),
    Case("jsonl_uint64_ids", "JSON Lines integers past int64 (uint64 ids): inferred string, every digit kept",
         jsonl_file(rows=_uint64_rows()), works(), check=ids_kept_whole),
    Case("jsonl_nested_object_inferred", "a nested object, schema inferred",
         jsonl_file(bad={5: {"id": 4, "x": {"a": 1}, "text": "t"}}), refused("holds nested objects")),
    Case("jsonl_nested_object_schema", "a nested object where --schema says float32",
         schema_file(SCHEMA_DOC, jsonl_file(bad={5: {"id": 4, "x": {"a": 1}, "text": "t"}})),
         dead_letter("nested_object", 5), args=(S,)),
    Case("jsonl_type_changes_in_sample", "a field that is a number, then a string (inferred: string)",
         jsonl_file(bad={5: {"id": 4, "x": "four", "text": "t"}}), works(), check=dtype_is("x", "string")),
    Case("jsonl_type_changes_after_sample", "a float field turns into a string on line 1150 of 1200, "
         "past the 1000-row inference sample", mixed_type_after_sample, dead_letter("type_mismatch", 1150)),
    Case("jsonl_null_scalar", "null in a scalar float field", jsonl_file(bad={5: {"id": 4, "x": None, "text": "t"}}),
         dead_letter("missing_value", 5), args=("--on-missing=reject",)),
    Case("jsonl_missing_field", "a line without field x", jsonl_file(bad={5: {"id": 4, "text": "t"}}),
         dead_letter("missing_value", 5), args=("--on-missing=reject",)),
    Case("jsonl_null_scalar_omitted", "null in a scalar float field: left out, the feature nullable",
         jsonl_file(bad={5: {"id": 4, "x": None, "text": "t"}}), works(), check=nullable("x", 1)),
    Case("jsonl_unknown_field_schema", "a field outside --schema (dropped)",
         schema_file(SCHEMA_DOC, jsonl_file(bad={5: {"id": 4, "x": 0.4, "text": "t", "extra": 1}})), works(),
         args=(S,), check=features_are("id", "text", "x")),
    Case("jsonl_json_array_file", "a .json file holding one JSON array: read as records",
         raw_file("a.json", json.dumps(_json_rows(3)).encode(), 3), works()),
    Case("jsonl_json_array_in_jsonl", "a .jsonl file holding one JSON array",
         raw_file("a.jsonl", json.dumps(_json_rows(3)).encode(), 3), refused("holds a JSON array, not JSON Lines")),
    Case("jsonl_empty_file", "a 0-byte JSON Lines file", raw_file("a.jsonl", b""),
         refused("found no valid records to infer a schema")),
    Case("jsonl_bom_crlf_blank", "JSON Lines with a BOM, \\r\\n and blank lines",
         raw_file("a.jsonl", b"\xef\xbb\xbf" + GOOD_JSONL.replace("\n", "\r\n\r\n").encode(), 10), works(),
         check=clean_text),
    Case("jsonl_truncated_gzip", "gzipped JSON Lines cut at 60%",
         gzip_truncated("a.jsonl.gz", "".join(json.dumps(r) + "\n" for r in _json_rows(4000)).encode()),
         dead_letter("gzip_truncated", -1)),
    # Parquet
    Case("parquet_corrupt_footer", "a Parquet file whose last 8 bytes are overwritten",
         parquet_file(lambda b: b[:-8] + b"XXXXXXXX"), refused("is not a readable Parquet file"), subprocess=True),
    Case("parquet_truncated", "a Parquet file cut in half", parquet_file(lambda b: b[: len(b) // 2]),
         refused("is not a readable Parquet file")),
    Case("parquet_struct_column", "a Parquet struct column, schema inferred", parquet_file(table=_struct_table),
         refused("holds nested objects")),
    Case("parquet_struct_column_dropped", "a Parquet struct column that --schema leaves out: dropped",
         schema_file(json.dumps({"id": {"dtype": "int64", "shape": []}}), parquet_file(table=_struct_table)),
         works(), args=(S,)),
    Case("parquet_struct_column_in_schema", "a Parquet struct column, null but in row 3, where --schema says float32",
         schema_file(json.dumps({"id": {"dtype": "int64", "shape": []}, "point": {"dtype": "float32", "shape": []}}),
                     parquet_file(table=_one_struct_table)), dead_letter("nested_object", 3), args=(S,)),
    Case("parquet_null", "a Parquet null in a float column", parquet_file(table=_null_table),
         dead_letter("missing_value", 3), args=("--on-missing=reject",)),
    Case("parquet_uint64_ids", "a Parquet uint64 column past int64: inferred string, every digit kept",
         parquet_file(table=_uint64_table), works(), check=ids_kept_whole),
    Case("parquet_null_omitted", "a Parquet null in a float column: left out, the feature nullable",
         parquet_file(table=_null_table), works(), check=nullable("x", 1)),
    Case("parquet_int_null", "a Parquet null in an integer column", parquet_file(table=_int_null_table),
         dead_letter("missing_value", 3), args=("--on-missing=reject",)),
    Case("parquet_int_null_omitted", "a Parquet null in an integer column: left out, the feature nullable",
         parquet_file(table=_int_null_table), works(), check=nullable("id", 1)),
    # TFRecord
    Case("tfrecord_bad_length_crc", "record 5's length CRC is wrong (reading resumes at record 6, the next "
         "offset where a whole record checks)",
         tfrecord_file(lambda f: b"".join(f[:4] + [_flip(f[4], 9)] + f[5:])), dead_letter("tfrecord_length_crc", 5)),
    Case("tfrecord_bad_data_crc", "record 5's data CRC is wrong (framing intact: records 6-10 are read)",
         tfrecord_file(lambda f: b"".join(f[:4] + [_flip(f[4], len(f[4]) - 1)] + f[5:])),
         dead_letter("tfrecord_data_crc", 5)),
    Case("tfrecord_truncated_last", "the file ends inside record 10",
         tfrecord_file(lambda f: b"".join(f)[:-7]), dead_letter("tfrecord_truncated", 10)),
    Case("tfrecord_not_an_example", "record 5 holds bytes that are not a tf.train.Example",
         tfrecord_file(lambda f: b"".join(f[:4] + [framing.frame(b"\xff\xffnot a proto")] + f[5:])),
         dead_letter("not_an_example", 5)),
    Case("tfrecord_truncated_gzip", "a gzipped TFRecord file cut at 60%",
         gzip_truncated("a.tfrecord.gz", b"".join(framing.frame(r) for r in _records(4000))),
         dead_letter("gzip_truncated", -1)),
    # Inputs, outputs and flags
    Case("glob_matches_nothing", "--input pattern that matches no file", raw_file("a.csv", GOOD_CSV.encode()),
         refused("matches no files"), glob="in/*.parquet", subprocess=True),
    Case("input_is_a_folder", "--input names a folder", raw_file("a.csv", GOOD_CSV.encode()),
         refused("is a folder"), glob="in"),
    Case("unknown_extension", "an input file named a.dat", raw_file("a.dat", GOOD_CSV.encode()),
         refused("cannot tell the format")),
    Case("text_without_task", "an input file named a.txt (text) without --task", raw_file("a.txt", GOOD_CSV.encode()),
         refused("is text: give --task bert-pretraining")),
    Case("unreadable_file", "an input file without read permission", unreadable, refused("cannot be read")),
    Case("output_inside_input", "--output folder inside the --input glob", output_inside_input,
         refused("is inside the input"), glob="in/**/*.jsonl", args=("--output={tmp}/in/ds",)),
    Case("fewer_records_than_shards", "3 records into 5 shards", csv_file(n=3),
         refused("fewer than its 5 shards", 1), args=("--num-shards", "5"), subprocess=True),
    Case("schema_missing", "--schema names a file that does not exist", csv_file(), refused("does not exist"),
         args=(S,)),
    Case("schema_not_json", "--schema file is not JSON", schema_file("{not json", csv_file()),
         refused("is not valid JSON"), args=(S,)),
    Case("schema_bad_dtype", "--schema with dtype int32",
         schema_file(json.dumps({"id": {"dtype": "int32", "shape": []}}), csv_file()),
         refused("dtype 'int32' is not supported"), args=(S,)),
    Case("schema_empty", "--schema file holding {}", schema_file("{}", csv_file()), refused("defines no features"),
         args=(S,)),
    Case("jsonl_duplicate_key", 'a JSON Lines object with a key twice ({"id": 4, ..., "id": 40}), never read as its last value',
         jsonl_file(bad={5: '{"id": 4, "x": 0.4, "text": "d", "id": 40}'}), dead_letter("duplicate_key", 5)),
    Case("json_array_duplicate_key", "a key twice in a nested object of element 2 of a .json array",
         raw_file("a.json", b'[{"id": 1, "text": "a"}, {"id": 2, "text": "b", "m": {"k": 1, "k": 2}}, '
                  b'{"id": 3, "text": "c"}]', 3), dead_letter("duplicate_key", 2)),
]


# --- running a case --------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    """What a case did, as RELIABILITY.md reports it."""

    code: int
    error_lines: list[str]
    stderr: str
    records_in: int
    read: int | None = None
    written: int | None = None
    rejected: int | None = None
    dead: list[dict] = dataclasses.field(default_factory=list)

    @property
    def lost(self) -> int | None:
        """Records the input held that are neither in a shard nor in a dead letter."""
        return None if self.written is None else self.records_in - self.written - self.rejected


def _gzip_good_records(path: Path, header: bool) -> int:
    """Complete lines (or TFRecords) a reader can take from a truncated gzip file, + the broken one."""
    import zlib

    data = zlib.decompressobj(31).decompress(path.read_bytes())
    if path.name.endswith(".tfrecord.gz"):
        count = 0
        try:
            for _ in framing.read_records(io.BytesIO(data)):
                count += 1
        except framing.CorruptRecordError:
            pass
        return count + 1
    return data.count(b"\n") - (1 if header else 0) + 1


def output_of(case: Case, tmp: Path) -> Path:
    """The data set folder: tmp/ds, or the case's own --output=."""
    given = [a.split("=", 1)[1] for a in case.args if a.startswith("--output=")]
    return Path(given[-1].replace("{tmp}", str(tmp))) if given else tmp / "ds"


def execute(case: Case, tmp: Path, *, in_process: bool = True) -> Result:
    """Makes the input and runs the CLI on it; returns what happened."""
    records = case.make(tmp)
    path_in = tmp / case.glob
    if records == -1:
        (gz,) = (tmp / "in").glob("*.gz")
        records = _gzip_good_records(gz, header=gz.name.startswith("a.csv"))
    args = ["--input", str(path_in), "--output", str(tmp / "ds"), "--num-shards", "2"]
    args += [a.replace("{tmp}", str(tmp)) for a in case.args]
    if case.outcome.kind == "dead_letter":
        args += ["--max-bad-records", str(len(case.outcome.positions))]
    if in_process:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = run.main(args)
        stderr = err.getvalue()
    else:
        proc = run_cli("shardprep.run", *args)
        code, stderr = proc.returncode, proc.stderr
    result = Result(code, [x for x in stderr.splitlines() if x.startswith("shardprep.run: error:")], stderr, records)
    out = output_of(case, tmp)
    if (out / "manifest.json").exists():
        m = manifest.load(str(out))
        result.read, result.written, result.rejected = m.accounting.read, m.accounting.written, m.accounting.rejected
    for f in sorted(out.glob("run-*/rejected/*.jsonl")):
        result.dead += [json.loads(line) for line in f.read_text().splitlines()]
    return result


def check(case: Case, result: Result, tmp: Path) -> None:
    """The contract every case must keep."""
    expected = case.outcome
    assert "Traceback" not in result.stderr, result.stderr
    out = output_of(case, tmp)
    if expected.kind == "refused":
        assert result.code == expected.code, (result.code, result.stderr)
        assert len(result.error_lines) == 1, result.stderr
        assert expected.message in result.error_lines[0], result.error_lines
        assert not (out / "manifest.json").exists()
        return
    assert result.code == 0, result.stderr
    assert result.read == result.written + result.rejected
    assert result.lost == 0, f"{result.records_in} records in, {result.written} written, {result.rejected} rejected"
    assert verify.verify(str(out))[0] == []
    if expected.kind == "works":
        assert result.rejected == 0 and not result.dead
    else:
        assert result.rejected == len(expected.positions)
        assert manifest.load(str(out)).rejected.by_reason == {expected.reason: len(expected.positions)}
        assert [d["reason"] for d in result.dead] == [expected.reason] * len(expected.positions)
        positions = [d["position"] for d in result.dead]
        if expected.positions != (-1,):  # -1: where a truncated gzip stream breaks, computed in _gzip_good_records
            assert positions == list(expected.positions), result.dead
        else:
            assert positions == [result.records_in + (1 if case.name.startswith("csv") else 0)], result.dead
        inputs = sorted(p for p in (tmp / "in").rglob("*") if p.is_file())
        for d in result.dead:
            assert Path(d["source"]) in inputs, d["source"]
            assert d["detail"] and ("raw" in d or "raw_base64" in d)
    if case.check:
        case.check(out)


@contextlib.contextmanager
def reads_denied(case: Case, tmp: Path) -> Iterator[None]:
    """As root, chmod does not stop reads: opening the file then fails the way it does for other users."""
    if case.make is not unreadable or os.geteuid() != 0:
        yield
        return
    real, real_facts = fs.open_file, local_files.opened_facts
    target = str(tmp / "in" / "a.csv")

    def open_file(url: str, mode: str = "rb"):
        if url.removeprefix("file://") == target and "r" in mode:
            raise PermissionError(13, "Permission denied", target)
        return real(url, mode)

    def opened_facts(path: str, whole: int = 0) -> local_files.LocalFacts:  # the launcher's open of each input file
        if path == target:
            raise PermissionError(13, "Permission denied", target)
        return real_facts(path, whole)

    with mock.patch.object(fs, "open_file", open_file), mock.patch.object(local_files, "opened_facts", opened_facts):
        yield


def run_case(case: Case, tmp: Path, *, in_process: bool | None = None) -> Result:
    """Runs one case the way the test does (the root-only read denial works in process only)."""
    if in_process is None:
        in_process = not case.subprocess or (case.make is unreadable and os.geteuid() == 0)
    with reads_denied(case, tmp):
        return execute(case, tmp, in_process=in_process)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    check(case, run_case(case, tmp_path), tmp_path)


def test_the_corpus_covers_the_issue() -> None:
    names = {c.name for c in CASES}
    assert len(CASES) >= 30 and len(names) == len(CASES)
    assert sum(c.subprocess for c in CASES) >= 3
