"""The re-shard as Beam transforms: work units in, committed data set out.

Graph (every step has a stable label)::

    Units -> Distribute -> Parse --records--> Assign(side input: Count) -> GroupByShard -> WriteShards --+
                             |--rejected--> GroupRejected -> WriteRejected ------------------------------+
                             '--facts-------------------------------------------------------------------+-> Gather -> Commit

One element carries a batch of records, never a single record, and the record bytes themselves
wait between stages in spill files under the run folder (removed at commit): the runner moves only
(url, byte range, record ends), so its coders and memory carry small elements whatever the data
size. Positions come from prefix sums of
per-unit counts (a side input keyed by unit, de-duplicated and cross-checked at commit) and a keyed
bijection, so the output depends only on the input and the seed. Every branch ends in ``Commit``:
runners that evaluate only the last step (Beam's Dask runner) still run all of them.
"""
from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from shardprep import codec, csv_arrow, fs, naming, planning, schema, sources, tfrecord, writer
from shardprep.commit import ErrorFact, PlanFact, RejectFact, ShardFact, UnitFact, commit
from shardprep.config import ReshardConfig
from shardprep.permutation import Permutation

__all__ = ["Reshard"]

log = logging.getLogger("shardprep")
_REJECTED, _FACTS = "rejected", "facts"


