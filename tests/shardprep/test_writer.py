"""``writer``: the background shard writer stores the same bytes and ``ShardInfo`` as ``write_shard``
and raises its errors at ``flush``."""
from __future__ import annotations

import numpy as np
import pytest

from shardprep import writer


def test_a_shard_writer_stores_in_the_background_and_raises_its_errors_at_flush(tmp_path, monkeypatch):
    """``writer.ShardWriter``: the same file and ShardInfo as ``write_shard``, once flushed; an
    error storing a shard comes out of ``flush``, never lost; a shard over the limit is stored at once."""
    rng = np.random.default_rng(0)
    shards = []
    for size in (3 * 4096, 3 * 4096 + 100, 17):  # whole pages (O_DIRECT only), pages and a tail, a tail only
        buffer = writer.aligned_buffer(size)
        buffer[:] = rng.integers(0, 256, size, dtype=np.uint8)
        shards.append(buffer)
    background = writer.ShardWriter()
    infos = [background.write(str(tmp_path / "bg"), f"s{i}", d, 7, compress=False) for i, d in enumerate(shards)]
    background.flush()
    for i, (data, info) in enumerate(zip(shards, infos)):
        assert info == writer.write_shard(str(tmp_path / "sync"), f"s{i}", data, 7, compress=False)
        assert (tmp_path / "bg" / f"s{i}").read_bytes() == (tmp_path / "sync" / f"s{i}").read_bytes() == bytes(data)
    (tmp_path / "a-file").write_bytes(b"")  # where the shard's folder should be
    background.write(str(tmp_path / "a-file"), "s", shards[0], 7, compress=False)
    with pytest.raises(OSError):
        background.flush()
    monkeypatch.setattr(writer, "BACKGROUND_MAX_BYTES", 100)
    background.write(str(tmp_path / "big"), "s", shards[0], 7, compress=True)  # gzip'd: over 100 bytes
    assert (tmp_path / "big" / "s").exists()  # stored before write returned
    background.close()
