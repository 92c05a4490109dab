"""Exact sums of number columns with numpy, for ``shardprep.stats.columns``: the count, minimum,
maximum, exact sum and exact sum of squares (Python ints) of many features' int64 or float32
values at once, a few numpy calls for all of them: ``columns.add``'s path for a batch of more than
``columns.MAX_SUMMED`` number features (a wide table's) or where ``native.sum_numbers`` declines.
Each feature's results are written into its ``FeatureStats``, the same integers that
``feature_stats.batch_stats`` computes.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardprep.stats.feature_stats import FeatureStats

__all__ = ["float_sums", "int_sums"]


def _segments(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All values back to back, each array's start, and the array index of every value."""
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return np.concatenate(arrays), starts, np.repeat(np.arange(len(arrays), dtype=np.int64), sizes)


def int_sums(items: list[tuple[FeatureStats, np.ndarray]]) -> None:
    """Counts, minima, maxima and the exact sums and sums of squares (Python ints) of int64 features:
    the values cut into 16-bit limbs so that every partial sum stays exact in int64."""
    items = [(s, x) for s, x in items if x.size]
    if not items:
        return
    v, starts, _ = _segments([x for _, x in items])
    lo, hi = np.minimum.reduceat(v, starts).tolist(), np.maximum.reduceat(v, starts).tolist()
    low = np.add.reduceat(v & 0xFFFFFFFF, starts).tolist()  # < 2**32 each: exact below 2**31 values
    high = np.add.reduceat(v >> 32, starts).tolist()
    u = v.view(np.uint64)
    magnitude = np.where(v < 0, ~u + np.uint64(1), u)  # |v| (2**63 for the lowest int64)
    limbs = [((magnitude >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.int64)
             for k in range((int(magnitude.max()).bit_length() + 15) // 16)]
    squares = [0] * len(items)
    for a in range(len(limbs)):
        for b in range(a, len(limbs)):  # |v|**2 = sum of limb products, each < 2**32
            part = np.add.reduceat(limbs[a] * limbs[b], starts).tolist()
            shift, twice = 16 * (a + b), a != b
            for f, total in enumerate(part):
                squares[f] += (total << shift) << twice
    for f, (s, x) in enumerate(items):
        s.values = int(x.size)
        s.minimum, s.maximum = lo[f], hi[f]
        s.total = (high[f] << 32) + low[f]
        s.squares = squares[f]


def float_sums(items: list[tuple[FeatureStats, np.ndarray]]) -> None:
    """Counts, minima, maxima and the exact scaled sums of ``stats`` (a float32 times 2**149, its
    square times 2**298: integers) of finite float32 values, for all
    features at once: each value is ``+-M * 2**(e - 1)`` times 2**-149 with ``M`` its 24-bit
    significand and ``e`` its float32 exponent field (1 for subnormals), so the sums are per
    (feature, e) sums of ``M`` and of ``M**2`` in 12-bit pieces, each exact in a float64 ``bincount``
    (pieces below 2**24, fewer than 2**29 values), shifted into place as Python ints."""
    items = [(s, x) for s, x in items if x.size]
    if not items:
        return
    x, starts, feature = _segments([x for _, x in items])
    lo = (np.minimum.reduceat(x, starts).astype(np.float64) + 0.0).tolist()  # -0.0 as 0.0, as stats
    hi = (np.maximum.reduceat(x, starts).astype(np.float64) + 0.0).tolist()
    bits = x.view(np.uint32)
    field = (bits >> np.uint32(23)) & np.uint32(0xFF)
    significand = ((bits & np.uint32(0x7FFFFF)) | ((field > 0).astype(np.uint32) << np.uint32(23))).astype(np.int64)
    exponent = np.maximum(field, 1).astype(np.int64)  # e: value * 2**149 = +-M * 2**(e - 1)
    negative = bits >> np.uint32(31) != 0
    group = feature * 256 + exponent
    seen = None
    if len(items) * 256 > 4 * x.size + 4096:  # many features, few values: number the groups seen
        seen, group = np.unique(group, return_inverse=True)
    size = len(items) * 256 if seen is None else seen.size
    high, low = significand >> 12, significand & 0xFFF
    per = [np.bincount(group, weights=np.where(negative, -significand, significand), minlength=size),
           np.bincount(group, weights=high * high, minlength=size),
           np.bincount(group, weights=high * low, minlength=size),
           np.bincount(group, weights=low * low, minlength=size)]
    used = np.flatnonzero((per[1] != 0) | (per[3] != 0) | (per[0] != 0))
    keys = (seen[used] if seen is not None else used).tolist()
    totals, squares = [0] * len(items), [0] * len(items)
    for g, m, hh, hl, ll in zip(keys, *(p[used].tolist() for p in per)):
        f, e = divmod(g, 256)
        totals[f] += int(m) << (e - 1)
        squares[f] += ((int(hh) << 24) + (int(hl) << 13) + int(ll)) << (2 * (e - 1))
    for f, (s, values) in enumerate(items):
        s.values = int(values.size)
        s.minimum, s.maximum = lo[f], hi[f]
        s.total, s.squares = totals[f], squares[f]