class _Parse(beam.DoFn):
    """Reads one work unit, encodes its records, assigns splits; bad records become dead letters.

    Emits ``(split, unit_key, part, (url, size), ends)`` batches (``url``: a spill file holding the
    framed TFRecords back to back, ``ends``: their end offsets as little-endian uint64), dead-letter
    batches and one UnitFact. The record bytes go through spill files, not through the runner: its
    coders, buffers and memory then carry only small elements.
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._records = Metrics.counter("shardprep", "records_read")
        self._rejects = Metrics.counter("shardprep", "records_rejected")
        self._bytes = Metrics.counter("shardprep", "bytes_encoded")

    def setup(self) -> None:
        cfg = self._config
        self._schema = schema.schema_from_json(cfg.features)
        self._encode = codec.example_encoder(self._schema, extra_fields=cfg.extra_fields)
        self._thresholds = planning.split_thresholds(cfg.splits)
        self._started = time.monotonic()
        self._total = 0

    def _batches(self, unit: sources.WorkUnit) -> Iterator[tuple[bytes, np.ndarray] | sources.Bad]:
        """The unit's records in file order: framed batches ``(blob, ends)``, and ``Bad`` ones.

        CSV goes column-wise (``csv_arrow``) while it can; from the first batch it cannot take,
        the per-record path reads the unit, skipping the records already given, and decides.
        """
        limit, done, pending, waiting = self._config.batch_records, 0, [], 0
        fast = True
        try:
            for block in csv_arrow.framed_batches(unit, self._schema, self._config.extra_fields):
                pending.append(block)  # blocks of 1 MB, joined into batches as large as the per-record path's
                waiting += len(block[1])
                if waiting >= limit:
                    yield _concat(pending)
                    done, pending, waiting = done + waiting, [], 0
        except csv_arrow.Unsupported as e:
            fast = False
            if unit.file.format == "csv":
                log.info("%s unit %d: per-record path from record %d on (%s)", unit.file.url, unit.index,
                         done + waiting + 1, e)
        if pending:
            yield _concat(pending)
            done += waiting
        if fast:
            return
        encode, frame = self._encode, tfrecord.frame
        framed: list[bytes] = []
        for position, row in itertools.islice(sources.read_unit(unit), done, None):
            if isinstance(row, sources.Bad):
                yield row
                continue
            try:
                framed.append(frame(encode(row)))
            except codec.RecordError as e:
                yield sources.Bad(position, e.reason, e.detail, _raw_of(row))
                continue
            if len(framed) >= limit:
                yield _joined(framed)
                framed = []
        if framed:
            yield _joined(framed)

    def process(self, unit: sources.WorkUnit) -> Iterator[Any]:
        cfg = self._config
        parts = [0] * len(cfg.splits)
        kept = [0] * len(cfg.splits)
        dead: list[bytes] = []
        reasons: dict[str, int] = {}
        read = 0
        unit_name = f"{unit.file.index}:{unit.index}"
        for item in self._batches(unit):
            if isinstance(item, sources.Bad):
                read += 1
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
                dead.append(writer.dead_letter_line(source=unit.file.url, position=item.position, unit=unit_name,
                                                    reason=item.reason, detail=item.detail, raw=item.raw))
                continue
            read += len(item[1])
            self._bytes.inc(len(item[0]))
            for s, blob, ends in _by_split(*item, cfg.seed, self._thresholds):
                yield _pack(cfg, s, unit.key, parts[s], blob, ends)
                kept[s] += len(ends)
                parts[s] += 1
        if dead:
            yield pvalue.TaggedOutput(_REJECTED, (unit.key, dead))
        yield pvalue.TaggedOutput(_FACTS, UnitFact(unit.key, unit.file.index, read, len(dead), tuple(kept),
                                                   tuple(sorted(reasons.items()))))
        self._records.inc(read)
        self._rejects.inc(len(dead))
        self._total += read
        log.info("parsed %s unit %d [%d, %d): %d records, %d rejected (%d so far in this worker, %.0f/s)",
                 unit.file.url, unit.index, unit.start, unit.end, read, len(dead), self._total,
                 self._total / max(time.monotonic() - self._started, 1e-9))


def _joined(framed: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(framed), np.cumsum(np.fromiter(map(len, framed), dtype="<u8", count=len(framed)), dtype="<u8")


def _concat(batches: list[tuple[bytes, np.ndarray]]) -> tuple[bytes, np.ndarray]:
    """Framed batches joined into one."""
    if len(batches) == 1:
        return batches[0]
    sizes = np.cumsum([0, *(int(ends[-1]) for _, ends in batches[:-1])], dtype=np.uint64)
    return b"".join(blob for blob, _ in batches), np.concatenate([ends + size for (_, ends), size in zip(batches, sizes)])


def _by_split(blob: bytes, ends: np.ndarray, seed: int, thresholds: tuple[int, ...]) -> list[tuple[int, bytes, np.ndarray]]:
    """A framed batch cut by split (a keyed hash of each Example's bytes), records kept in order."""
    if len(thresholds) == 1:
        return [(0, blob, ends)]
    view, bounds = memoryview(blob), [0, *ends.tolist()]
    spans = list(zip(bounds, bounds[1:]))
    which = [planning.split_index(view[a + 12:b - 4], seed, thresholds) for a, b in spans]  # the Example, unframed
    out = []
    for s in sorted(set(which)):
        out.append((s, *_joined([view[a:b] for (a, b), w in zip(spans, which) if w == s])))
    return out


def _raw_of(row: Any) -> str:
    try:
        return json.dumps(row, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(row)


def _spill_url(config: ReshardConfig, name: str) -> str:
    """Where a batch's bytes wait between stages: under the run's own folder, so a crashed run's
    spill goes with it, and on shared storage whenever the output is (Dataflow, remote Dask)."""
    return naming.join(config.output, f"{config.run_id}/spill/{name}")


def _spill(url: str, data: bytes) -> None:
    """Writes a batch's bytes between stages. Names are deterministic, so a retried bundle rewrites
    the same bytes; no fsync, since the shards, not the spill, are the durable output."""
    with fs.write_atomic(url, durable=False) as f:
        f.write(data)


def _pack(config: ReshardConfig, split: int, unit: tuple[int, int], part: int, blob: bytes, ends: np.ndarray) -> tuple:
    """Spills a batch; the element that crosses the runner is its (url, size) and record ends."""
    url = _spill_url(config, f"parsed-{split}-{unit[0]}-{unit[1]}-{part}.bin")
    _spill(url, blob)
    return split, unit, part, (url, len(blob)), ends.tobytes()


def _count(batch: tuple) -> tuple:
    split, unit, part, (_, size), ends = batch
    return split, unit, part, len(ends) // 8, size


def _slices(blob: bytes, ends: np.ndarray) -> list[memoryview]:
    """The records of a packed batch, without copying."""
    view, start = memoryview(blob), 0
    out = []
    for end in ends.tolist():
        out.append(view[start:end])
        start = end
    return out


class _Assign(beam.DoFn):
    """Gives every record its global position and deals positions round-robin to shards.

    The counts side input is keyed by (split, unit, part); duplicates that runners sometimes
    deliver are dropped, conflicting ones fail the run. Emits ``((split, shard, num_shards),
    (orders, (url, start, end), ends))``, one piece per shard the batch touches: a byte range of
    the batch's reordered spill file.
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._plans: dict[int, tuple] | None = None

    def _plan(self, counts: Iterable[tuple]) -> dict[int, tuple]:
        by_key: dict[tuple, tuple[int, int]] = {}
        for split, unit, part, n, size in counts:
            key = (split, tuple(unit), part)
            if by_key.setdefault(key, (n, size)) != (n, size):
                raise RuntimeError(f"side input holds two different counts for {key}: refusing to shuffle")
        plans = {}
        for s, split in enumerate(self._config.splits):
            keys = sorted(k for k in by_key if k[0] == s)
            offsets, total, size = {}, 0, 0
            for k in keys:
                offsets[k] = total
                total += by_key[k][0]
                size += by_key[k][1]
            if not total:
                continue
            try:
                num_shards = self._config.num_shards_for(split.name, total, size)
            except planning.PlanError as e:
                plans[s] = (None, None, None, str(e))
                continue
            perm = Permutation(total, self._config.seed + s) if self._config.shuffle else None
            plans[s] = (offsets, num_shards, perm, PlanFact(s, total, size, num_shards))
        return plans

    def process(self, batch: tuple, counts: list) -> Iterator[Any]:
        if self._plans is None:
            self._plans = self._plan(counts)
            for plan in self._plans.values():
                fact = plan[3]
                yield pvalue.TaggedOutput(_FACTS, fact if isinstance(fact, PlanFact) else ErrorFact(fact))
        split, unit, part, (url, _), ends_bytes = batch
        offsets, num_shards, perm, _ = self._plans[split]
        if offsets is None:
            return
        ends = np.frombuffer(ends_bytes, dtype="<u8")
        start = offsets[(split, tuple(unit), part)]
        index = np.arange(start, start + len(ends), dtype=np.uint64)
        position = perm(index) if perm is not None else index
        shard = position % np.uint64(num_shards)
        order = position // np.uint64(num_shards)
        # Reorder the batch by (shard, order) once and spill it; each shard's piece is then one
        # byte range of that file, and only (url, offset, length) crosses the GroupByKey.
        by_shard = np.lexsort((order, shard))
        records = _slices(fs.read_bytes(url), ends)
        out_url = _spill_url(self._config, f"sorted-{split}-{unit[0]}-{unit[1]}-{part}.bin")
        _spill(out_url, b"".join([records[i] for i in by_shard.tolist()]))
        del records
        lengths = np.diff(ends, prepend=np.uint64(0))[by_shard]
        new_ends = np.cumsum(lengths, dtype="<u8")
        sorted_shard, sorted_order = shard[by_shard], order[by_shard].astype("<u8")
        bounds = [0, *(np.flatnonzero(np.diff(sorted_shard)) + 1).tolist(), len(ends)]
        for lo, hi in zip(bounds, bounds[1:]):
            first = int(new_ends[lo - 1]) if lo else 0
            key = (split, int(sorted_shard[lo]), num_shards)
            piece_ends = (new_ends[lo:hi] - np.uint64(first)).astype("<u8")
            yield key, (sorted_order[lo:hi].tobytes(), (out_url, first, int(new_ends[hi - 1])), piece_ends.tobytes())


class _WriteShard(beam.DoFn):
    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._shards = Metrics.counter("shardprep", "shards_written")

    def process(self, item: tuple) -> Iterator[ShardFact]:
        (split, shard, num_shards), pieces = item
        orders, records = [], []
        for order_bytes, (url, first, last), ends in pieces:
            orders.append(np.frombuffer(order_bytes, dtype="<u8"))
            records.extend(_slices(fs.read_bytes(url, first, last), np.frombuffer(ends, dtype="<u8")))
        order = np.argsort(np.concatenate(orders), kind="stable")
        name = self._config.splits[split].name
        path = naming.shard_path(self._config.run_id, name, shard, num_shards, gzip=self._config.gzip)
        framed = b"".join([records[i] for i in order.tolist()])
        info = writer.write_shard(self._config.output, path, framed, len(records), compress=self._config.gzip)
        self._shards.inc()
        log.info("wrote %s: %d records, %d bytes", path, info.num_records, info.num_bytes)
        yield ShardFact(split, shard, num_shards, info)


class _WriteRejected(beam.DoFn):
    def __init__(self, config: ReshardConfig) -> None:
        self._config = config

    def process(self, item: tuple) -> Iterator[RejectFact]:
        _, batches = item
        lines = [line for _, dead in sorted(batches, key=lambda b: tuple(b[0])) for line in dead]
        path = naming.rejected_path(self._config.run_id, 0, 1)
        count = writer.write_rejected(self._config.output, path, lines)
        log.info("wrote %d dead letters to %s", count, path)
        yield RejectFact(path, count)


class _Commit(beam.DoFn):
    def __init__(self, config: ReshardConfig) -> None:
        self._config = config

    def process(self, item: tuple) -> Iterator[str]:
        _, facts = item
        yield commit(self._config, list(facts))


class Reshard(beam.PTransform):
    """Work units in; shards, dead letters and the manifest (or a failure report) out.

    Returns a PCollection holding the URL of the manifest or of the report.
    """

    def __init__(self, config: ReshardConfig, units: list[sources.WorkUnit]) -> None:
        super().__init__()
        self._config = config
        self._units = units

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        cfg = self._config
        parsed = (
            pbegin
            | "Units" >> beam.Create(self._units)
            | "Distribute" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(_Parse(cfg)).with_outputs(_REJECTED, _FACTS, main="records")
        )
        counts = parsed.records | "Count" >> beam.Map(_count)
        assigned = parsed.records | "Assign" >> beam.ParDo(_Assign(cfg), counts=beam.pvalue.AsList(counts)).with_outputs(
            _FACTS, main="pieces"
        )
        shard_facts = (
            assigned.pieces
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(_WriteShard(cfg))
        )
        reject_facts = (
            parsed[_REJECTED]
            | "KeyRejected" >> beam.Map(lambda batch: (0, batch))
            | "GroupRejected" >> beam.GroupByKey()
            | "WriteRejected" >> beam.ParDo(_WriteRejected(cfg))
        )
        return (
            (parsed[_FACTS], assigned[_FACTS], shard_facts, reject_facts)
            | "AllFacts" >> beam.Flatten()
            | "KeyFacts" >> beam.Map(lambda fact: (None, fact))
            | "Gather" >> beam.GroupByKey()
            | "Commit" >> beam.ParDo(_Commit(cfg))
        )
