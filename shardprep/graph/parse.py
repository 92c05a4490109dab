"""The Parse step: one work unit in; spilled record batches by split, dead letters and a UnitFact out."""
from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from shardprep import formats, planning, schema, tfrecord, writer
from shardprep.commit import UnitFact
from shardprep.config import ReshardConfig
from shardprep.example import RecordError, example_encoder
from shardprep.formats import Bad, Unsupported, WorkUnit
from shardprep.graph.elements import FACTS, REJECTED, RejectedBatch
from shardprep.graph.spill import concat, joined, pack
from shardprep.tfrecord import FramedBatch

__all__ = ["Parse"]

log = logging.getLogger("shardprep")


class Parse(beam.DoFn):
    """Reads one work unit, encodes its records, assigns splits; bad records become dead letters.

    Emits ``SpilledBatch`` elements, ``RejectedBatch`` dead letters (tag ``REJECTED``) and one
    ``UnitFact`` (tag ``FACTS``). The record bytes go through spill files, not through the runner.
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._records = Metrics.counter("shardprep", "records_read")
        self._rejects = Metrics.counter("shardprep", "records_rejected")
        self._bytes = Metrics.counter("shardprep", "bytes_encoded")

    def setup(self) -> None:
        cfg = self._config
        self._schema = schema.schema_from_json(cfg.features)
        self._encode = example_encoder(self._schema, extra_fields=cfg.extra_fields)
        self._thresholds = planning.split_thresholds(cfg.splits)
        self._started = time.monotonic()
        self._total = 0

    def _batches(self, unit: WorkUnit) -> Iterator[FramedBatch | Bad]:
        """The unit's records in file order: ``FramedBatch`` ones, and ``Bad`` ones.

        A format with a column-wise reader that takes this unit (CSV: ``formats.csv_arrow``) reads
        it while it can; from the first batch it cannot take, the per-record path reads the unit,
        skipping the records already given, and decides.
        """
        fmt = formats.format_of(unit)
        limit, done, pending, waiting = self._config.batch_records, 0, [], 0
        fast = fmt.column_wise(unit, self._schema, self._config.extra_fields)
        if fast:
            try:
                for block in fmt.framed_batches(unit, self._schema, self._config.extra_fields):
                    pending.append(block)  # blocks of 1 MB, joined into batches as large as the per-record path's
                    waiting += len(block.ends)
                    if waiting >= limit:
                        yield concat(pending)
                        done, pending, waiting = done + waiting, [], 0
            except Unsupported as e:
                fast = False
                log.info("%s unit %d: per-record path from record %d on (%s)", unit.file.url, unit.index,
                         done + waiting + 1, e)
        if pending:
            yield concat(pending)
            done += waiting
        if fast:
            return
        encode, frame = self._encode, tfrecord.frame
        framed: list[bytes] = []
        for position, row in itertools.islice(formats.read_unit(unit), done, None):
            if isinstance(row, Bad):
                yield row
                continue
            try:
                framed.append(frame(encode(row)))
            except RecordError as e:
                yield Bad(position, e.reason, e.detail, _raw_of(row))
                continue
            if len(framed) >= limit:
                yield joined(framed)
                framed = []
        if framed:
            yield joined(framed)

    def process(self, unit: WorkUnit) -> Iterator[Any]:
        cfg = self._config
        parts = [0] * len(cfg.splits)
        kept = [0] * len(cfg.splits)
        dead: list[bytes] = []
        reasons: dict[str, int] = {}
        read = 0
        unit_name = f"{unit.file.index}:{unit.index}"
        for item in self._batches(unit):
            if isinstance(item, Bad):
                read += 1
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
                dead.append(writer.dead_letter_line(source=unit.file.url, position=item.position, unit=unit_name,
                                                    reason=item.reason, detail=item.detail, raw=item.raw))
                continue
            read += len(item.ends)
            self._bytes.inc(len(item.blob))
            for s, batch in _by_split(item, cfg.seed, self._thresholds):
                yield pack(cfg, s, unit.key, parts[s], batch)
                kept[s] += len(batch.ends)
                parts[s] += 1
        if dead:
            yield pvalue.TaggedOutput(REJECTED, RejectedBatch(unit.key, dead))
        yield pvalue.TaggedOutput(FACTS, UnitFact(unit.key, unit.file.index, read, len(dead), tuple(kept),
                                                  tuple(sorted(reasons.items()))))
        self._records.inc(read)
        self._rejects.inc(len(dead))
        self._total += read
        log.info("parsed %s unit %d [%d, %d): %d records, %d rejected (%d so far in this worker, %.0f/s)",
                 unit.file.url, unit.index, unit.start, unit.end, read, len(dead), self._total,
                 self._total / max(time.monotonic() - self._started, 1e-9))


def _by_split(batch: FramedBatch, seed: int, thresholds: tuple[int, ...]) -> list[tuple[int, FramedBatch]]:
    """A framed batch cut by split (a keyed hash of each Example's bytes), records kept in order."""
    if len(thresholds) == 1:
        return [(0, batch)]
    view, bounds = memoryview(batch.blob), [0, *batch.ends.tolist()]
    spans = list(zip(bounds, bounds[1:]))
    which = [planning.split_index(view[a + 12:b - 4], seed, thresholds) for a, b in spans]  # the Example, unframed
    return [(s, joined([view[a:b] for (a, b), w in zip(spans, which) if w == s])) for s in sorted(set(which))]


def _raw_of(row: Any) -> str:
    try:
        return json.dumps(row, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(row)
