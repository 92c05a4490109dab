"""Mergeable sketches for ``shardprep.stats.feature_stats``: each one's state is a function of the multiset (or the
set) of values it has seen, never of the order or grouping of the batches, so every engine and
worker count writes the same manifest bytes.

``Counts``: exact integer counts per integer key, kept sparse (sorted key and count arrays: only the
keys seen, so a feature of 20 values costs 20 entries, not a fixed table).

``LogSketch``: DDSketch-style numbers with relative accuracy ``ALPHA`` (1%). A value ``x != 0`` falls
in bucket ``k = ceil(log_gamma |x|)``, ``gamma = (1 + ALPHA) / (1 - ALPHA)``, with separate counts
for positive values, negative values and zeros; the bucket's representative ``2 gamma**k / (gamma + 1)``
is within ``ALPHA`` of every value in it. The index is that of a table of the bucket bounds
``gamma**k`` (computed once, in Python floats: ``bucket_keys``), exact and the same on every machine
whatever the last bit of ``np.log``. At most ``MAX_BUCKETS`` buckets per sign: the
lowest (nearest zero) are folded into the lowest bucket kept, which depends only on the set of keys
seen, so it too is independent of order and grouping. Integer counts: merging is exact.

The strings' sketches (exact counts, HyperLogLog) are ``shardprep.stats.distinct``.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["ALPHA", "BUCKET_TABLE", "MAX_BUCKETS", "BucketTable", "Counts", "LogSketch", "integer_histogram"]

ALPHA = 0.01  # relative accuracy of LogSketch quantiles
GAMMA = (1 + ALPHA) / (1 - ALPHA)
MAX_BUCKETS = 2048  # per sign; beyond, the lowest buckets are folded together
DENSE_MERGE_SPAN = 8192  # ``Counts.merge`` adds by place in a dense range of at most this many keys (or 4x theirs)


_NONE = np.zeros(0, np.int64)
_NONE.flags.writeable = False


class Counts:
    """Exact counts per integer key, as sorted unique ``keys`` and their ``counts`` (int64 arrays).
    Treated as immutable: ``merge`` returns a new object, so partials may be shared safely."""

    __slots__ = ("keys", "counts")

    def __init__(self, keys: np.ndarray | None = None, counts: np.ndarray | None = None) -> None:
        self.keys = _NONE if keys is None else keys  # shared when empty: never written to
        self.counts = _NONE if counts is None else counts

    @classmethod
    def of(cls, keys: np.ndarray, weights: np.ndarray | None = None) -> Counts:
        """The counts of ``keys`` (each one once, or ``weights`` times)."""
        if weights is None:
            uniq, counts = np.unique(np.asarray(keys, np.int64), return_counts=True)
            return cls(uniq, counts.astype(np.int64))
        uniq, inverse = np.unique(np.asarray(keys, np.int64), return_inverse=True)
        counts = np.zeros(uniq.size, np.int64)
        np.add.at(counts, inverse, np.asarray(weights, np.int64))
        return cls(uniq, counts)

    def merge(self, other: Counts) -> Counts:
        if not other.keys.size:
            return self
        if not self.keys.size:
            return other
        if self.keys.size == other.keys.size and np.array_equal(self.keys, other.keys):
            return Counts(self.keys, self.counts + other.counts)
        lo = min(int(self.keys[0]), int(other.keys[0]))
        span = max(int(self.keys[-1]), int(other.keys[-1])) - lo + 1
        if span <= max(DENSE_MERGE_SPAN, 4 * (self.keys.size + other.keys.size)):
            # keys close together (a sketch's buckets, list lengths): by place in a dense range, no sort
            counts, present = np.zeros(span, np.int64), np.zeros(span, bool)
            for side in (self, other):
                counts[side.keys - lo] += side.counts
                present[side.keys - lo] = True
            places = np.flatnonzero(present)
            return Counts((places + lo).astype(self.keys.dtype, copy=False), counts[places])
        uniq, inverse = np.unique(np.concatenate([self.keys, other.keys]), return_inverse=True)
        counts = np.zeros(uniq.size, np.int64)
        np.add.at(counts, inverse, np.concatenate([self.counts, other.counts]))
        return Counts(uniq, counts)

    def collapse_lowest(self, limit: int) -> Counts:
        """At most ``limit`` keys: those below the ``limit``-th highest folded into it."""
        if self.keys.size <= limit:
            return self
        cut = self.keys.size - limit
        counts = self.counts[cut:].copy()
        counts[0] += int(self.counts[:cut].sum())
        return Counts(self.keys[cut:].copy(), counts)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def __len__(self) -> int:
        return int(self.keys.size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counts) and np.array_equal(self.keys, other.keys) \
            and np.array_equal(self.counts, other.counts)

    def __getstate__(self) -> tuple:
        return self.keys, self.counts

    def __setstate__(self, state: tuple) -> None:
        self.keys, self.counts = state


_NO_COUNTS = Counts()


def _bounds() -> tuple[np.ndarray, int]:
    """``gamma**k`` for every ``k`` from below the smallest float32 subnormal (1.4e-45) to above the
    largest float64 (``inf`` closes the table), and the ``k`` of the first entry."""
    low = math.floor(math.log(1e-46) / math.log(GAMMA))
    high = math.floor(math.log(sys.float_info.max) / math.log(GAMMA))  # gamma**(high - 1) is finite
    table = [GAMMA ** k for k in range(low, high)] + [math.inf]
    return np.array(table, np.float64), low


_BOUNDS, _LOW_KEY = _bounds()


_LOG_GAMMA = math.log(GAMMA)


class BucketTable(NamedTuple):
    """What compiled code needs to give ``bucket_keys``' answer (``native.example_columns``,
    ``native.sum_numbers``): the bounds, ``1 / log(gamma)`` for the guess, the key of the first bound."""

    bounds: np.ndarray
    inv_log: float
    low: int


BUCKET_TABLE = BucketTable(_BOUNDS, 1.0 / _LOG_GAMMA, _LOW_KEY)


def bucket_keys(magnitudes: np.ndarray) -> np.ndarray:
    """``ceil(log_gamma x)`` of positive finite values: the smallest ``k`` with ``gamma**k >= x``.
    A guess from ``np.log`` (within one bucket of it, whatever its last bit), then set exactly by
    comparing with the table of bounds: the result is ``searchsorted`` in the table (the same on
    every machine), at a few element-wise passes instead of a binary search per value."""
    x = np.asarray(magnitudes, np.float64)
    top = _BOUNDS.size - 1
    with np.errstate(divide="ignore"):
        guess = np.ceil(np.log(x) * (1.0 / _LOG_GAMMA)) - _LOW_KEY
    at = np.clip(guess, 1, top).astype(np.int64)
    at += _BOUNDS[at] < x  # the bound at the guess is below x: one up
    at -= _BOUNDS[at - 1] >= x  # the one below already holds x: one down
    wrong = (_BOUNDS[np.minimum(at, top)] < x) | ((at > 0) & (_BOUNDS[np.maximum(at - 1, 0)] >= x))
    if wrong.any():  # never seen: the guess off by more than one bucket
        at[wrong] = np.searchsorted(_BOUNDS, x[wrong], side="left")
    return at + _LOW_KEY


def representative(keys: np.ndarray) -> np.ndarray:
    """Each bucket's value within ``ALPHA`` of every magnitude in it: ``2 gamma**k / (gamma + 1)``."""
    return _BOUNDS[np.asarray(keys, np.int64) - _LOW_KEY] * (2.0 / (GAMMA + 1.0))


