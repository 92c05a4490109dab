/* The statistics' per-value steps, inlined into the walks that read the values (columns.c) and
 * into sum_numbers (stats.c): a number's count, extremes and exact sums; its log bucket, counted a
 * block at a time (ExPending); a string's distinct-count sketch hash (value_hash). */
#ifndef SHARDPREP_STATS_H
#define SHARDPREP_STATS_H

#include <math.h>

#include "native.h"

/* With ``bounds`` (example_columns' fifth argument), a number feature's values are not copied out
 * but summed up as they are read, exactly as shardprep.stats_columns.add sums a column: the finite
 * values' count, minimum and maximum, exact sums and sums of squares (int64: 128-bit sums; float32:
 * a value is +-M 2**(e - 1) times 2**-149, M its 24-bit significand, e its exponent field (1 for
 * subnormals), so the sums are per-e sums of M and M**2, shifted into place at the end), and the
 * log-bucket sketch's counts: the bucket of |x| is the index of the first bound >= |x| in
 * ``bounds`` (sketches._BOUNDS: a guess from log(), then set exactly against the table, the same
 * index as sketches.bucket_keys' searchsorted), counted per sign in a dense table touched only
 * where values fall. */
typedef struct {
    const double *bounds;
    Py_ssize_t top;
    double inv_log, low;  /* low: the key of bounds[0] */
    const int32_t *slice; /* ex_slices' table for these bounds (NULL: none) */
} ExBounds;

typedef struct {             /* a number feature's count, extremes and sums (sum_numbers: a local, in registers) */
    int64_t values;           /* finite values */
    int64_t imin, imax;
    float fmin, fmax;
    unsigned __int128 ipos, ineg, isq; /* int64: sums of v >= 0, of |v| for v < 0, of v**2 (low 128 bits) */
    uint64_t isq_carry;                /* and its carries past 2**128 */
} ExSums;

typedef struct {
    const ExBounds *table;    /* the bucket bounds */
    int kind;                 /* 1 float32, 2 int64 */
    int64_t zeros;            /* zeros among the finite values */
    ExSums sums;
    int64_t *fsum;            /* float32: [256] signed sums of M per exponent field */
    uint64_t *fsq;            /* [2 * 256] sums of M**2: low and high words (two 64-bit adds: a
                                 128-bit one stalled every next value of the exponent) */
    int64_t *dense[2];        /* bucket counts by bound index: [0] positive, [1] negative (NULL until used) */
    Py_ssize_t lo[2], hi[2];  /* the indices used: [lo, hi] */
} ExAcc;

/* The count, minimum, maximum and sums of one value: the value as a double, for its bucket (``ex_pend``). */
static inline double ex_sum_int(ExSums *a, int64_t v) {
    if (!a->values || v < a->imin) a->imin = v;
    if (!a->values || v > a->imax) a->imax = v;
    a->values++;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) a->ineg += mag; else a->ipos += mag;
    unsigned __int128 sq = (unsigned __int128)mag * mag, before = a->isq;
    a->isq += sq;
    a->isq_carry += a->isq < before;
    return (double)v;
}

/* ... of one float32 (its bits; ``fsum``, ``fsq``: ExAcc's): the value as a double, NaN for NaN and the
 * infinities (left out of every number). */
static inline double ex_sum_float(ExSums *a, int64_t *fsum, uint64_t *fsq, uint32_t bits) {
    uint32_t field = (bits >> 23) & 0xFF;
    if (field == 0xFF) return NAN;
    float f;
    memcpy(&f, &bits, 4);
    if (!a->values || f < a->fmin) a->fmin = f;
    if (!a->values || f > a->fmax) a->fmax = f;
    a->values++;
    int64_t m = (int64_t)((bits & 0x7FFFFF) | (field ? 0x800000u : 0));
    int e = field ? (int)field : 1;
    fsum[e] += (bits >> 31) ? -m : m;
    uint64_t sq = (uint64_t)(m * m), low = fsq[2 * e] + sq;
    fsq[2 * e + 1] += low < sq;
    fsq[2 * e] = low;
    return (double)f;
}

/* Values summed but not yet counted in their buckets: counted a block at a time, every bucket's
 * index first, then the counts. A count's address comes from the long computation of its index;
 * counting each value as it came would make every later load wait for that store. */
#define EX_BLOCK 256
typedef struct {
    int n;
    ExAcc *acc[EX_BLOCK];
    double x[EX_BLOCK];
} ExPending;

/* Counts the block's values in their buckets: 0, or -1 when a table cannot be had. */
NATIVE_INTERNAL int ex_count_pending(ExPending *p);

/* ``x`` (ex_sum_int / ex_sum_float's value; NaN: none) into ``acc``'s buckets, now or with its block. */
static inline int ex_pend(ExPending *p, ExAcc *acc, double x) {
    if (isnan(x)) return 0;
    p->acc[p->n] = acc;
    p->x[p->n] = x;
    return ++p->n == EX_BLOCK ? ex_count_pending(p) : 0;
}

/* The slice table of ``t``'s bounds, or NULL (stats.c). */
NATIVE_INTERNAL const int32_t *ex_slices(const ExBounds *t);

/* One feature's sums as a Python tuple (stats.c), and its tables freed or kept for the next batch. */
NATIVE_INTERNAL PyObject *ex_acc_result(ExAcc *a);
NATIVE_INTERNAL void ex_acc_free(ExAcc *a);

/* The distinct-count sketch's hash of one value: the length and seed mixed in first; a value of 32
 * bytes or more then runs its 32-byte blocks through four independent lanes (xxHash64's round: a
 * text's bytes without one dependent finalizer per word), folded in one by one; then each
 * 8-byte little-endian word left (the last one zero-padded, always taken) through fmix64 (MurmurHash3's
 * finalizer, a bijection with full avalanche): cheaper than the split hash's BLAKE2b. */
#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
static inline uint64_t xxh_round(uint64_t acc, uint64_t w) {
    acc += w * XXH_P2;
    return ((acc << 31) | (acc >> 33)) * XXH_P1;
}

static inline uint64_t value_hash(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t h = fmix64(seed ^ 0x9E3779B97F4A7C15ULL ^ (uint64_t)n);
    if (n >= 32) {
        uint64_t v0 = h + XXH_P1 + XXH_P2, v1 = h + XXH_P2, v2 = h, v3 = h - XXH_P1;
        for (; n >= 32; p += 32, n -= 32) {
            v0 = xxh_round(v0, le64(p));
            v1 = xxh_round(v1, le64(p + 8));
            v2 = xxh_round(v2, le64(p + 16));
            v3 = xxh_round(v3, le64(p + 24));
        }
        h = fmix64(fmix64(fmix64(fmix64(h ^ v0) ^ v1) ^ v2) ^ v3);
    }
    for (; n >= 8; p += 8, n -= 8) h = fmix64(h ^ le64(p));
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    return fmix64(h ^ w);
}

#endif
