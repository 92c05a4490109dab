"""Feature statistics per split, mergeable in any order, so every runner gives the same manifest.

``batch_stats`` decodes one batch of Examples in Python into feature name -> ``FeatureStats``: the
fallback, and the reference that ``shardprep.stats.columns`` (the same statistics from columns, the
path Parse takes) matches exactly. ``merge`` adds partial results; ``to_json`` writes the manifest's
``"statistics"`` object. Sums are kept exact as Python integers (a float32 times 2**149 and its
square times 2**298 are integers), so the mean and standard deviation do not depend on how the
runner grouped the batches. Strings keep exact counts (``distinct.StringCounts``) while a feature
and split holds at most ``MAX_DISTINCT`` distinct values of at most ``MAX_HELD_BYTES``; beyond
that the counts are dropped and ``distinct`` is a HyperLogLog estimate (``distinct_capped`` and
``distinct_estimated``); the top values are ordered by count, then by value, so ties are broken the
same way everywhere. Numbers also keep a log-bucket sketch (``shardprep.stats.sketches.LogSketch``, 1%
relative accuracy) for ``zeros``, ``quantiles`` and the two histograms; lists keep exact counts per
length (up to ``MAX_LENGTHS`` distinct lengths, then a sketch) for ``length_histogram``. Every
sketch's state depends only on the values seen, never on the grouping, so merges stay order-free.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from shardprep.example.decoder import decode_example
from shardprep.schema import FeatureSpec
from shardprep.stats.distinct import HyperLogLog, StringCounts
from shardprep.stats.sketches import Counts, LogSketch, integer_histogram

__all__ = ["DEFAULT_TOP_K", "MAX_DISTINCT", "MAX_HELD_BYTES", "MAX_LENGTHS", "QUANTILES", "FeatureStats",
           "batch_stats", "cap", "merge", "over_cap", "to_json"]

DEFAULT_TOP_K = 1000  # string values listed per feature and split (--stats-top-k)
MAX_DISTINCT = 100_000  # exact counts kept up to this many distinct strings per feature and split
MAX_HELD_BYTES = 8 << 20  # and while those strings take at most this many bytes (images, long texts)
MAX_LENGTHS = 4096  # exact counts of list lengths up to this many distinct lengths, then a LogSketch
QUANTILES = {"p1": 0.01, "p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99}
BINS = 10  # bins of the histograms
_F_SHIFT = 149  # float32 values times 2**149 (their squares times 2**298) are integers


@dataclasses.dataclass
class FeatureStats:
    """One feature of one split: present/missing counts, numbers' exact sums, lists' lengths, strings' counts."""

    count: int = 0  # records holding the feature
    missing: int = 0  # records leaving it out
    values: int = 0  # numbers seen (all list items)
    minimum: float | int | None = None
    maximum: float | int | None = None
    total: int = 0  # exact sum (floats scaled by 2**149)
    squares: int = 0  # exact sum of squares (floats scaled by 2**298)
    length_min: int | None = None
    length_max: int | None = None
    counts: StringCounts | None = dataclasses.field(default_factory=StringCounts)  # None: capped (``cap``)
    sketch: LogSketch | None = None  # numbers' distribution (quantiles, histograms, zeros)
    lengths: Counts | LogSketch | None = None  # lists' lengths: exact up to MAX_LENGTHS distinct, then a sketch
    strings: int = 0  # string values seen (all list items)
    bytes_total: int = 0  # their lengths in bytes, summed
    bytes_min: int | None = None
    bytes_max: int | None = None
    hll: HyperLogLog | None = None  # distinct strings once ``counts`` is over MAX_DISTINCT