class LogSketch:
    """Numbers' distribution to 1% relative accuracy: positive and negative bucket counts, zeros."""

    __slots__ = ("positive", "negative", "zeros")

    def __init__(self, positive: Counts | None = None, negative: Counts | None = None, zeros: int = 0) -> None:
        self.positive = positive if positive is not None else _NO_COUNTS
        self.negative = negative if negative is not None else _NO_COUNTS
        self.zeros = zeros

    @classmethod
    def of(cls, x: np.ndarray) -> LogSketch:
        """The sketch of finite float64 values (vectorised: one ``searchsorted`` and ``unique`` per sign)."""
        x = np.asarray(x, np.float64)
        pos, neg = x[x > 0], x[x < 0]
        return cls(Counts.of(bucket_keys(pos)).collapse_lowest(MAX_BUCKETS),
                   Counts.of(bucket_keys(-neg)).collapse_lowest(MAX_BUCKETS), int(x.size - pos.size - neg.size))

    @classmethod
    def of_counts(cls, counts: Counts) -> LogSketch:
        """The sketch of non-negative integer keys counted exactly (list lengths past their cap)."""
        positive = counts.keys > 0
        return cls(Counts.of(bucket_keys(counts.keys[positive].astype(np.float64)), counts.counts[positive])
                   .collapse_lowest(MAX_BUCKETS), None, int(counts.counts[~positive].sum()))

    def merge(self, other: LogSketch) -> LogSketch:
        return LogSketch(self.positive.merge(other.positive).collapse_lowest(MAX_BUCKETS),
                         self.negative.merge(other.negative).collapse_lowest(MAX_BUCKETS), self.zeros + other.zeros)

    @property
    def count(self) -> int:
        return self.positive.total + self.negative.total + self.zeros

    def ordered(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """Every bucket's representative (ascending, clipped to the exact ``[lo, hi]``) and count."""
        values = np.concatenate([-representative(self.negative.keys[::-1]), [0.0], representative(self.positive.keys)])
        counts = np.concatenate([self.negative.counts[::-1], [self.zeros], self.positive.counts])
        return np.clip(values, lo, hi), counts

    def quantiles(self, qs: Iterable[float], lo: float, hi: float) -> list[float]:
        """Quantiles as numpy's default (linear) ``percentile``: between the order statistics at ranks
        ``floor`` and ``ceil`` of ``q (n - 1)``, each estimated to within ``ALPHA`` of its value."""
        return self.summary(qs, lo, hi)[0]

    def histogram(self, lo: float, hi: float, bins: int = 10) -> tuple[list[float], list[int]]:
        """``bins`` equal-width bins between the exact ``lo`` and ``hi``; each bucket's count goes to
        the bin of its representative (so a count may land one bin off near an edge: approximate
        within the sketch's 1%)."""
        _, edges, counts = self.summary((), lo, hi, bins)
        return edges, counts

    def summary(self, qs: Iterable[float], lo: float, hi: float,
                bins: int = 10) -> tuple[list[float], list[float], list[int]]:
        """``quantiles(qs)`` and ``histogram(bins)`` from one pass over the buckets (``summaries``)."""
        return LogSketch.summaries([self], [lo], [hi], qs, bins)[0]

    @staticmethod
    def summaries(sketches: Sequence[LogSketch], los: Sequence[float], his: Sequence[float], qs: Iterable[float],
                  bins: int = 10) -> list[tuple[list[float], list[float], list[int]]]:
        """``summary`` of many sketches (a split's features) in a few numpy calls for all of them: every
        sketch's ``ordered`` buckets back to back, one ``searchsorted`` in their running counts for
        every quantile, one ``bincount`` for every histogram. The same float operations on the same
        numbers as one sketch at a time, so the same results bit for bit."""
        m = len(sketches)
        if not m:
            return []
        pieces_k: list[np.ndarray] = []
        pieces_c: list[np.ndarray] = []
        zero_key = np.zeros(1, np.int64) + _LOW_KEY
        for s in sketches:
            pieces_k += [s.negative.keys[::-1], zero_key, s.positive.keys]
            pieces_c += [s.negative.counts[::-1], np.array([s.zeros], np.int64), s.positive.counts]
        keys, counts = np.concatenate(pieces_k), np.concatenate(pieces_c)
        sizes = np.fromiter((s.negative.keys.size + 1 + s.positive.keys.size for s in sketches), np.int64, m)
        starts = np.cumsum(sizes) - sizes
        segment = np.repeat(np.arange(m, dtype=np.int64), sizes)
        below_zero = np.fromiter((s.negative.keys.size for s in sketches), np.int64, m)
        kind = np.sign(np.arange(keys.size, dtype=np.int64) - starts[segment] - below_zero[segment])  # -1, 0 (zeros), 1
        lo, hi = np.asarray(los, np.float64), np.asarray(his, np.float64)
        values = np.where(kind == 0, 0.0, kind * representative(keys))
        values = np.clip(values, lo[segment], hi[segment])
        q = np.asarray(list(qs), np.float64)
        out_q: list[list[float]] = [[] for _ in range(m)]
        if q.size:
            cumulative = np.cumsum(counts)
            total = np.add.reduceat(counts, starts)  # each sketch's count (every segment holds its zeros)
            base = (cumulative[starts + sizes - 1] - total).astype(np.float64)
            rank = q[None, :] * (total - 1).astype(np.float64)[:, None]
            below = np.floor(rank)
            at_lo = np.searchsorted(cumulative, base[:, None] + below, side="right")
            at_hi = np.searchsorted(cumulative, base[:, None] + np.ceil(rank), side="right")
            a, b = values[at_lo], values[at_hi]
            picked = np.where(q <= 0, lo[:, None], np.where(q >= 1, hi[:, None], a + (rank - below) * (b - a)))
            out_q = picked.tolist()
        with np.errstate(divide="ignore", invalid="ignore"):
            lo_e, hi_e = lo[segment], hi[segment]
            at = np.where(hi_e > lo_e, np.minimum(np.floor((values - lo_e) / (hi_e - lo_e) * bins), bins - 1), bins - 1)
        at = np.clip(at.astype(np.int64), 0, bins - 1)
        per_bin = np.bincount(segment * bins + at, weights=counts, minlength=m * bins)  # float64: exact below 2**53
        per_bin = per_bin.astype(np.int64).reshape(m, bins).tolist()
        return [(out_q[f], _edges(float(lo[f]), float(hi[f]), bins), per_bin[f]) for f in range(m)]

    @classmethod
    def of_many(cls, arrays: list[np.ndarray]) -> list[LogSketch]:
        """``[LogSketch.of(x) for x in arrays]`` with one ``searchsorted`` and one ``unique`` for all of
        them (a wide table's batch: thousands of features of a few values each)."""
        if not arrays:
            return []
        sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
        x = np.concatenate(arrays).astype(np.float64, copy=False)
        feature = np.repeat(np.arange(len(arrays), dtype=np.int64), sizes)
        nonzero = x != 0
        zeros = np.bincount(feature[~nonzero], minlength=len(arrays)).tolist()
        group = feature[nonzero] * 2 + (x[nonzero] < 0)  # 2 f: positive values of feature f, 2 f + 1: negative
        key = bucket_keys(np.abs(x[nonzero]))
        low = int(key.min()) if key.size else 0
        span = np.int64(int(key.max()) - low + 1 if key.size else 1)
        code = group * span + (key - low)
        if 2 * len(arrays) * int(span) <= 2 * code.size + (1 << 18):  # a dense count: no sort
            per_code = np.bincount(code, minlength=2 * len(arrays) * int(span))
            code = np.flatnonzero(per_code)
            counts = per_code[code]
        else:
            code, counts = np.unique(code, return_counts=True)
        starts = np.searchsorted(code // span, np.arange(2 * len(arrays) + 1)).tolist()
        keys = code % span + low
        counts = counts.astype(np.int64)
        out = []
        for f in range(len(arrays)):
            a, b, c = starts[2 * f], starts[2 * f + 1], starts[2 * f + 2]
            out.append(cls(Counts(keys[a:b], counts[a:b]).collapse_lowest(MAX_BUCKETS),
                           Counts(keys[b:c], counts[b:c]).collapse_lowest(MAX_BUCKETS), zeros[f]))
        return out


def _edges(lo: float, hi: float, bins: int) -> list[float]:
    return [lo + (hi - lo) * i / bins for i in range(bins)] + [hi]


def integer_histogram(counts: Counts, lo: int, hi: int, bins: int = 10) -> tuple[list[float], list[int]]:
    """Exact ``bins`` equal-width bins of integer keys between ``lo`` and ``hi`` (list lengths)."""
    edges = [lo + (hi - lo) * i / bins for i in range(bins)] + [float(hi)]
    if hi > lo:
        at = np.minimum((counts.keys - lo) * bins // (hi - lo), bins - 1)
    else:
        at = np.full(counts.keys.size, bins - 1, np.int64)
    per_bin = np.zeros(bins, np.int64)
    np.add.at(per_bin, at, counts.counts)
    return [float(e) for e in edges], per_bin.tolist()
