"""Byte identity of the re-shard across code trees: same inputs, same flags -> the same shard bytes.

Generates small deterministic inputs (three uneven CSV files with quoted commas, quotes and newlines
and a few bad rows; a JSON Lines file; a Parquet file of many row groups; a TFRecord file written
with our own framing; and, as ``<format>_small``, 160 small files of each format with bad records
in some and a few larger files between them), runs ``python -m shardprep.run`` on each with a small
``--unit-mb`` so files are cut into several work units and small files gathered into shared ones,
and reports ``{case: {shard path: crc32c}}``; the run folder's name is replaced by ``RUN`` and the
input folder by ``<IN>`` in the dead letters.

    python -m benchmarks.identity --code-root /tmp/base --json base.json
    python -m benchmarks.identity --code-root . --json main.json
    python -m benchmarks.identity --compare base.json main.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import google_crc32c

__all__ = ["CASES", "FORMATS", "SMALL", "compare", "digests", "make_inputs", "run_format"]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
SMALL = tuple(f"{fmt}_small" for fmt in FORMATS)  # many small files of each format (issue 62)
CASES = FORMATS + SMALL
SMALL_FILES = 160
FLAGS = ("--num-shards", "8", "--seed", "7", "--split", "train=0.9,eval=0.1", "--unit-mb", "0.05",
         "--max-bad-records", "1000")
_WORDS = ["alpha", "beta", "gamma, delta", 'say "hi"', "line\nbreak", "émoji ✓", "x,y,z", "", "tab\there"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))


def _csv_field(value: str) -> str:
    if any(c in value for c in ',"\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _rows(rng: random.Random, n: int, start: int) -> list[dict]:
    return [{"id": start + i, "x": round(rng.uniform(-1e3, 1e3), 3), "label": rng.randint(0, 9), "text": _text(rng)}
            for i in range(n)]


def _frame(record: bytes) -> bytes:
    """TFRecord framing, as ``shardprep.framing.frame`` writes it (kept here so the inputs never depend on the tree)."""
    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked(length)) + record + struct.pack("<I", masked(record))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _varint(len(body)) + body


def _example(row: dict) -> bytes:
    """A tf.train.Example of ``row`` (int -> Int64List, float -> FloatList, str -> BytesList), written by hand."""
    entries = b""
    for name in sorted(row):
        v = row[name]
        if isinstance(v, int):
            feature = _ld(0x1A, _ld(0x0A, _varint(v)))
        elif isinstance(v, float):
            feature = _ld(0x12, _ld(0x0A, struct.pack("<f", v)))
        else:
            feature = _ld(0x0A, _ld(0x0A, v.encode("utf-8")))
        entries += _ld(0x0A, _ld(0x0A, name.encode("utf-8")) + _ld(0x12, feature))
    return _ld(0x0A, entries)


def make_inputs(root: Path) -> dict[str, str]:
    """Writes the inputs under ``root``; returns the ``--input`` pattern of each format."""
    rng = random.Random(20261201)
    start = 0
    (root / "csv").mkdir(parents=True, exist_ok=True)
    for name, n in (("a.csv", 16_000), ("b.csv", 9_000), ("c.csv", 5_000)):  # uneven files
        lines = ["id,x,label,text"]
        for i, row in enumerate(_rows(rng, n, start)):
            fields = [str(row["id"]), repr(row["x"]), str(row["label"]), _csv_field(row["text"])]
            if i % 4999 == 17:  # a bad row: one field too many
                fields.append("extra")
            lines.append(",".join(fields))
        start += n
        (root / "csv" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = _rows(rng, 6_000, start)
    (root / "jsonl").mkdir(exist_ok=True)
    text = [json.dumps(r, ensure_ascii=False) for r in rows]
    text[100], text[3000] = "{not json", "[1, 2]"
    (root / "jsonl" / "a.jsonl").write_text("\n".join(text) + "\n", encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "parquet").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "parquet" / "a.parquet", row_group_size=500, compression="snappy")
    (root / "tfrecord").mkdir(exist_ok=True)
    records = [_frame(_example(r)) for r in rows]
    records[42] = _frame(b"\xff\xff\xff")  # not an Example: one dead letter
    (root / "tfrecord" / "a.tfrecord").write_bytes(b"".join(records))
    patterns = {fmt: str(root / fmt / f"*.{fmt}") for fmt in FORMATS}
    return {**patterns, **_small_files(root, rng, start + 6_000)}


def _small_files(root: Path, rng: random.Random, start: int) -> dict[str, str]:
    """Many small files of each format (``SMALL``: a few hundred bytes to a few KB each, gathered into
    shared work units, ``shardprep.formats.grouping``), with a few larger files between them that
    keep their own units, an empty file, and bad records in some files; returns their patterns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folders = {fmt: root / fmt for fmt in SMALL}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    for i in range(SMALL_FILES):
        n = 1_500 if i in (40, 41, 97) else rng.choice((0, 1, 2, 2, 3, 5, 40)) if i else 0  # file 0: empty
        rows = _rows(rng, n, start)
        start += n
        name = f"part-{i:05d}"
        lines = ["id,x,label,text"] if i != 5 or n else []  # file 5 (when empty): no header either
        for k, row in enumerate(rows):
            fields = [str(row["id"]), repr(row["x"]), str(row["label"]), _csv_field(row["text"])]
            lines.append(",".join(fields + (["extra"] if (i + k) % 37 == 11 else [])))  # a bad row now and then
        (folders["csv_small"] / f"{name}.csv").write_text("\n".join(lines) + "\n" if lines else "", encoding="utf-8")
        text = [json.dumps(r, ensure_ascii=False) for r in rows]
        if i % 23 == 4 and text:
            text[len(text) // 2] = "{not json" if i % 2 else "[1, 2]"
        (folders["jsonl_small"] / f"{name}.jsonl").write_text("".join(t + "\n" for t in text), encoding="utf-8")
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), folders["parquet_small"] / f"{name}.parquet",
                           row_group_size=max(1, n // 3), compression="snappy")
        records = [_frame(_example(r)) for r in rows]
        if i % 29 == 3 and records:
            records[-1] = _frame(b"\xff\xff\xff")  # not an Example
        (folders["tfrecord_small"] / f"{name}.tfrecord").write_bytes(b"".join(records))
    return {fmt: str(folders[fmt] / f"*.{fmt.removesuffix('_small')}") for fmt in SMALL}


def run_format(code_root: Path, pattern: str, out: Path, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """Starts ``python -m shardprep.run`` of ``code_root``'s tree on ``pattern`` into ``out``."""
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    cmd = [sys.executable, "-m", "shardprep.run", "--input", pattern, "--output", str(out), *FLAGS, *extra]
    return subprocess.Popen(cmd, cwd=code_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.args)} failed ({proc.returncode}): {err[-2000:]}")


def digests(out: Path, inputs: Path) -> dict[str, str]:
    """{shard or dead-letter path (run folder as RUN): crc32c} of a finished data set."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).parts
        if not path.is_file() or len(rel) < 3 or not rel[0].startswith("run-") or rel[1] == "spill":
            continue
        data = path.read_bytes()
        if rel[1] == "rejected":
            data = data.replace(str(inputs).encode(), b"<IN>")
        elif not path.name.endswith(".tfrecord"):
            continue
        found["/".join(("RUN", *rel[1:]))] = f"{google_crc32c.value(data):08x}"
    return found


def identity(code_root: Path, formats: tuple[str, ...] = CASES, extra: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """Generates the inputs, re-shards each format with ``code_root``'s tree (``extra``: more flags,
    e.g. another runner), returns the digests."""
    with tempfile.TemporaryDirectory(prefix="identity-") as tmp:
        inputs = Path(tmp) / "in"
        patterns = make_inputs(inputs)
        runs = {fmt: run_format(code_root, patterns[fmt], Path(tmp) / f"out-{fmt}", extra) for fmt in formats}  # at once
        for proc in runs.values():
            _wait(proc)
        return {fmt: digests(Path(tmp) / f"out-{fmt}", inputs) for fmt in formats}


def compare(a: dict, b: dict) -> list[str]:
    """Lines describing every difference between two digest documents; [] when identical."""
    diffs = []
    for fmt in sorted(set(a) | set(b)):
        x, y = a.get(fmt, {}), b.get(fmt, {})
        for path in sorted(set(x) | set(y)):
            if x.get(path) != y.get(path):
                diffs.append(f"{fmt} {path}: {x.get(path)} != {y.get(path)}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code-root", type=Path, help="the tree whose shardprep runs (default: this one)")
    p.add_argument("--json", type=Path, help="also write the digests here")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"), help="diff two digest files")
    args = p.parse_args(argv)
    if args.compare:
        diffs = compare(*(json.loads(f.read_text()) for f in args.compare))
        print("\n".join(diffs) or "identical")
        return 1 if diffs else 0
    root = (args.code_root or Path(__file__).resolve().parents[1]).resolve()
    doc = identity(root)
    text = json.dumps(doc, indent=1, sort_keys=True)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
