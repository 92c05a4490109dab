"""``shardprep.record_index``: a shard's record index file. Its bytes round-trip (16 + 8 (n + 1)),
an index built from record ends, from a shard's headers with and without their CRCs, all agree; a
file that is not an index, or offsets that cannot describe their shard, are refused with a message
naming what is wrong; a broken shard is named at the byte where it breaks. (Indexes written by a run,
``python -m shardprep.index`` and DALI's text index: test_index.py.)"""
from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import framing, record_index
from shardprep.record_index import IndexFormatError


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40))
def test_every_way_to_an_index_gives_the_same_offsets(records):
    shard = framing.frame_all(records)
    ends = np.cumsum([len(r) + 16 for r in records], dtype=np.uint64)
    data = record_index.encode_ends(ends)
    assert len(data) == 16 + 8 * (len(records) + 1) and data[:8] == record_index.MAGIC
    offsets = record_index.decode(data)
    assert offsets.tolist() == [0, *ends.tolist()]
    assert np.array_equal(record_index.scan(io.BytesIO(shard)), offsets)
    assert np.array_equal(record_index.scan_bytes(shard), offsets)
    assert record_index.encode(offsets) == data
    record_index.check(offsets, num_records=len(records), num_bytes=len(shard))
    assert record_index.dali_text(offsets).decode().splitlines() == [
        f"{int(a)} {int(b - a)}" for a, b in zip(offsets[:-1], offsets[1:])]


def test_bytes_that_are_not_an_index_are_refused_naming_why():
    good = record_index.encode(np.array([0, 20, 45], np.uint64))
    with pytest.raises(IndexFormatError, match="the index: 10 bytes, too short"):
        record_index.decode(good[:10])
    with pytest.raises(IndexFormatError, match=r"shard.index: not a shardprep record index \(it starts with b'XPINDEX1'\)"):
        record_index.decode(b"X" + good[1:], what="shard.index")
    with pytest.raises(IndexFormatError, match="32 bytes, but a record index of 2 records holds 40"):
        record_index.decode(good[:-8])


@pytest.mark.parametrize("offsets, records, size, message", [
    ([0, 20, 45], 3, 45, "2 records, the manifest says 3"),
    ([0, 20, 45], 2, 50, "offsets run from 0 to 45, the shard is bytes 0 to 50"),
    ([8, 20, 45], 2, 45, "offsets run from 8 to 45"),
    ([0, 20, 30], 2, 30, "record 1 at byte 20 is shorter than its 16 framing bytes"),
])
def test_offsets_that_cannot_describe_their_shard_are_refused(offsets, records, size, message):
    with pytest.raises(IndexFormatError, match=message):
        record_index.check(np.array(offsets, np.uint64), num_records=records, num_bytes=size)


def test_a_cut_or_damaged_shard_is_named_where_it_breaks():
    shard = framing.frame_all([b"a" * 10, b"b" * 30])
    with pytest.raises(IndexFormatError, match="ends inside the record of 30 bytes at byte 26") as cut:
        record_index.scan_bytes(shard[:-1])
    assert cut.value.offset == 26
    with pytest.raises(IndexFormatError, match="ends inside the header of the record at byte 26") as cut:
        record_index.scan_bytes(shard[:30])
    assert cut.value.offset == 26
    damaged = bytearray(shard)
    damaged[26 + 12] ^= 1  # the second record's first data byte: its data CRC no longer matches
    with pytest.raises(framing.CorruptRecordError):
        record_index.scan(io.BytesIO(bytes(damaged)))
    assert np.array_equal(record_index.scan_bytes(bytes(damaged)), [0, 26, 72])  # headers alone: no CRC read
