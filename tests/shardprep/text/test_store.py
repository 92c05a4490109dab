"""``text.store.build_store``: one part per input file or piece of a large .txt file, built on a pool, gives the
store one process gives, and the store of one part per file."""
from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

from pipelines import pool
from pipelines.driver import run_job
from shardprep import formats
from shardprep.formats.base import InputFile
from shardprep.job import Job, Stage
from shardprep.text.documents import DocumentStats, Lines, blank_line_pieces, read_documents
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


def stage_runner(workers):
    """``run(work, elements)``: the work as the heavy stage of a job, on ``workers`` (None: in line)."""
    def run(work, elements):
        return run_job(Job((Stage("BuildPart", work, over=("",), heavy=True),), tuple(elements), "", "BuildPart"),
                       workers)[0]
    return run


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


# a file in BERT's layout with what a cut must not change: extra blank lines (also first in a piece),
# CRLF blank lines, documents that end with a bad line or of bad lines only, lines too long
AWKWARD = b"".join([b"\n", *map(_doc, range(40)), b"\n\n", b"one.\r\n\r\n\r\ntwo.\r\n\r\n", b"\xff\xfe.\n\n",
                    b"x" * 700 + b"\nshort.\n\n", b"a.\n\xff\n\n\n", *map(_doc, range(40, 90)), b"\xfe\nend.\n\n\n"])


def _read_whole_and_in_pieces(data: bytes, piece_bytes: int):
    whole_stats, piece_stats = DocumentStats(), DocumentStats()
    whole = list(read_documents(io.BytesIO(data), stats=whole_stats, max_line_bytes=500))
    pieces = blank_line_pieces(io.BytesIO(data), len(data), piece_bytes)
    apart = [out for start, end, line in pieces for out in
             read_documents(Lines(io.BytesIO(data), start, end), first_position=line, stats=piece_stats,
                            max_line_bytes=500)]
    return pieces, whole, apart, whole_stats, piece_stats


@pytest.mark.parametrize("piece_bytes", [1, 7, 40, 100, 333, 1000, 1 << 20])
def test_pieces_cut_after_blank_lines_read_as_the_whole_file(piece_bytes: int) -> None:
    pieces, whole, apart, whole_stats, piece_stats = _read_whole_and_in_pieces(AWKWARD, piece_bytes)
    assert [p[0] for p in pieces] == [0, *(p[1] for p in pieces[:-1])] and pieces[-1][1] == len(AWKWARD)
    assert all(AWKWARD[:s].endswith((b"\n\n", b"\n\r\n")) for s, _, _ in pieces[1:])
    assert (len(pieces) > 5) == (piece_bytes <= 100)
    assert apart == whole and piece_stats == whole_stats
    assert whole_stats.empty_documents == 7 and whole_stats.bad_lines == 4


def test_a_file_without_blank_lines_is_one_piece() -> None:
    data = b"".join(b"sentence %d.\n" % i for i in range(500))
    assert blank_line_pieces(io.BytesIO(data), len(data), 100) == [(0, len(data), 1)]
    data += b"\n" + data
    assert len(blank_line_pieces(io.BytesIO(data), len(data), 100)) == 2


def test_a_large_file_in_pieces_makes_the_store_its_one_part_makes(files, tmp_path) -> None:
    (tmp_path / "f.txt").write_bytes(AWKWARD * 3)
    files = [*files, InputFile(5, str(tmp_path / "f.txt"), 3 * len(AWKWARD), "text", False)]
    in_pieces = _build(files, tmp_path / "pieces")  # units of 300 bytes: the .txt files cut into pieces
    whole = build_store(files, str(tmp_path / "whole"), unit_bytes=1 << 30, column_units={},
                        columns=(None, None, None), max_line_bytes=1000, read_unit=formats.read_unit)
    assert _files(tmp_path / "pieces")["store.jsonl"] == _files(tmp_path / "whole")["store.jsonl"]
    assert _files(tmp_path / "pieces")["index.npy"] == _files(tmp_path / "whole")["index.npy"]
    assert in_pieces.stats == whole.stats and in_pieces.num_documents == whole.num_documents
    assert len([u for u in in_pieces.units if u.file_index == 5]) > 10
    with pool.local_pool(2) as workers:
        assert _build(files, tmp_path / "pooled", stage_runner(workers)) == in_pieces
    assert _files(tmp_path / "pooled") == _files(tmp_path / "pieces")
