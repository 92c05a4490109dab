"""A configuration and spilled batches of given sizes, shared by the tests of the stages and the spill files."""
from __future__ import annotations

from shardprep import framing
from shardprep.config import ReshardConfig
from shardprep.graph import spill
from shardprep.graph.elements import SpilledBatch


def spill_config(tmp_path, *, num_shards: int, shuffle: bool, in_place: bool) -> ReshardConfig:
    """A run of one int64 feature into ``num_shards`` shards under ``tmp_path``, spilled in place or reordered."""
    return ReshardConfig(output=str(tmp_path / "out"), run_id="run-test", features={"x": {"dtype": "int64", "shape": []}},
                         sources=(), num_shards=num_shards, shuffle=shuffle, seed=7, spill_in_place=in_place)


def spilled_batches(cfg: ReshardConfig, sizes: list[int]) -> tuple[list[SpilledBatch], list[bytes]]:
    """Batches of ``sizes`` records (record i of the split: ``b"r<i>"`` framed), spilled as Parse does,
    each in one or two blocks."""
    batches, records = [], []
    for k, n in enumerate(sizes):
        framed = [framing.frame(b"r%d" % (len(records) + i)) for i in range(n)]
        records += framed
        cut = n // 2
        blocks = [spill.joined(part) for part in (framed[:cut], framed[cut:]) if part]
        batches.append(spill.pack(cfg, 0, (0, k), 0, blocks))
    return batches, records
