/* The statistics' sums: the bucket tables, a feature's sums as Python values, sum_numbers (a number
 * column summed as example_columns sums a feature while it reads it) and hash_values (the distinct-
 * count sketch's hash of each value of a column).
 * Tests: tests/shardprep/stats/test_columns.py, tests/shardprep/stats/test_sketches.py (against numpy and the
 * per-record statistics), the hash against the Python twin. */
#include "stats.h"

#define EX_LIMBS 11 /* 704 bits: a float32 square (48 bits) shifted by up to 506, summed over < 2**64 values */

/* A magnitude's slice: its double's exponent and first 8 significand bits, for the exponents from
 * float32's least subnormal (2**-149) to int64's largest (2**63). A slice is narrower (1/256) than the
 * gap between two bounds (sketches' gamma: 2%), so its values fall in the bucket of its lowest one or
 * the next: a table of the first bound >= each slice's lowest value, and one comparison. */
#define EX_SLICE_E0 (1023 - 149)
#define EX_SLICES ((63 + 149 + 1) * 256)
static int32_t *ex_slice_table;
static double ex_slice_of[4]; /* the bounds it was built for: top, inv_log, low, bounds[0] */

/* The slice table of ``t``'s bounds, built on first use (with the GIL) and never changed after, as
 * walks without the GIL read it; or NULL (other bounds than the first, no memory, or bounds too close
 * together for it): the guess in ex_bucket_index serves. */
const int32_t *ex_slices(const ExBounds *t) {
    double of[4] = {(double)t->top, t->inv_log, t->low, t->bounds[0]};
    if (ex_slice_table) return memcmp(of, ex_slice_of, sizeof of) ? NULL : ex_slice_table;
    if (t->inv_log > 255.0) return NULL; /* gaps under 1/256: two bounds could share a slice */
    int32_t *table = PyMem_RawMalloc(EX_SLICES * sizeof(int32_t));
    if (!table) return NULL;
    Py_ssize_t i = 0;
    for (int64_t k = 0; k < EX_SLICES; k++) {
        uint64_t u = (uint64_t)(EX_SLICE_E0 * 256 + k) << 44;
        double lowest;
        memcpy(&lowest, &u, 8);
        while (i < t->top && t->bounds[i] < lowest) i++;
        table[k] = (int32_t)i;
    }
    memcpy(ex_slice_of, of, sizeof of);
    ex_slice_table = table;
    return table;
}

static double ex_ln_table[256]; /* ln(1 + j / 256): the guess's table (module init) */

/* ln(m) of a positive normal double, from below within 1/256 (its exponent and the first 8 bits
 * of its significand): a guess of the bucket within one of it, as good as log()'s for the table
 * walk below, at a fraction of its cost. */
static inline double ex_ln_guess(double m) {
    uint64_t u;
    memcpy(&u, &m, 8);
    int e = (int)((u >> 52) & 0x7FF);
    if (!e) return log(m); /* subnormal doubles: never a float32's or an int64's magnitude */
    return (double)(e - 1023) * 0.6931471805599453 + ex_ln_table[(u >> 44) & 0xFF];
}

/* Bucket-count tables (one per feature and sign, ``top + 1`` counts)
 * are kept zeroed for the next batch, a few of them, rather than allocated and faulted in for every
 * batch: a batch touches a few pages of one, and allocating it is not free. A lock of their own
 * guards them (walks take them without the GIL). */
#define EX_SPARE 32
static int64_t *ex_spare[EX_SPARE];
static Py_ssize_t ex_spare_top[EX_SPARE], ex_spares;
static PyThread_type_lock ex_spare_lock; /* module init */

static int64_t *ex_dense_take(Py_ssize_t top) {
    int64_t *dense = NULL;
    PyThread_acquire_lock(ex_spare_lock, WAIT_LOCK);
    for (Py_ssize_t i = ex_spares; i-- > 0;)
        if (ex_spare_top[i] == top) {
            dense = ex_spare[i];
            ex_spares--;
            ex_spare[i] = ex_spare[ex_spares];
            ex_spare_top[i] = ex_spare_top[ex_spares];
            break;
        }
    PyThread_release_lock(ex_spare_lock);
    return dense ? dense : PyMem_RawCalloc((size_t)top + 1, sizeof(int64_t));
}

static void ex_dense_give(int64_t *dense, Py_ssize_t top, Py_ssize_t lo, Py_ssize_t hi) {
    if (!dense) return;
    memset(dense + lo, 0, (size_t)(hi - lo + 1) * sizeof(int64_t));
    PyThread_acquire_lock(ex_spare_lock, WAIT_LOCK);
    int kept = ex_spares < EX_SPARE;
    if (kept) {
        ex_spare[ex_spares] = dense;
        ex_spare_top[ex_spares++] = top;
    }
    PyThread_release_lock(ex_spare_lock);
    if (!kept) PyMem_RawFree(dense);
}

