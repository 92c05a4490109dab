"""The two benchmark profiles: ``quick`` (about 100 MB, under 3 minutes) and ``full`` (about 1 GB,
under 20 minutes on 2 quiet cores). Sizes are rows of the CSV sets (about 475 bytes a row: 100k rows
are 48 MB, 2.1M rows 1 GB); the TFRecord sets hold the same rows as tf.Example (about 1.2x)."""
from __future__ import annotations

import dataclasses

__all__ = ["PARTS", "PROFILES", "Profile"]

PARTS = ("csv", "tfrecord", "balance", "trainer", "scaling", "images", "profile")
DEFAULT_PARTS = ("csv", "tfrecord", "balance", "trainer", "scaling", "images")


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    csv_rows: int  # CSV -> tf.Example comparison (item 1)
    tfrecord_rows: int  # TFRecord -> TFRecord comparison (item 2)
    repeats: int  # rounds of the headline comparison, CSV (median of these)
    tfrecord_repeats: int
    trainer_rows: int  # data set the trainer reads (item 4)
    trainer_batch: int  # per-replica batch
    tfdata_repeats: int
    scaling_rows: tuple[int, ...]  # re-shard sizes (item 5); the last is the largest
    scaling_repeats: tuple[int, ...]
    cores_rows: int  # issue 12's comparison (benchmarks.scaling.compare): one process, every core, Dask, formats
    cores_repeats: int  # 0: no such comparison
    beam_dask_rows: int  # the naive Beam job on the Dask runner, for its real shard counts (0: skip; slow)
    workers: tuple[int, ...] = (2, 3, 4, 6, 8, 16)
    num_shards: int = 64
    tiny_rows: int = 2_000  # start-up cost of a run (the intercept of time vs size)
    profile_rows: int = 200_000
    image_sides: tuple[int, ...] = ()  # the images part's image sizes (px), headline first; () for images.SIDES


PROFILES = {
    "quick": Profile(
        name="quick", csv_rows=100_000, repeats=3, tfrecord_rows=100_000, tfrecord_repeats=1,
        trainer_rows=50_000, trainer_batch=64, tfdata_repeats=1,
        scaling_rows=(25_000, 50_000, 100_000), scaling_repeats=(1, 1, 3), cores_rows=100_000, cores_repeats=0,
        beam_dask_rows=0,
    ),
    "full": Profile(
        name="full", csv_rows=420_000, repeats=3, tfrecord_rows=500_000, tfrecord_repeats=5,  # TFRecord: issue 8's 298 MB
        trainer_rows=210_000, trainer_batch=64, tfdata_repeats=3,
        scaling_rows=(210_000, 630_000, 2_100_000), scaling_repeats=(3, 2, 2), cores_rows=1_400_000, cores_repeats=3,
        beam_dask_rows=0,
    ),
}
