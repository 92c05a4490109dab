"""Small committed data sets built straight through the commit step (real shards, no Beam): fast
enough for race trials and hostile-folder tests. Run as a script, it commits one run and exits 1
when the run was refused (as ``shardprep.run`` does), for tests that race processes."""
from __future__ import annotations

import sys
import time

from shardprep import framing, naming, writer
from shardprep.commit import commit
from shardprep.config import ReshardConfig
from shardprep.example import example_encoder
from shardprep.graph.elements import PlanFact, ShardFact, UnitFact
from shardprep.schema import FeatureSpec

FEATURES = {"x": {"dtype": "int64", "shape": []}, "y": {"dtype": "float32", "shape": [2]}}


def numbered_run_id(i: int) -> str:
    """A valid run id that sorts by ``i`` (``i`` below a day's seconds): for tests that commit runs in order."""
    return f"run-20261201T{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}Z-{i:08x}"


def prepare(out: str, run_id: str, *, splits: tuple[str, ...] = ("train", "eval"), records: int = 8,
            num_shards: int = 2, keep_previous: int = 1, overwrite: bool = True) -> tuple[ReshardConfig, list]:
    """Writes the shards of ``run_id`` under ``out`` and returns (config, facts) ready to commit."""
    from shardprep import planning

    config = ReshardConfig(output=out, run_id=run_id, features=FEATURES, sources=(("in.csv", 40),),
                           splits=tuple(planning.Split(s, 1 / len(splits)) for s in splits), num_shards=num_shards,
                           overwrite=overwrite, keep_previous=keep_previous)
    encode = example_encoder({"x": FeatureSpec("int64", ()), "y": FeatureSpec("float32", (2,))})
    facts: list = [UnitFact((0, 0), 0, records * len(splits), 0, (records,) * len(splits), ())]
    for k, split in enumerate(splits):
        framed = [framing.frame(encode({"x": 1000 * k + i, "y": [i / 2, -i / 4]})) for i in range(records)]
        facts.append(PlanFact(k, records, sum(map(len, framed)), num_shards))
        for shard in range(num_shards):
            path = naming.shard_path(run_id, split, shard, num_shards, gzip=False)
            part = framed[shard::num_shards]
            facts.append(ShardFact(k, shard, num_shards, writer.write_shard(out, path, b"".join(part), len(part), compress=False)))
    return config, facts


def committed(out: str, run_id: str, **kwargs) -> str:
    """Writes and commits one run; returns the manifest's URL, or the report's if refused."""
    config, facts = prepare(out, run_id, **kwargs)
    return commit(config, facts)


def _barrier(folder: str, name: str, parties: int, timeout: float = 300.0) -> None:
    """Waits until ``parties`` processes have reached this point (a file each in ``folder``), so that
    racing commits start together however slowly each one wrote its shards."""
    import os

    open(os.path.join(folder, f"ready-{name}"), "w").close()
    deadline = time.monotonic() + timeout
    while sum(n.startswith("ready-") for n in os.listdir(folder)) < parties:
        if time.monotonic() > deadline:
            sys.exit("barrier: the other process never got ready; the race did not happen")
        time.sleep(0.005)


if __name__ == "__main__":  # python commit_fixtures.py OUT RUN_ID BARRIER_DIR
    config, facts = prepare(sys.argv[1], sys.argv[2])
    _barrier(sys.argv[3], sys.argv[2], parties=2)
    url = commit(config, facts)
    print(url)
    sys.exit(1 if url.endswith(naming.REPORT) else 0)