/* The index in the bounds of the first bound >= m (m > 0, finite). */
static inline Py_ssize_t ex_bucket_index(const ExBounds *t, double m) {
    const double *b = t->bounds;
    Py_ssize_t top = t->top;
    uint64_t u;
    memcpy(&u, &m, 8);
    uint64_t slice = (u >> 44) - (uint64_t)EX_SLICE_E0 * 256;
    if (t->slice && slice < EX_SLICES) {
        Py_ssize_t i = t->slice[slice];
        return i + (b[i] < m);
    }
    /* the key's ceil, within one: truncated (cheaper than ceil() without SSE4.1; set exactly below) */
    double g = ex_ln_guess(m) * t->inv_log - t->low + 1.0;
    Py_ssize_t i = g < 1.0 ? 1 : g > (double)top ? top : (Py_ssize_t)g;
    i += b[i] < m; /* the guess is within one bucket: set without branches (b[top] is inf: i stays <= top) */
    i -= b[i - 1] >= m;
    if (__builtin_expect((i < top && b[i] < m) || (i > 0 && b[i - 1] >= m), 0)) { /* never seen: walk to it */
        while (i < top && b[i] < m) i++;
        while (i > 0 && b[i - 1] >= m) i--;
    }
    return i;
}

static inline int ex_count(ExAcc *a, int side, Py_ssize_t i) {
    int64_t *dense = a->dense[side];
    if (__builtin_expect(!dense, 0)) {
        dense = a->dense[side] = ex_dense_take(a->table->top);
        if (!dense) return -1;
        a->lo[side] = a->hi[side] = i;
    }
    dense[i]++;
    Py_ssize_t lo = a->lo[side], hi = a->hi[side];
    a->lo[side] = i < lo ? i : lo;
    a->hi[side] = i > hi ? i : hi;
    return 0;
}

int ex_count_pending(ExPending *p) {
    Py_ssize_t index[EX_BLOCK];
    for (int j = 0; j < p->n; j++) /* -1: a zero */
        index[j] = p->x[j] == 0.0 ? -1 : ex_bucket_index(p->acc[j]->table, fabs(p->x[j]));
    for (int j = 0; j < p->n; j++) {
        if (index[j] < 0) p->acc[j]->zeros++;
        else if (ex_count(p->acc[j], signbit(p->x[j]) != 0, index[j]) < 0) return -1;
    }
    p->n = 0;
    return 0;
}

/* acc += v << shift (little-endian uint64 limbs; the sum never passes EX_LIMBS limbs). */
static void ex_add_shifted(uint64_t *acc, unsigned __int128 v, int shift) {
    int word = shift / 64, bit = shift % 64;
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64), part[3];
    part[0] = lo << bit;
    part[1] = bit ? (hi << bit) | (lo >> (64 - bit)) : hi;
    part[2] = bit ? hi >> (64 - bit) : 0;
    unsigned __int128 carry = 0;
    for (int i = word; i < EX_LIMBS; i++) {
        unsigned __int128 t = (unsigned __int128)acc[i] + carry + (i - word < 3 ? part[i - word] : 0);
        acc[i] = (uint64_t)t;
        carry = t >> 64;
        if (i - word >= 2 && !carry) break;
    }
}

/* One feature's sums: (values, min, max, total_pos, total_neg, squares, zeros, (lo, pos counts),
 * (lo, neg counts)); the three sums as little-endian unsigned bytes (the total is pos - neg; floats
 * scaled by 2**149, their squares by 2**298), the counts int64 by bound index from ``lo``. */
PyObject *ex_acc_result(ExAcc *a) {
    uint64_t pos[EX_LIMBS] = {0}, neg[EX_LIMBS] = {0}, sq[EX_LIMBS] = {0};
    PyObject *lo = NULL, *hi = NULL;
    if (a->kind == 2) {
        ex_add_shifted(pos, a->sums.ipos, 0);
        ex_add_shifted(neg, a->sums.ineg, 0);
        ex_add_shifted(sq, a->sums.isq, 0);
        ex_add_shifted(sq, a->sums.isq_carry, 128);
        if (a->sums.values) { lo = PyLong_FromLongLong(a->sums.imin); hi = PyLong_FromLongLong(a->sums.imax); }
    } else {
        for (int e = 1; e < 255; e++) {
            if (a->fsum[e] > 0) ex_add_shifted(pos, (unsigned __int128)a->fsum[e], e - 1);
            else if (a->fsum[e] < 0) ex_add_shifted(neg, (unsigned __int128)(-(a->fsum[e] + 1)) + 1, e - 1);
            unsigned __int128 squares = (unsigned __int128)a->fsq[2 * e + 1] << 64 | a->fsq[2 * e];
            if (squares) ex_add_shifted(sq, squares, 2 * (e - 1));
        }
        if (a->sums.values) { lo = PyFloat_FromDouble((double)a->sums.fmin + 0.0); hi = PyFloat_FromDouble((double)a->sums.fmax + 0.0); }
    }
    if (!a->sums.values) { lo = Py_None; hi = Py_None; Py_INCREF(lo); Py_INCREF(hi); }
    PyObject *buckets[2] = {NULL, NULL};
    for (int side = 0; side < 2; side++) {
        Py_ssize_t from = a->dense[side] ? a->lo[side] : 0, size = a->dense[side] ? a->hi[side] - from + 1 : 0;
        buckets[side] = Py_BuildValue("(ny#)", from, a->dense[side] ? (const char *)(a->dense[side] + from) : "",
                                      (Py_ssize_t)(8 * size));
    }
    PyObject *out = NULL;
    if (lo && hi && buckets[0] && buckets[1])
        out = Py_BuildValue("(LOOy#y#y#LOO)", (long long)a->sums.values, lo, hi, (const char *)pos, (Py_ssize_t)sizeof pos,
                            (const char *)neg, (Py_ssize_t)sizeof neg, (const char *)sq, (Py_ssize_t)sizeof sq,
                            (long long)a->zeros, buckets[0], buckets[1]);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(buckets[0]);
    Py_XDECREF(buckets[1]);
    return out;
}