def _add_numbers(s: FeatureStats, dtype: str, values: list) -> np.ndarray:
    """Adds ``values`` to the exact sums; returns those that go in the sketch (finite, as float64)."""
    if dtype == "int64":
        lo, hi = (min(values), max(values)) if values else (None, None)
        s.total += sum(values)
        s.squares += sum(v * v for v in values)
        s.values += len(values)
    else:  # NaN and infinities (--allow-non-finite) are left out of every number
        x = np.asarray(values, np.float32).astype(np.float64)
        x = x[np.isfinite(x)]
        lo, hi = (float(x.min()) + 0.0, float(x.max()) + 0.0) if x.size else (None, None)  # -0.0 as 0.0: order-free
        s.total += _scaled_total(x, _F_SHIFT, 24)  # a float32 has 24 significant bits
        s.squares += _scaled_total(x * x, 2 * _F_SHIFT, 48)  # its square is exact in float64
        s.values += x.size
    s.minimum, s.maximum = _lesser(s.minimum, lo, min), _lesser(s.maximum, hi, max)
    return np.asarray(values, np.float64) if dtype == "int64" else x


def _scaled_total(x: np.ndarray, shift: int, bits: int) -> int:
    """``sum(int(v * 2**shift) for v in x)``, exact, for float64 values of at most ``bits``
    significant bits, each an integer once scaled (``_F_SHIFT``), without a Python int per value:
    the values' integer significands are summed per binary exponent in
    pieces of 24 bits (float64 sums of them stay exact up to 2**29 values), and the few sums shifted
    into place as Python ints."""
    if not x.size:
        return 0
    mantissa, exponent = np.frexp(x)
    significand = (mantissa * float(1 << bits)).astype(np.int64)  # exact: at most ``bits`` bits
    lowest = int(exponent.min())
    group = (exponent - lowest).astype(np.intp)
    sums = [0] * (int(group.max()) + 1)
    for low in range(0, bits, 24):  # a signed significand (bits <= 24) in one piece; squares are >= 0
        piece = significand >> low if low + 24 >= bits else (significand >> low) & 0xFFFFFF
        for k, total in enumerate(np.bincount(group, weights=piece).tolist()):
            if total:
                sums[k] += int(total) << low
    total = 0
    for k, part in enumerate(sums):  # each part is a multiple of 2**-scale where scale < 0: a sum of integers
        scale = k + lowest - bits + shift
        total += part << scale if scale >= 0 else part >> -scale
    return total


def _merge_sketch(a: LogSketch | None, b: LogSketch | None) -> LogSketch | None:
    return b if a is None else a if b is None else a.merge(b)


