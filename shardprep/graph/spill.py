"""Spill files: where a batch's record bytes wait between stages, and framed-batch helpers.

Spill files live under the run's own folder (removed at commit), so a crashed run's spill goes with
it, and on shared storage whenever the output is (Dataflow, remote Dask).
"""
from __future__ import annotations

import numpy as np

from shardprep import fs, naming
from shardprep.config import ReshardConfig
from shardprep.graph.elements import BatchCount, SpilledBatch
from shardprep.tfrecord import FramedBatch

__all__ = ["concat", "count", "joined", "pack", "slices", "spill", "spill_url"]


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
