"""The layout steps of the hot path (``native.interleave``, ``fill_data_crcs``, ``gather``, ``scatter``),
the spill's reads (``pread_records``) and the range counter of the cuts (``line_counts``): compiled and Python twins give the same results,
refuse the same bad input, and build what they say."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import framing, native, writer
from shardprep.config import ReshardConfig
from shardprep.example import columnar
from shardprep.graph import spill
from shardprep.native import fallback
from shardprep.schema import FeatureSpec

pytestmark = pytest.mark.skipif(not native.NATIVE, reason="the compiled extension is not built here")

_records = st.lists(st.binary(max_size=40), min_size=1, max_size=30)


def _packed(records: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(records), np.cumsum([len(r) for r in records]).astype("<u8")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000).map(lambda b: bytes(b'"\n,x'[c % 4] if c % 3 else c for c in b)), st.data())
def test_line_counts_count_quotes_and_newlines_of_a_prefix(data_bytes, data):
    n = data.draw(st.integers(0, len(data_bytes)))
    expected = (data_bytes[:n].count(b'"'), data_bytes[:n].count(b"\n"))
    for twin in (native, fallback):
        assert twin.line_counts(bytearray(data_bytes), n, True) == expected
        assert twin.line_counts(data_bytes, n, False) == (0, expected[1])
        with pytest.raises(ValueError):
            twin.line_counts(data_bytes, len(data_bytes) + 1, True)


@settings(max_examples=200, deadline=None)
@given(_records, st.data())
def test_gather_and_place_take_records_in_order(records, data):
    blob, ends = _packed(records)
    order = np.array(data.draw(st.lists(st.integers(0, len(records) - 1), max_size=40)), "<i8")
    expected = b"".join(records[i] for i in order)
    assert native.gather(blob, ends, order) == fallback.gather(blob, ends, order) == expected
    cut = data.draw(st.integers(0, len(records)))  # the same records as two batches
    parts = [_packed(records[:cut] or [b""]), _packed(records[cut:] or [b""])]
    whole = (records[:cut] or [b""]) + (records[cut:] or [b""])
    perm = np.array(data.draw(st.permutations(range(len(whole)))), np.int64)
    places = np.argsort(perm)  # record q of the two batches goes to the place p where perm[p] == q
    placed, first = [], 0
    for blob, ends in parts:  # each batch a piece, its records' places in the shard
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        placed.append(spill.Placed(places[first:first + len(ends)], starts, ends.astype(np.int64) - starts, data=blob))
        first += len(ends)
    got, got_ends = spill.place(placed, len(whole))
    assert got.tobytes() == b"".join(whole[i] for i in perm)
    assert got_ends.tolist() == np.cumsum([len(whole[i]) for i in perm]).tolist()  # where each record ends
    assert not len(got) or got.ctypes.data % 4096 == 0  # page-aligned, for writer.write_shard's O_DIRECT


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=12), min_size=4, max_size=4), min_size=1, max_size=20))
def test_interleave_builds_each_record_from_one_piece_per_column(rows):
    columns = []
    for c in range(4):  # each column's pieces packed in reverse order, to read them at arbitrary starts
        pieces = [row[c] for row in rows][::-1]
        blob, ends = _packed(pieces)
        starts = (ends - np.array([len(p) for p in pieces], "<u8")).astype(np.int64)[::-1].copy()
        columns.append((blob, starts, np.array([len(row[c]) for row in rows], np.int64)))
    expected = b"".join(b"".join(row) for row in rows)
    assert bytes(native.interleave(columns)) == bytes(fallback.interleave(columns)) == expected


@settings(max_examples=100, deadline=None)
@given(_records)
def test_fill_data_crcs_frames_records_as_tfrecord_does(records):
    framed = [framing.frame(r) for r in records]
    blank, ends = _packed([f[:-4] + bytes(4) for f in framed])
    for twin in (native, fallback):
        buf = bytearray(blank)
        twin.fill_data_crcs(buf, ends)
        assert bytes(buf) == b"".join(framed)


@pytest.mark.parametrize("twin", [native, fallback])
def test_bad_offsets_are_refused_not_read(twin):
    blob, ends = _packed([b"ab", b"cde"])
    with pytest.raises(ValueError):
        twin.gather(blob, ends, np.array([2], "<i8"))
    with pytest.raises(ValueError):
        twin.gather(blob, np.array([3, 2], "<u8"), np.array([0], "<i8"))
    with pytest.raises(ValueError):
        twin.interleave([(blob, np.array([4], np.int64), np.array([2], np.int64))])
    with pytest.raises(ValueError):
        twin.interleave([(blob, np.array([0], np.int64), np.array([1], np.int64)),
                         (blob, np.array([0, 1], np.int64), np.array([1, 1], np.int64))])
    for starts, lengths, dests in (([3], [2], [0]),  # past the blob (4 bytes)
                                   ([0], [2], [2]),  # past out (3 bytes)
                                   ([-1], [1], [0]), ([0], [-1], [0]), ([0], [1], [-1]), ([0], [1, 1], [0])):
        with pytest.raises(ValueError, match="scatter"):
            twin.scatter(blob[:4], *(np.array(x, np.int64) for x in (starts, lengths, dests)), bytearray(3))
    with pytest.raises(ValueError):
        twin.fill_data_crcs(bytearray(20), np.array([15], "<u8"))  # shorter than a frame


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=3000), st.lists(st.tuples(st.integers(0, 3100), st.integers(0, 300)), max_size=40),
       st.booleans())
def test_pread_records_twins_read_the_same_ranges(tmp_path_factory, data, ranges, adjacent):
    if adjacent and ranges:  # back-to-back ranges: one read in the compiled twin
        start = ranges[0][0]
        ranges = [(start + sum(z for _, z in ranges[:i]), z) for i, (_, z) in enumerate(ranges)]
    path = tmp_path_factory.mktemp("pread") / "f.bin"
    path.write_bytes(data)
    starts, lengths = np.array([a for a, _ in ranges], "<i8"), np.array([z for _, z in ranges], "<i8")
    outcomes = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for twin in (native, fallback):
            try:
                outcomes.append(bytes(twin.pread_records(fd, starts, lengths)))
            except ValueError as e:
                outcomes.append(str(e))
    finally:
        os.close(fd)
    inside = all(z == 0 or a + z <= len(data) for a, z in ranges)  # an empty range reads nothing
    assert outcomes[0] == outcomes[1] == (b"".join(data[a:a + z] for a, z in ranges) if inside else
                                          "pread_records: a range lies past the end of the file")


def test_pread_records_refuses_bad_ranges_alike(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    try:
        for twin in (native, fallback):
            for starts, lengths in (([-1], [1]), ([0], [-1]), ([2**63 - 2], [5]), ([0, 0], [1])):
                with pytest.raises(ValueError, match="pread_records"):
                    twin.pread_records(fd, np.array(starts, "<i8"), np.array(lengths, "<i8"))
    finally:
        os.close(fd)


@pytest.mark.parametrize("sparse", [0, 10**9])  # every piece read record by record; every piece mapped
def test_record_bounds_and_scatter_in_place_both_ways(tmp_path, monkeypatch, sparse):
    monkeypatch.setattr(spill, "SPARSE", sparse)
    rng = np.random.default_rng(sparse)
    for trial in range(60):
        n = int(rng.integers(1, 2000))
        ends = np.cumsum(rng.integers(1, 40, n))
        size = int(ends[-1])
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        url = str(tmp_path / f"parsed-{trial}.bin")
        (tmp_path / f"parsed-{trial}.bin").write_bytes(data + ends.astype(spill.ends_dtype(size)).tobytes())  # pack's layout
        which = np.sort(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)).astype(np.int64)
        starts, stops = spill.record_bounds(url, size, which)
        assert starts.tolist() == [int(ends[i - 1]) if i else 0 for i in which] and stops.tolist() == ends[which].tolist()
        order = rng.permutation(len(which))  # the records in any order: each to its place
        got, _ = spill.place([spill.Placed(np.argsort(order), starts, stops - starts, url=url)], len(which))
        assert got.tobytes() == b"".join(data[starts[i]:stops[i]] for i in order)


def test_scatter_in_place_puts_records_where_told(tmp_path):
    records = [bytes([i]) * (i + 1) for i in range(6)]
    path = tmp_path / "parsed.bin"
    path.write_bytes(b"".join(records))
    ends = np.cumsum([len(r) for r in records])
    take = np.array([4, 1, 5])
    out = np.zeros(5 + 2 + 6 + 3, np.uint8)
    spill.scatter_in_place(str(path), (ends - [len(r) for r in records])[take], ends[take] - (ends - [len(r) for r in records])[take],
                           np.array([3, 0, 8], np.int64), out)
    assert out.tobytes() == records[1] + b"\0" + records[4] + records[5] + b"\0" * 2
    config = ReshardConfig(output=str(tmp_path), run_id="run-x", features={"x": {"dtype": "int64"}}, sources=(),
                           num_shards=1)
    assert spill.in_place(config, str(path)) and not spill.in_place(config, "gs://bucket/run/spill/parsed-0.bin")
    assert not spill.in_place(dataclasses.replace(config, spill_in_place=False), str(path))  # too large for memory


def test_columnar_encoder_is_the_same_with_the_python_twins(monkeypatch):
    schema = {"i": FeatureSpec("int64", ()), "x": FeatureSpec("float32", ()), "s": FeatureSpec("string", ())}
    rng = np.random.default_rng(0)
    n = 500
    texts = [("é" * int(k)).encode() for k in rng.integers(0, 200, n)]
    columns = {"i": rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64), "x": rng.normal(size=n).astype(np.float32),
               "s": (np.cumsum([0, *map(len, texts)]), b"".join(texts))}
    blob, ends = columnar.encode_framed(schema, columns, n)
    for name in ("interleave", "fill_data_crcs"):
        monkeypatch.setattr(native, name, getattr(fallback, name))
    twin_blob, twin_ends = columnar.encode_framed(schema, columns, n)
    assert bytes(blob) == bytes(twin_blob) and (ends == twin_ends).all()
    for rows in (1, 7, 499):  # a block of many rows is encoded in slices of MAX_ROWS: the same bytes
        monkeypatch.setattr(columnar, "MAX_ROWS", rows)
        sliced_blob, sliced_ends = columnar.encode_framed(schema, columns, n)
        assert bytes(sliced_blob) == bytes(blob) and (sliced_ends == ends).all()


@pytest.mark.parametrize("size", [0, 100, 4096, 3 * 4096 + 17])
def test_write_shard_writes_aligned_and_plain_data_alike(tmp_path, size):
    """Page-aligned data goes past the page cache where the file system allows it; the file, its
    size and crc32c are the same as for plain bytes."""
    data = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    aligned = writer.aligned_buffer(size)
    aligned[:] = np.frombuffer(data, np.uint8)
    plain = writer.write_shard(str(tmp_path), "a/plain.tfrecord", data, 1, compress=False)
    direct = writer.write_shard(str(tmp_path), "a/direct.tfrecord", aligned, 1, compress=False)
    assert (tmp_path / "a/direct.tfrecord").read_bytes() == data == (tmp_path / "a/plain.tfrecord").read_bytes()
    assert (direct.num_bytes, direct.crc32c) == (plain.num_bytes, plain.crc32c)
    assert not [p for p in (tmp_path / "a").iterdir() if ".tmp-" in p.name]
