"""Spill files: where a batch's record bytes wait between stages, and framed-batch helpers.

Spill files live under the run's own folder (removed at commit, and on every failure by
``retention.remove_run``), and on shared storage whenever the output is (Dataflow, remote Dask).
The run holds at most one copy of the data in spill: Parse writes ``parsed-*``, Assign turns each
into its ``sorted-*`` reordering and removes the parsed one, and WriteShards reads the sorted ones.
So the output folder peaks near twice the data set (sorted spill + shards) and holds it once after
commit (``RUN_SPACE_FACTOR``).
"""
from __future__ import annotations

import numpy as np

from shardprep import fs, naming
from shardprep.config import ReshardConfig
from shardprep.graph.elements import BatchCount, SpilledBatch
from shardprep.tfrecord import FramedBatch

__all__ = ["RUN_SPACE_FACTOR", "concat", "count", "joined", "pack", "reorder", "slices", "sorted_url", "spill",
           "spill_url"]

# Free space a run needs, as a multiple of its input bytes: two copies (sorted spill + shards) of the
# encoded records, which take up to ~3x the input's bytes for CSV/JSON Lines of short numeric fields
# (tf.train.Example spends ~15 bytes of names and wrappers per feature) and more for compressed input.
RUN_SPACE_FACTOR = 6


def spill_url(config: ReshardConfig, name: str) -> str:
    """The URL of spill file ``name`` of this run."""
    return naming.join(config.output, f"{config.run_id}/spill/{name}")


def spill(url: str, data: bytes) -> None:
    """Writes a batch's bytes between stages. Names are deterministic, so a retried bundle rewrites
    the same bytes; no fsync, since the shards, not the spill, are the durable output."""
    with fs.write_atomic(url, durable=False) as f:
        f.write(data)


def pack(config: ReshardConfig, split: int, unit: tuple[int, int], part: int, batch: FramedBatch) -> SpilledBatch:
    """Spills a batch; the element that crosses the runner is its url, size and record ends."""
    url = spill_url(config, f"parsed-{split}-{unit[0]}-{unit[1]}-{part}.bin")
    spill(url, batch.blob)
    return SpilledBatch(split, unit, part, url, len(batch.blob), batch.ends.tobytes())


def sorted_url(config: ReshardConfig, batch: SpilledBatch) -> str:
    """Where Assign puts ``batch`` reordered by (shard, place in shard)."""
    return spill_url(config, f"sorted-{batch.split}-{batch.unit[0]}-{batch.unit[1]}-{batch.part}.bin")


def reorder(parsed_url: str, sorted_url: str, ends: np.ndarray, order: np.ndarray) -> None:
    """Writes the records of ``parsed_url`` in ``order`` to ``sorted_url``, then removes the parsed file.

    Both names are deterministic and the sorted file appears whole or not at all, so a retried
    bundle that finds it (its parsed file possibly gone already) keeps it: the bytes are the same.
    """
    if not fs.exists(sorted_url):
        records = slices(fs.read_bytes(parsed_url), ends)
        spill(sorted_url, b"".join([records[i] for i in order.tolist()]))
        del records
    fs.remove(parsed_url)


def count(batch: SpilledBatch) -> BatchCount:
    """The side-input entry of a spilled batch."""
    return BatchCount(batch.split, batch.unit, batch.part, len(batch.ends) // 8, batch.size)


def joined(framed: list[bytes]) -> FramedBatch:
    """Framed records joined into one batch."""
    return FramedBatch(b"".join(framed),
                       np.cumsum(np.fromiter(map(len, framed), dtype="<u8", count=len(framed)), dtype="<u8"))


def concat(batches: list[FramedBatch]) -> FramedBatch:
    """Framed batches joined into one."""
    if len(batches) == 1:
        return batches[0]
    sizes = np.cumsum([0, *(int(ends[-1]) for _, ends in batches[:-1])], dtype=np.uint64)
    return FramedBatch(b"".join(blob for blob, _ in batches),
                       np.concatenate([ends + size for (_, ends), size in zip(batches, sizes)]))


def slices(blob: bytes, ends: np.ndarray) -> list[memoryview]:
    """The records of a packed batch, without copying."""
    view, start = memoryview(blob), 0
    out = []
    for end in ends.tolist():
        out.append(view[start:end])
        start = end
    return out
