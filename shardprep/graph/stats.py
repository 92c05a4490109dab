"""The statistics branch: Parse's per-unit partial statistics, combined per split by a Beam CombineFn.

Partial results are exact (``shardprep.stats``), so the combined result is the same whatever
grouping and order the runner uses; the commit step writes it into the manifest.
"""
from __future__ import annotations

import functools
from typing import Any

import apache_beam as beam

from shardprep import schema, stats
from shardprep.commit import StatsFact
from shardprep.config import ReshardConfig

__all__ = ["CombineStats"]


class _MergeStats(beam.CombineFn):
    """Adds partial ``{feature: FeatureStats}`` results of one split."""

    def create_accumulator(self) -> dict[str, stats.FeatureStats]:
        return {}

    def add_input(self, accumulator: dict, partial: dict) -> dict:
        return stats.merge(accumulator, partial)

    def merge_accumulators(self, accumulators: Any) -> dict:
        return functools.reduce(stats.merge, accumulators, {})

    def extract_output(self, accumulator: dict) -> dict:
        return accumulator


class CombineStats(beam.PTransform):
    """``(split index, partial)`` elements in; one ``StatsFact`` per split out."""

    def __init__(self, config: ReshardConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, partials: beam.PCollection) -> beam.PCollection:
        cfg = self._config
        return (
            partials
            | "MergeStats" >> beam.CombinePerKey(_MergeStats())
            | "StatsFacts" >> beam.MapTuple(lambda split, merged: StatsFact(
                split, stats.to_json(merged, schema.schema_from_json(cfg.features), top_k=cfg.stats_top_k)))
        )
