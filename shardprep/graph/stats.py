"""The statistics stage: Parse's per-unit partial statistics, merged per split into a ``StatsFact``.

Partial results are exact (``shardprep.stats``), so the merged result is the same whatever
grouping and order the engine uses (Beam combines them as they come: ``pipelines.beam_graph``);
the commit step writes it into the manifest.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

from shardprep import schema, stats
from shardprep.commit import StatsFact
from shardprep.config import ReshardConfig

__all__ = ["MergeStats"]


class MergeStats:
    """``(split index, partials)`` in; that split's ``StatsFact`` out. ``merge`` adds two partial
    ``{feature: FeatureStats}`` results (an engine may merge them as they arrive), ``finish``
    turns a split's merged result into its fact."""

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config

    @staticmethod
    def merge(accumulator: dict, partial: dict) -> dict:
        return stats.merge(accumulator, partial)

    def finish(self, split: int, merged: dict) -> StatsFact:
        cfg = self._config
        return StatsFact(split, stats.to_json(merged, schema.schema_from_json(cfg.features), top_k=cfg.stats_top_k))

    def process(self, item: tuple[int, Iterable[dict]]) -> Iterator[StatsFact]:
        split, partials = item
        yield self.finish(split, functools.reduce(stats.merge, partials, {}))