void ex_acc_free(ExAcc *a) {
    PyMem_Free(a->fsum);
    PyMem_Free(a->fsq);
    for (int side = 0; side < 2; side++)
        if (a->dense[side]) ex_dense_give(a->dense[side], a->table->top, a->lo[side], a->hi[side]);
}

/* sum_numbers(values, kind, bounds, inv_log, low) -> the sums of ``ex_acc_result`` of a column of
 * number values (kind 1: float32, 2: int64, native order), as example_columns sums a feature's
 * values while it reads them (the column-wise readers' batches: shardprep.stats_columns.add). */
PyObject *py_sum_numbers(PyObject *self, PyObject *args) {
    Py_buffer vals, bounds;
    int kind;
    double inv_log;
    Py_ssize_t low;
    if (!PyArg_ParseTuple(args, "y*iy*dn", &vals, &kind, &bounds, &inv_log, &low)) return NULL;
    PyObject *result = NULL;
    ExBounds table = {bounds.buf, bounds.len / 8 - 1, inv_log, (double)low, NULL};
    ExAcc a;
    memset(&a, 0, sizeof a);
    a.table = &table;
    a.kind = kind;
    if ((kind != 1 && kind != 2) || vals.len % (kind == 1 ? 4 : 8) || bounds.len < 16 || bounds.len % 8 ||
        !(inv_log > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "sum_numbers: kind 1 (float32) or 2 (int64), float64 bounds, inv_log > 0");
        goto done;
    }
    table.slice = ex_slices(&table);
    if (kind == 1) {
        a.fsum = PyMem_Calloc(256, sizeof(int64_t));
        a.fsq = PyMem_Calloc(2 * 256, sizeof(uint64_t));
        if (!a.fsum || !a.fsq) { PyErr_NoMemory(); goto done; }
    }
    ExPending pending = {0};
    ExSums sums = {0}; /* summed in registers, then stored */
    const uint8_t *p = vals.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0, n = vals.len / (kind == 1 ? 4 : 8); i < n && ok; i++) {
        double x;
        if (kind == 1) {
            uint32_t bits;
            memcpy(&bits, p + 4 * i, 4);
            x = ex_sum_float(&sums, a.fsum, a.fsq, bits);
        } else {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            x = ex_sum_int(&sums, v);
        }
        ok = ex_pend(&pending, &a, x) == 0;
    }
    a.sums = sums;
    ok = ok && ex_count_pending(&pending) == 0;
    Py_END_ALLOW_THREADS
    if (!ok) { PyErr_NoMemory(); goto done; }
    result = ex_acc_result(&a);
done:
    ex_acc_free(&a);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&bounds);
    return result;
}


/* hash_values(data, offsets, seed) -> bytes: ``value_hash`` of each value data[offsets[i]:offsets[i + 1]]
 * (int64 offsets), as uint64. */
PyObject *py_hash_values(PyObject *self, PyObject *args) {
    Py_buffer data, offs;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*y*L", &data, &offs, &seed)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = offs.len / 8 - 1;
    const int64_t *o = offs.buf;
    int bad = offs.len % 8 || n < 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++)
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > data.len) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "hash_values: offsets not rising within the data");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 * n);
    if (!out) goto done;
    uint64_t *w = (uint64_t *)PyBytes_AS_STRING(out);
    const uint8_t *base = data.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) w[i] = value_hash(base + o[i], (size_t)(o[i + 1] - o[i]), (uint64_t)seed);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    return out;
}

int stats_init(void) {
    for (int j = 0; j < 256; j++) ex_ln_table[j] = log(1.0 + j / 256.0);
    if (!ex_spare_lock && !(ex_spare_lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}
