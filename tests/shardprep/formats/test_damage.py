"""Damage a format's own integrity data can show is never committed (issue 35, item 1).

A Parquet file written with page checksums (``write_page_checksum=True``) has one byte flipped at
an offset drawn at random: the run either refuses the file (exit 2, one line naming it, no
manifest) or commits shards byte-identical to those of the undamaged file (a flip the values do
not depend on, e.g. in a statistics field of the footer). A changed value is never committed.
"""
from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardprep import manifest, run

ROWS = 3000


def _write(path: Path) -> bytes:
    table = pa.table({"a": pa.array(range(ROWS), pa.int64()), "b": pa.array([i / 3 for i in range(ROWS)]),
                      "s": pa.array([f"v{i % 97}" for i in range(ROWS)])})
    pq.write_table(table, path, write_page_checksum=True, compression="NONE", row_group_size=1000)
    return path.read_bytes()


def _run(src: Path, out: Path) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run.main(["--input", str(src), "--output", str(out), "--num-shards", "3", "--statistics", "off"])
    return code, [line for line in err.getvalue().splitlines() if line.startswith("shardprep.run: error:")]


def _shards(out: Path) -> list[tuple[str, int, str]]:
    m = manifest.load(str(out))
    return [(s.path.split("/", 1)[1], s.num_records, s.crc32c) for split in m.splits.values() for s in split.shards]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[bytes, list]:
    tmp = tmp_path_factory.mktemp("clean")
    (tmp / "in").mkdir()
    data = _write(tmp / "in" / "t.parquet")
    assert _run(tmp / "in" / "t.parquet", tmp / "ds")[0] == 0
    return data, _shards(tmp / "ds")


def _flipped(tmp: Path, data: bytes, offset: int, bit: int) -> Path:
    damaged = bytearray(data)
    damaged[offset] ^= 1 << bit
    (tmp / "in").mkdir()
    path = tmp / "in" / "t.parquet"
    path.write_bytes(bytes(damaged))
    return path


def test_a_flipped_byte_in_a_data_page_refuses_the_file(tmp_path, clean):
    data, _ = clean
    meta = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0)
    offset = meta.data_page_offset + (meta.total_compressed_size // 2)  # inside the first page's values
    code, errors = _run(_flipped(tmp_path, data, offset, 6), tmp_path / "ds")
    assert code == 2, errors
    assert len(errors) == 1 and "t.parquet" in errors[0] and "damaged Parquet file" in errors[0], errors
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize("draw", range(12))
def test_a_byte_flipped_anywhere_is_refused_or_changes_nothing(tmp_path, clean, draw):
    data, shards = clean
    rng = random.Random(draw)
    offset, bit = rng.randrange(4, len(data) - 8), rng.randrange(8)  # not the magic bytes, which say "not Parquet"
    code, errors = _run(_flipped(tmp_path, data, offset, bit), tmp_path / "ds")
    if code == 0:
        assert _shards(tmp_path / "ds") == shards, f"offset {offset} bit {bit}: a changed value was committed"
    else:
        assert code == 2 and len(errors) == 1, (offset, bit, code, errors)
        assert not (tmp_path / "ds" / "manifest.json").exists()
