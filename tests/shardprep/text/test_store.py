"""``text.store.build_store``: one part per input file, built on a pool, gives the store one process gives."""
from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

from pipelines.driver import stage_runner
from shardprep import formats
from shardprep.formats.base import InputFile
from shardprep.graph import pool
from shardprep.text.store import build_store, entries

WORDS = "the cat sat on a mat dog ran far river stone music night".split()


def _doc(i: int) -> bytes:
    return b"%s.\n%s %s.\n\n" % (WORDS[i % 13].encode(), WORDS[(i * 5) % 13].encode(), WORDS[(i * 3) % 13].encode())


@pytest.fixture
def files(tmp_path) -> list[InputFile]:
    """Five uneven files: bad lines and extra blank lines, an empty one, a gzip one, a line too long."""
    (tmp_path / "a.txt").write_bytes(b"".join(map(_doc, range(120))) + b"\xff\xfe.\n\n\n\n!!! ???\n\n\x01\n\n")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / "c.txt").write_bytes(b"\n\nthe river.\n\nmusic night.\n")
    (tmp_path / "d.txt.gz").write_bytes(gzip.compress(b"".join(map(_doc, range(100, 170)))))
    (tmp_path / "e.txt").write_bytes(b"x" * 3000 + b"\nshort.\n\nlast one\n")
    names = ("a.txt", "b.txt", "c.txt", "d.txt.gz", "e.txt")
    return [InputFile(i, str(tmp_path / n), (tmp_path / n).stat().st_size, "text", n.endswith(".gz"))
            for i, n in enumerate(names)]


def _build(files, folder, run=None):
    return build_store(files, str(folder), unit_bytes=300, column_units={}, columns=(None, None, None),
                       max_line_bytes=1000, read_unit=formats.read_unit, run=run)


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_parts_built_on_a_pool_make_the_store_one_process_makes(files, tmp_path) -> None:
    alone = _build(files, tmp_path / "alone")
    with pool.local_pool(2) as workers:
        pooled = _build(files, tmp_path / "pooled", stage_runner(workers))
    assert alone == pooled
    assert _files(tmp_path / "alone") == _files(tmp_path / "pooled")
    assert sorted(_files(tmp_path / "alone")) == ["index.npy", "store.jsonl", "units.npy"]  # the parts removed
    # one file at a time, in line: the same parts, so the same store
    assert _build(files, tmp_path / "inline", stage_runner(None)) == alone
    assert _files(tmp_path / "inline") == _files(tmp_path / "alone")


def test_ids_offsets_and_units_run_on_across_the_parts(files, tmp_path) -> None:
    result = _build(files, tmp_path / "s")
    store = (tmp_path / "s" / "store.jsonl").read_bytes()
    index = np.load(io.BytesIO((tmp_path / "s" / "index.npy").read_bytes()))
    lines = store.splitlines(keepends=True)
    starts = np.cumsum([0, *map(len, lines)])[:-1]
    docs = [int(s) for s, line in zip(starts, lines) if "r" not in json.loads(line)]
    assert index.tolist() == docs and result.num_documents == len(docs) == 122 + 2 + 70 + 2
    assert result.stats.documents == result.num_documents and result.stats.bad_lines == 2
    assert [u.file_index for u in result.units] == sorted(u.file_index for u in result.units)
    assert {u.file_index for u in result.units} == set(range(5))  # every file has a unit, the empty one too
    assert result.units[0].start == 0 and result.units[-1].end == len(store)
    for u, nxt in zip(result.units, result.units[1:]):
        assert u.end == nxt.start
    for u in result.units:  # a unit's first id is the count of documents before it
        assert u.first_doc == int(np.searchsorted(index, u.start))
        assert all(e["p"] >= 1 for e in entries(str(tmp_path / "s" / "store.jsonl"), u.start, u.end))
