"""``shardprep.shard_reader``: a shard is read through the data set folder's checks only (a link out of
the folder, a FIFO or a file larger than recorded are refused before a read), in bounded pieces with
its whole-file crc32c and byte count, and its records come CRC-checked, plain or gzip."""
from __future__ import annotations

import gzip
import os

import pytest

from shardprep import framing, native, shard_reader

RECORDS = [b"", b"a" * 10, os.urandom(3 * shard_reader.CHUNK // 2)]


def _shard(root, name: str, data: bytes) -> int:
    (root / name).write_bytes(data)
    return len(data)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_records_come_back_with_the_files_crc32c_and_size(tmp_path, compression):
    data = framing.frame_all(RECORDS)
    data = gzip.compress(data) if compression == "gzip" else data
    size = _shard(tmp_path, "s.tfrecord", data)
    assert shard_reader.check_local(str(tmp_path), "s.tfrecord") == size
    with shard_reader.open_shard(str(tmp_path), "s.tfrecord", limit=size) as stream:
        assert list(shard_reader.records(stream, compression=compression)) == RECORDS
        assert stream.drain()
        assert (stream.num_bytes, stream.crc32c) == (size, f"{native.crc32c(data):08x}")
        assert len(stream.read(1 << 30)) == 0  # at its limit: no more


def test_reads_are_bounded_pieces(tmp_path):
    size = _shard(tmp_path, "s.tfrecord", framing.frame_all(RECORDS))
    with shard_reader.open_shard(str(tmp_path), "s.tfrecord", limit=size) as stream:
        assert len(stream.read()) == shard_reader.CHUNK and len(stream.read(10)) == 10
        assert stream.num_bytes == shard_reader.CHUNK + 10


def test_a_damaged_record_is_named(tmp_path):
    data = bytearray(framing.frame_all(RECORDS[:2]))
    data[-5] ^= 1  # the last record's data
    size = _shard(tmp_path, "s.tfrecord", bytes(data))
    with shard_reader.open_shard(str(tmp_path), "s.tfrecord", limit=size) as stream:
        with pytest.raises(framing.CorruptRecordError):
            list(shard_reader.records(stream, compression="none"))


def test_what_is_not_a_safe_shard_is_refused_before_a_read(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    size = _shard(root, "s.tfrecord", framing.frame_all(RECORDS[:2]))
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", root / "link.tfrecord")
    os.mkfifo(root / "fifo.tfrecord")
    for name in ("link.tfrecord", "fifo.tfrecord", "../outside"):
        with pytest.raises(shard_reader.ShardReadError), \
                shard_reader.open_shard(str(root), name, limit=6, field="splits.train.shards[0].path"):
            pass
    with pytest.raises(shard_reader.ShardReadError), shard_reader.open_shard(str(root), "s.tfrecord", limit=size - 1):
        pass  # larger than the manifest says
    with pytest.raises(FileNotFoundError), shard_reader.open_shard(str(root), "gone.tfrecord", limit=1):
        pass
