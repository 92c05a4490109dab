"""Issue 62: many small files of every format, gathered into shared work units (``formats.grouping``).

A few hundred files of CSV, JSON Lines, JSON arrays, Parquet and TFRecord, interleaved in one input
(one schema), a few rows each, with bad records in some: the run on every engine gives the bytes
of the run that plans each file as its own unit (today's plan: shards, dead letters and the
manifest's per-file counts), the dead letters name their file and position, and the manifest's
accounting holds per source file.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.identity import _example, _frame
from shardprep import manifest, run
from shardprep.formats import grouping

FORMATS = ("csv", "jsonl", "json", "parquet", "tfrecord")
FILES = 300
SCHEMA = {"id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []},
          "label": {"dtype": "int64", "shape": []}, "text": {"dtype": "string", "shape": []}}


def _write(folder: Path) -> dict[tuple[str, int], str]:
    """The input files; returns the dead letters they must give: (file name, position) -> reason."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(62)
    bad: dict[tuple[str, int], str] = {}
    next_id = 0
    for i in range(FILES):
        fmt = FORMATS[i % len(FORMATS)]
        name = f"part-{i:05d}.{fmt}"
        n = rng.choice((0, 1, 2, 2, 3, 5)) if i > 4 else 2
        rows = [{"id": next_id + k, "x": round(rng.uniform(-9, 9), 2), "label": rng.randint(0, 4),
                 "text": rng.choice(["a", "b, c", 'say "hi"', "é ✓"])} for k in range(n)]
        next_id += n
        missing = i % 7 == 3 and n > 1  # one row without its label: dead letter missing_value (--required label)
        if missing:
            rows[1]["label"] = None
        path = folder / name
        if fmt == "csv":
            lines = ["id,x,label,text"] + [",".join([str(r["id"]), str(r["x"]), "" if r["label"] is None else
                                                     str(r["label"]), json.dumps(r["text"]).replace('\\"', '""')])
                                           for r in rows]
            if i % 11 == 5 and n > 1:  # (a file of this line alone would be refused: its header does not fit)
                lines.append("1,2,3,4,5")  # one field too many
                bad[(name, len(lines))] = "csv_columns"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            if missing:
                bad[(name, 3)] = "missing_value"  # line 3: the second row
        elif fmt == "jsonl":
            lines = [json.dumps(r, ensure_ascii=False) for r in rows]
            if i % 11 == 6:
                lines.insert(0, "{not json")
                bad[(name, 1)] = "json_invalid"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            if missing:
                bad[(name, len(lines) - n + 2)] = "missing_value"
        elif fmt == "json":
            items = list(rows)
            if i % 11 == 7:
                items.append([1, 2])
                bad[(name, len(items))] = "json_not_object"
            path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
            if missing:
                bad[(name, 2)] = "missing_value"
        elif fmt == "parquet":
            if not rows:
                continue  # a Parquet file holds a schema: an empty one is no small file of this input
            table = pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.int64()), ("x", pa.float64()),
                                                                ("label", pa.int64()), ("text", pa.string())]))
            pq.write_table(table, path, row_group_size=2)  # a few row groups each
            if missing:
                bad[(name, 2)] = "missing_value"
        else:
            records = [_frame(_example({k: v for k, v in r.items() if v is not None})) for r in rows]
            if i % 11 == 9:
                records.append(_frame(b"\xff\xff\xff"))
                bad[(name, len(records))] = "not_an_example"
            path.write_bytes(b"".join(records))
            if missing:
                bad[(name, 2)] = "missing_value"
    return bad


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    bad = _write(folder)
    schema = tmp_path_factory.mktemp("schema") / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return folder, schema, bad


def _reshard(small_files, out: Path, *flags: str) -> int:
    folder, schema, bad = small_files
    return run.main(["--input", f"{folder}/*", "--output", str(out), "--schema", str(schema), "--num-shards", "4",
                     "--split", "train=0.8,eval=0.2", "--required", "label", "--max-bad-records", str(len(bad)),
                     "--unit-mb", "0.02", *flags])


