"""The re-shard job's settings, validated before any worker starts."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from shardprep import planning
from shardprep.errors import SchemaError, UsageError
from shardprep.manifest_generations import HashesInfo
from shardprep.naming import COMPRESSIONS
from shardprep.schema import EXTRA_FIELDS, ON_MISSING, Schema, schema_from_json

__all__ = ["COMPRESSIONS", "DEDUP", "ReshardConfig"]

DEDUP = ("none", "exact")  # a re-shard's --dedup (a text run's also takes near: shardprep.text)


@dataclasses.dataclass(frozen=True)
class ReshardConfig:
    """Everything the pipeline needs; small and picklable, so DoFns carry it to workers.

    ``features`` is the schema in the manifest's JSON form; ``sources`` are (url, num_bytes) of the
    input files in input order (index = file index of the work units).
    """

    output: str
    run_id: str
    features: dict[str, dict[str, Any]]
    sources: tuple[tuple[str, int], ...]
    splits: tuple[planning.Split, ...] = (planning.Split("train", 1.0),)
    seed: int = 42
    shuffle: bool = True
    compression: str = "none"
    num_shards: int | None = None
    workers: int | None = None
    shards_per_worker: int | None = None
    target_shard_bytes: int = planning.DEFAULT_TARGET_SHARD_BYTES
    max_bad_records: int = 0
    overwrite: bool = False
    keep_previous: int = 1  # committed runs kept besides the new one, for readers of older manifests
    extra_fields: str = "reject"
    # Parse's batches (one spill file each): up to this many records or bytes. Every batch reaches
    # every shard, so a shard's writer reads batches x shards pieces: a unit's records fill a batch
    # up to these, so that many shards stay few pieces.
    batch_records: int = 100_000
    batch_bytes: int = 64 << 20
    versions: tuple[str, ...] = ()  # ``fs.version`` of each source at planning; the commit refuses a change
    allow_non_finite: bool = False  # store NaN/Infinity floats instead of dead letter ``non_finite``
    tfds_features: dict[str, Any] | None = None  # a TFDS input's features.json, kept as the output's (tfds_metadata)
    on_missing: str = "omit"  # a missing value leaves its feature out of the Example, or is a dead letter (reject)
    required: tuple[str, ...] = ()  # features whose missing value is dead letter ``missing_value`` (--required)
    statistics: bool = False  # per split and feature statistics in the manifest (--statistics; decodes every record)
    stats_top_k: int = 1000  # most frequent string values per feature and split in the manifest's statistics
    # where the statistics count the records: in Parse from the columns the records were encoded
    # from (an input format that ``gives_columns``), else in WriteShards, while the disk stores shards
    statistics_in_parse: bool = True
    text: dict[str, Any] | None = None  # a text run's manifest entry (text.spec.TextSpec.manifest_entry)
    spill_in_place: bool = True  # WriteShards may read local spill in place: it fits in memory (capacity.spill_bytes)
    append: bool = False  # --append: a new generation of the data set at ``output`` (shardprep.generations)
    # ``Manifest.identity`` of the data set the run was planned against ("": none); the commit refuses if
    # another is committed by then (a race). None: not checked
    base: str | None = None
    dedup: str = "none"  # --dedup exact: a record equal to one before it, or in the data set, is dead letter ``duplicate``
    dedup_key: str = ""  # --dedup-key: the feature whose values make records equal ("": the Example bytes)
    dedup_against: tuple[HashesInfo, ...] = ()  # an append's: the data set's generations' hashes (graph.duplicates)

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise UsageError(f"--compression {self.compression!r}: expected one of {', '.join(COMPRESSIONS)}")
        if self.num_shards is None and self.workers is None:
            raise planning.PlanError("give --num-shards N or --workers W (or both, with W dividing N)")
        if self.num_shards is not None:
            planning.check_num_shards(self.num_shards, self.workers)
        if self.workers is not None and self.workers < 1:
            raise planning.PlanError(f"--workers {self.workers}: expected at least 1")
        if self.shards_per_worker is not None:
            if self.workers is None or self.num_shards is not None:
                raise planning.PlanError("--shards-per-worker goes with --workers and without --num-shards")
            if self.shards_per_worker < 1:
                raise planning.PlanError(f"--shards-per-worker {self.shards_per_worker}: expected at least 1")
        if self.keep_previous < 0:
            raise UsageError(f"--keep-previous {self.keep_previous}: expected 0 or more")
        if self.max_bad_records < 0:
            raise UsageError(f"--max-bad-records {self.max_bad_records}: expected 0 or more")
        if self.target_shard_bytes < 1:
            raise UsageError(f"--target-shard-mb {self.target_shard_bytes / 2**20:g}: expected a size above 0 "
                             f"(e.g. --target-shard-mb 128)")
        if not self.features:
            raise SchemaError("the schema has no features: give a --schema with at least one feature")
        if self.versions and len(self.versions) != len(self.sources):
            raise ValueError(f"{len(self.versions)} versions for {len(self.sources)} sources: expected one per source")
        if self.stats_top_k < 0:
            raise UsageError(f"--stats-top-k {self.stats_top_k}: expected 0 or more")
        if self.on_missing not in ON_MISSING:
            raise UsageError(f"--on-missing {self.on_missing!r}: expected one of {', '.join(ON_MISSING)}")
        unknown = [n for n in self.required if n not in self.features]
        if unknown:
            raise UsageError(f"--required {','.join(unknown)}: not a feature of the schema ({', '.join(sorted(self.features)[:10])})")
        if self.dedup not in DEDUP:
            raise UsageError(f"--dedup {self.dedup!r}: records take one of {', '.join(DEDUP)} (near: --task text runs)")
        if self.dedup_key and (self.dedup != "exact" or self.dedup_key not in self.features):
            raise UsageError(f"--dedup-key {self.dedup_key}: " + ("goes with --dedup exact" if self.dedup != "exact" else
                             f"not a feature of the schema ({', '.join(sorted(self.features)[:10])})"))
        if self.extra_fields not in EXTRA_FIELDS:
            raise UsageError(f"extra_fields {self.extra_fields!r}: expected one of {', '.join(EXTRA_FIELDS)}")

    @functools.cached_property
    def schema(self) -> Schema:
        """``features`` parsed, once per process (a wide table's many features are not cheap to parse)."""
        return schema_from_json(self.features)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "schema"}  # workers parse their own

    @property
    def gzip(self) -> bool:
        return self.compression == "gzip"

    def num_shards_for(self, split: str, num_records: int, num_bytes: int) -> int:
        """A split's shard count; an append's never exceeds its records (a tiny append: shards of one record)."""
        if self.append:
            chosen = planning.choose_num_shards(num_records=max(num_records, self.num_shards or self.workers or 1),
                                                num_bytes=num_bytes, num_shards=self.num_shards, workers=self.workers,
                                                shards_per_worker=self.shards_per_worker,
                                                target_shard_bytes=self.target_shard_bytes, split=split)
            return max(1, min(chosen, num_records))
        return planning.choose_num_shards(
            num_records=num_records,
            num_bytes=num_bytes,
            num_shards=self.num_shards,
            workers=self.workers,
            shards_per_worker=self.shards_per_worker,
            target_shard_bytes=self.target_shard_bytes,
            split=split,
        )