def _merge_lengths(a: Counts | LogSketch | None, b: Counts | LogSketch | None) -> Counts | LogSketch | None:
    """Exact counts while the union has at most ``MAX_LENGTHS`` distinct lengths, else the sketch of
    them all: a function of the lengths seen, whatever the grouping (distinct counts only grow)."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, Counts) and isinstance(b, Counts):
        merged = a.merge(b)
        return merged if len(merged) <= MAX_LENGTHS else LogSketch.of_counts(merged)
    return (LogSketch.of_counts(a) if isinstance(a, Counts) else a).merge(
        LogSketch.of_counts(b) if isinstance(b, Counts) else b)


def _add_strings(s: FeatureStats, values: list) -> None:
    if values:
        sizes = np.fromiter(map(len, values), np.int64, len(values))
        s.strings += len(values)
        s.bytes_total += int(sizes.sum())
        s.bytes_min = _lesser(s.bytes_min, int(sizes.min()), min)
        s.bytes_max = _lesser(s.bytes_max, int(sizes.max()), max)
    if s.counts is None:
        s.hll = s.hll.merge(HyperLogLog.of(set(values))) if s.hll is not None else HyperLogLog.of(set(values))
        return
    if values:
        s.counts = s.counts.merge(StringCounts.of(pa.array(values, pa.large_binary())))
    cap(s)


def cap(s: FeatureStats) -> None:
    """Drops the exact counts for their sketch once they hold over ``MAX_DISTINCT`` values or over
    ``MAX_HELD_BYTES`` of them: both grow with the set of values seen, so whether a split's feature
    ends capped depends on its values only, not on how the batches were grouped."""
    if s.counts is None or (s.bytes_total <= MAX_HELD_BYTES and (s.strings <= MAX_DISTINCT
                                                                or s.counts.size_bound <= MAX_DISTINCT)):
        return  # under both caps for sure: nothing counted
    if s.counts.never_counted:
        # judged by their hashes (a column of distinct long texts: one hash pass that the sketch
        # takes, cheaper than counting them first); under the cap, counted, so that the
        # next batches' tests count the new values together with these, never hash them all again
        hashes, held = s.counts.distinct_hashes()
        if over_cap(hashes.size, s.bytes_total, held):
            s.hll, s.counts = HyperLogLog.of_hashes(hashes), None
        else:
            s.counts.count()
    elif len(s.counts) > MAX_DISTINCT or (s.bytes_total > MAX_HELD_BYTES and s.counts.held_bytes > MAX_HELD_BYTES):
        s.hll, s.counts = HyperLogLog.of_hashes(s.counts.hashes()), None


def over_cap(distinct: int, bytes_total: int, held: int) -> bool:
    """Whether strings of ``distinct`` distinct values, ``bytes_total`` bytes in all and ``held``
    bytes counting each distinct value once are past the exact counts' caps (``cap``): then they
    keep only their HyperLogLog, and so does every set of strings that holds them."""
    return distinct > MAX_DISTINCT or (bytes_total > MAX_HELD_BYTES and held > MAX_HELD_BYTES)


def batch_stats(records: Iterable[bytes | memoryview], features: Mapping[str, FeatureSpec]) -> dict[str, FeatureStats]:
    """The statistics of one batch of serialized Examples (unframed), by feature name."""
    out = {name: FeatureStats() for name in features}
    columns: dict[str, list] = {name: [] for name in features}
    lengths: dict[str, list[int]] = {name: [] for name in features}
    for record in records:
        example = decode_example(bytes(record))
        for name in features:
            values = example.get(name)
            if values is None:
                out[name].missing += 1
                continue
            columns[name].extend(values)
            lengths[name].append(len(values))
    sketched: list[tuple[FeatureStats, np.ndarray]] = []
    for name, spec in features.items():
        s = out[name]
        s.count = len(lengths[name])
        if spec.shape != () and lengths[name]:
            s.length_min, s.length_max = min(lengths[name]), max(lengths[name])
            s.lengths = Counts.of(np.asarray(lengths[name], np.int64))
            if len(s.lengths) > MAX_LENGTHS:
                s.lengths = LogSketch.of_counts(s.lengths)
        if spec.dtype == "string":
            _add_strings(s, columns[name])
        else:
            sketched.append((s, _add_numbers(s, spec.dtype, columns[name])))
    for (s, _), sketch in zip(sketched, LogSketch.of_many([x for _, x in sketched])):  # one numpy pass for all
        s.sketch = sketch
    return out


def _lesser(a: Any, b: Any, pick: Any) -> Any:
    return b if a is None else a if b is None else pick(a, b)


def merge(a: dict[str, FeatureStats], b: dict[str, FeatureStats]) -> dict[str, FeatureStats]:
    """``a`` and ``b`` added (in place into ``a``); the result does not depend on the order of merges."""
    for name, y in b.items():
        x = a.setdefault(name, FeatureStats())
        x.count += y.count
        x.missing += y.missing
        x.values += y.values
        x.minimum, x.maximum = _lesser(x.minimum, y.minimum, min), _lesser(x.maximum, y.maximum, max)
        x.total += y.total
        x.squares += y.squares
        x.length_min, x.length_max = _lesser(x.length_min, y.length_min, min), _lesser(x.length_max, y.length_max, max)
        x.sketch = _merge_sketch(x.sketch, y.sketch)
        x.lengths = _merge_lengths(x.lengths, y.lengths)
        x.strings += y.strings
        x.bytes_total += y.bytes_total
        x.bytes_min, x.bytes_max = _lesser(x.bytes_min, y.bytes_min, min), _lesser(x.bytes_max, y.bytes_max, max)
        if x.counts is not None and y.counts is not None:  # exact while the union is under the cap
            x.counts = x.counts.merge(y.counts)
            cap(x)
        else:  # the sketch of every distinct value seen on either side
            mine = x.hll if x.counts is None else HyperLogLog.of_hashes(x.counts.hashes())
            theirs = y.hll if y.counts is None else HyperLogLog.of_hashes(y.counts.hashes())
            x.hll, x.counts = mine.merge(theirs), None
    return a


def _distributions(docs: list[tuple[dict[str, Any], FeatureStats]]) -> None:
    """Adds ``zeros``, ``quantiles`` and the two histograms to each numeric feature's doc, from its
    sketch (within its 1% relative accuracy) and its exact minimum and maximum: one
    ``LogSketch.summaries`` for all of a split's features (a wide table's 50,000 columns: a few
    numpy calls, not a few per column)."""
    summaries = LogSketch.summaries([s.sketch for _, s in docs], [float(s.minimum) for _, s in docs],
                                    [float(s.maximum) for _, s in docs],
                                    [*QUANTILES.values(), *(i / BINS for i in range(BINS + 1))], BINS)
    for (doc, s), (qs, edges, counts) in zip(docs, summaries):
        n = s.values
        per_decile = [n * (i + 1) // BINS - n * i // BINS for i in range(BINS)]  # by rank: a tenth each
        doc.update({"zeros": s.sketch.zeros, "quantiles": dict(zip(QUANTILES, qs[:len(QUANTILES)])),
                    "histogram": {"edges": edges, "counts": counts},
                    "quantile_histogram": {"edges": qs[len(QUANTILES):], "counts": per_decile}})


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def to_json(stats: Mapping[str, FeatureStats], features: Mapping[str, FeatureSpec], *,
            top_k: int = DEFAULT_TOP_K) -> dict[str, dict[str, Any]]:
    """The manifest's statistics of one split, by feature name (sorted)."""
    out: dict[str, dict[str, Any]] = {}
    sketched: list[tuple[dict[str, Any], FeatureStats]] = []
    for name in sorted(stats):
        s, spec = stats[name], features.get(name)
        doc: dict[str, Any] = {"count": s.count, "missing": s.missing}
        if spec is not None and spec.shape != () and s.length_min is not None:
            doc.update(length_min=s.length_min, length_max=s.length_max)
            if s.lengths is not None:
                edges, counts = (integer_histogram(s.lengths, s.length_min, s.length_max, BINS)
                                 if isinstance(s.lengths, Counts)
                                 else s.lengths.histogram(float(s.length_min), float(s.length_max), BINS))
                doc["length_histogram"] = {"edges": edges, "counts": counts}
        if spec is not None and spec.dtype == "string":
            if s.strings:
                doc.update(bytes_mean=s.bytes_total / s.strings, bytes_min=s.bytes_min, bytes_max=s.bytes_max)
            if s.counts is None:  # capped by count: over MAX_DISTINCT for sure (not where bytes may have capped it)
                estimate = s.hll.estimate() if s.hll is not None else 0
                estimate = max(estimate, MAX_DISTINCT + 1) if s.bytes_total <= MAX_HELD_BYTES else estimate
                doc.update(distinct=estimate, distinct_capped=True, distinct_estimated=True)
            else:
                doc.update(distinct=len(s.counts), distinct_estimated=False,
                           top=[[_text(v), c] for v, c in s.counts.top(top_k)])
        elif s.values:
            shift = 0 if spec is not None and spec.dtype == "int64" else _F_SHIFT
            # exact fractions, each rounded once (int / int is correctly rounded, as float(Fraction))
            spread = max(s.squares * s.values - s.total * s.total, 0)  # n^2 var, scaled by 2**(2 shift)
            doc.update(min=s.minimum, max=s.maximum, mean=s.total / (s.values << shift),
                       std=(spread / ((s.values * s.values) << (2 * shift))) ** 0.5)
            if s.sketch is not None:
                sketched.append((doc, s))
        out[name] = doc
    _distributions(sketched)
    return out