def _contents(out: Path) -> dict:
    """What must not change: every shard's and dead-letter file's bytes (run folder as RUN), and the
    manifest's splits, sources and accounting."""
    m = json.loads((out / "manifest.json").read_text())
    run_folder = next(out.glob("run-*"))
    files = {str(p.relative_to(run_folder)): p.read_bytes() for p in sorted(run_folder.rglob("*"))
             if p.is_file() and p.suffix in (".tfrecord", ".jsonl")}
    return {"files": files, "sources": m["sources"], "accounting": m["accounting"],
            "records": {name: s["num_records"] for name, s in m["splits"].items()}}


@pytest.fixture(scope="module")
def reference(small_files, tmp_path_factory):
    """Each file its own unit, as before issue 62: no file is small enough to be gathered."""
    out = tmp_path_factory.mktemp("ref") / "ds"
    patch = pytest.MonkeyPatch()
    patch.setattr(grouping, "SMALL_FILE_BYTES", 0)
    try:
        assert _reshard(small_files, out, "--local-workers", "1") == 0
    finally:
        patch.undo()
    return _contents(out)


@pytest.fixture(scope="module")
def grouped(small_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("grouped") / "ds"
    assert _reshard(small_files, out) == 0  # the default engine: this machine's worker processes
    return out


def test_small_files_are_gathered_and_give_the_per_file_bytes(small_files, grouped, reference, caplog):
    assert _contents(grouped) == reference
    with caplog.at_level("INFO", logger="shardprep"):
        folder, _, _ = small_files
        from shardprep import formats

        files = formats.expand_inputs([f"{folder}/*"])
        units = formats.plan_units(files, unit_bytes=int(0.02 * 2**20))
    assert len(units) < len(files) / 10 and {f.format for f in files} == set(FORMATS)
    assert any(len({m.file.format for m in u.members}) == len(FORMATS) for u in units)  # formats side by side


def test_dead_letters_name_their_file_and_position(small_files, grouped):
    folder, _, bad = small_files
    letters = [json.loads(line) for p in sorted(grouped.glob("run-*/rejected/*.jsonl"))
               for line in p.read_text().splitlines()]
    got = {(Path(d["source"]).name, d["position"]): d["reason"] for d in letters}
    assert got == bad and len(letters) == len(bad) > 30
    assert {Path(d["source"]).suffix.lstrip(".") for d in letters} == set(FORMATS)
    for d in letters:  # the unit each names is its file's own, as when every file was one
        index = sorted(p.name for p in folder.iterdir()).index(Path(d["source"]).name)
        assert d["unit"] == f"{index}:0"


def test_the_manifest_accounts_for_every_file(small_files, grouped):
    folder, _, bad = small_files
    m = manifest.load(str(grouped))
    assert m.accounting.read == m.accounting.written + m.accounting.rejected
    assert m.accounting.rejected == len(bad)
    names = sorted(p.name for p in folder.iterdir())
    assert [Path(s.uri).name for s in m.sources] == names
    rejected = {name: sum(1 for (n, _) in bad if n == name) for name in names}
    assert [s.num_rejected for s in m.sources] == [rejected[n] for n in names]
    assert sum(s.num_records for s in m.sources) == m.accounting.written


@pytest.mark.parametrize("engine", [
    pytest.param(["--local-workers", "1"], id="one-process"),
    pytest.param(["--runner", "beam"], id="beam", marks=pytest.mark.slow),
    pytest.param(["--runner", "dask", "--dask-workers", "2"], id="dask", marks=pytest.mark.slow),
])
def test_every_engine_gives_the_same_bytes(small_files, reference, engine, tmp_path):
    out = tmp_path / "ds"
    assert _reshard(small_files, out, *engine) == 0
    assert _contents(out) == reference
