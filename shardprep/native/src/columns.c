/* Statistics' columns: a batch of Examples -> per-feature values (shardprep.stats.columns), read with wire.h.
 * example_columns(blob, ends, names, kinds) -> (lengths, columns) or None. ``blob`` holds framed
 * TFRecords back to back (``ends``: uint64 end offsets), ``names`` a tuple of the schema's UTF-8
 * names in ascending byte order, ``kinds`` one byte each (0 bytes, 1 float32, 2 int64). ``lengths``:
 * int64 [record][feature], each record's number of values, -1 where it leaves the feature out;
 * ``columns[f]``: the values back to back (float32 or int64, native order), for strings a pair
 * (data, int64 end offsets from 0). The values are those ``example.decoder`` reads. None (the
 * caller decodes in Python) for anything the pipeline's own records never hold: a key or a list
 * given twice, values of another kind than the schema's, bytes the decoder refuses. Kind 3: bytes
 * given as their ``hash_values`` (uint64, seed 0) instead of their data, with the same offsets (a
 * string feature whose statistics keep only the distinct-count sketch: no copy of its bytes).
 * example_columns(blob, ends, names, kinds, bounds, inv_log, low): the same, but each number feature's
 * ``columns[f]`` is its sums (``ex_acc_result``, stats.c) instead of its values.
 * Tests: tests/shardprep/stats/test_columns.py (against the per-record decoder and statistics). */
#include "stats.h"
#include "wire.h"

typedef struct { const uint8_t *p; Py_ssize_t n; } ExName;


static int ex_cmp(const uint8_t *a, Py_ssize_t an, const uint8_t *b, Py_ssize_t bn) {
    int c = (an && bn) ? memcmp(a, b, (size_t)(an < bn ? an : bn)) : 0;
    return c ? c : (an > bn) - (an < bn);
}

/* a == b over n bytes: a loop for a short name (a call to memcmp cost more than the compare) */
static inline int ex_same(const uint8_t *a, const uint8_t *b, Py_ssize_t n) {
    if (n > 16) return !memcmp(a, b, (size_t)n);
    uint8_t d = 0;
    for (Py_ssize_t i = 0; i < n; i++) d |= a[i] ^ b[i];
    return !d;
}

static Py_ssize_t ex_lookup(const ExName *names, Py_ssize_t k, const uint8_t *key, Py_ssize_t len) {
    Py_ssize_t lo = 0, hi = k;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int c = ex_cmp(names[mid].p, names[mid].n, key, len);
        if (!c) return mid;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

/* jbuf_reserve in the Example walk, which runs without the GIL: taken to grow a buffer only (values
 * of one per record are reserved up front; a string column grows a few times a batch, until capped). */
static int ex_grow(JBuf *b, Py_ssize_t more) {
    PyGILState_STATE gil = PyGILState_Ensure();
    int got = jbuf_grow(b, more);
    PyGILState_Release(gil);
    return got;
}

static inline int ex_reserve(JBuf *b, Py_ssize_t more) {
    return b->obj && b->len + more <= b->cap ? 0 : ex_grow(b, more);
}

/* A copied string column's data, sized once its first EX_SAMPLE records are read: their bytes per
 * record for all ``n``, and a quarter more (a long text or a payload grown from a value's room
 * by doubling took the GIL at each step and copied what it held); 1, or -1 no memory. */
#define EX_SAMPLE 16
static int ex_size_columns(JBuf *col, const uint8_t *kinds, Py_ssize_t k, Py_ssize_t read, Py_ssize_t n) {
    for (Py_ssize_t f = 0; f < k; f++) {
        JBuf *data = col + 2 * f;
        if (kinds[f] || !data->obj) continue;
        Py_ssize_t cap = data->len + data->len / read * (n - read) / 4 * 5 + 64;
        if (cap <= data->cap) continue;
        PyGILState_STATE gil = PyGILState_Ensure();
        int failed = _PyBytes_Resize(&data->obj, cap) < 0;
        PyGILState_Release(gil);
        if (failed) return -1;
        data->cap = cap;
    }
    return 1;
}

/* One list over [pos, end) of kind ``kind`` (tag 0x0A/0x12/0x1A of Feature) into the buffers: 1, 0
 * refused, -1 no memory; *count: its number of values. */
static int ex_values(const uint8_t *b, uint64_t kind, Py_ssize_t pos, Py_ssize_t end, JBuf *vals, JBuf *offs,
                     int64_t *count, int hashed, ExAcc *acc, ExPending *pending) {
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!wire_field(b, &pos, end, &tag, &start, &stop)) return 0;
        if (kind == 0x0A) {
            if (tag != 0x0A) return 0;
            int64_t at;
            if (hashed) { /* its hash, and its end where its data would have been */
                if (ex_reserve(vals, 8) < 0 || ex_reserve(offs, 8) < 0) return -1;
                uint64_t h = value_hash(b + start, (size_t)(stop - start), 0);
                memcpy(JBUF_END(vals), &h, 8);
                vals->len += 8;
                memcpy(&at, JBUF_END(offs) - 8, 8);
                at += stop - start;
            } else {
                if (ex_reserve(vals, stop - start) < 0 || ex_reserve(offs, 8) < 0) return -1;
                memcpy(JBUF_END(vals), b + start, (size_t)(stop - start));
                vals->len += stop - start;
                at = (int64_t)vals->len;
            }
            memcpy(JBUF_END(offs), &at, 8);
            offs->len += 8;
            (*count)++;
        } else if (kind == 0x12) {
            Py_ssize_t from, m;
            if (!wire_floats(tag, &pos, end, start, stop, &from, &m)) return 0;
            if (acc) { /* summed as read (little-endian bytes, whatever the machine) */
                for (Py_ssize_t i = 0; i < m; i++)
                    if (ex_pend(pending, acc, ex_sum_float(&acc->sums, acc->fsum, acc->fsq, le32(b + from + 4 * i))) < 0) return -1;
                *count += m;
                continue;
            }
            if (ex_reserve(vals, 4 * m) < 0) return -1;
            uint8_t *w = JBUF_END(vals);
            memcpy(w, b + from, (size_t)(4 * m));
            if (!native_little_endian)
                for (Py_ssize_t i = 0; i < m; i++) {
                    uint8_t t = w[4 * i]; w[4 * i] = w[4 * i + 3]; w[4 * i + 3] = t;
                    t = w[4 * i + 1]; w[4 * i + 1] = w[4 * i + 2]; w[4 * i + 2] = t;
                }
            vals->len += 4 * m;
            *count += m;
        } else {
            Py_ssize_t i, to;
            if (!wire_ints(b, tag, &pos, end, start, stop, &i, &to)) return 0;
            while (i < to) {
                uint64_t x;
                int wide;
                if (!wire_varint(b, &i, to, &x, &wide)) return 0;
                if (acc) {
                    if (ex_pend(pending, acc, ex_sum_int(&acc->sums, (int64_t)x)) < 0) return -1;
                    (*count)++;
                    continue;
                }
                if (ex_reserve(vals, 8) < 0) return -1;
                int64_t v = (int64_t)x;
                memcpy(JBUF_END(vals), &v, 8);
                vals->len += 8;
                (*count)++;
            }
        }
    }
    return 1;
}

/* One Example [pos, end) as record ``r`` of ``n``: 1, 0 refused, -1 no memory. */
static int ex_record(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, const ExName *names, const uint8_t *kinds,
                     Py_ssize_t k, JBuf *col, int64_t *lengths, Py_ssize_t *next, ExAcc *acc, ExPending *pending) {
    Py_ssize_t prev = k; /* the feature read last (k: none yet) */
    static const uint64_t list_tag[4] = {0x0A, 0x12, 0x1A, 0x0A};
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!wire_field(b, &pos, end, &tag, &start, &stop) || tag != 0x0A) return 0;
        Py_ssize_t at = start;
        while (at < stop) { /* map entries */
            Py_ssize_t entry, entry_end, key = -1, key_end = 0, value = -1, value_end = 0, lo, hi;
            if (!wire_field(b, &at, stop, &tag, &entry, &entry_end) || tag != 0x0A) return 0;
            while (entry < entry_end) {
                if (!wire_field(b, &entry, entry_end, &tag, &lo, &hi)) return 0;
                if (tag == 0x0A && key < 0) { key = lo; key_end = hi; }
                else if (tag == 0x12 && value < 0) { value = lo; value_end = hi; }
                else return 0; /* a key or value given twice, or another field */
            }
            const uint8_t *kp = key < 0 ? (const uint8_t *)"" : b + key;
            /* a writer's records put their features in one order: the one that followed ``prev`` last */
            Py_ssize_t kn = key < 0 ? 0 : key_end - key, f = next[prev];
            if (f < 0 || names[f].n != kn || !ex_same(names[f].p, kp, kn)) {
                f = ex_lookup(names, k, kp, kn);
                if (f < 0) continue; /* a feature outside the schema (--extra-fields ignore never keeps one) */
                next[prev] = f;
            }
            prev = f;
            if (lengths[f] >= 0) return 0; /* the key given twice: the decoder keeps the last */
            int64_t count = 0;
            if (value >= 0) {
                int lists = 0;
                while (value < value_end) {
                    if (!wire_field(b, &value, value_end, &tag, &lo, &hi) || lists++) return 0;
                    if (tag != 0x0A && tag != 0x12 && tag != 0x1A) return 0;
                    if (tag != list_tag[kinds[f]]) { /* another kind: only as an empty list */
                        if (hi > lo) return 0;
                        continue;
                    }
                    int ok = ex_values(b, tag, lo, hi, col + 2 * f, col + 2 * f + 1, &count, kinds[f] == 3,
                                       acc && (kinds[f] == 1 || kinds[f] == 2) ? acc + f : NULL,
                                       pending);
                    if (ok != 1) return ok;
                }
            }
            lengths[f] = count;
        }
    }
    return 1;
}

PyObject *py_example_columns(PyObject *self, PyObject *args) {
    Py_buffer blob, ends_buf, kinds_buf, bounds_buf = {0};
    PyObject *names_obj, *bounds_obj = Py_None, *result = NULL;
    double inv_log = 0.0;
    Py_ssize_t low = 0;
    if (!PyArg_ParseTuple(args, "y*y*O!y*|Odn", &blob, &ends_buf, &PyTuple_Type, &names_obj, &kinds_buf, &bounds_obj,
                          &inv_log, &low)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names_obj), n = ends_buf.len / 8;
    const uint64_t *ends = ends_buf.buf;
    const uint8_t *kinds = kinds_buf.buf, *b = blob.buf;
    ExName *names = NULL;
    Py_ssize_t *next = NULL; /* by feature read last (k: none yet), the feature that followed it */
    ExPending pending = {0};
    JBuf *col = NULL;
    ExAcc *acc = NULL;
    ExBounds table = {NULL, 0, inv_log, (double)low, NULL};
    PyObject *lengths_obj = NULL;
    int ok = 1;
    if (bounds_obj != Py_None) {
        if (PyObject_GetBuffer(bounds_obj, &bounds_buf, PyBUF_SIMPLE) < 0) goto done;
        if (bounds_buf.len < 16 || bounds_buf.len % 8 || !(inv_log > 0.0)) {
            PyErr_SetString(PyExc_ValueError, "example_columns: float64 bounds (two or more), inv_log > 0");
            goto done;
        }
        table.bounds = bounds_buf.buf;
        table.top = bounds_buf.len / 8 - 1;
        table.slice = ex_slices(&table);
    }
    if (kinds_buf.len != k || ends_buf.len % 8) {
        PyErr_SetString(PyExc_ValueError, "example_columns: one kind per name, uint64 ends");
        goto done;
    }
    names = PyMem_Calloc((size_t)k + 1, sizeof(ExName));
    next = PyMem_Malloc(((size_t)k + 1) * sizeof(Py_ssize_t));
    col = PyMem_Calloc((size_t)(2 * k + 1), sizeof(JBuf));
    acc = table.bounds ? PyMem_Calloc((size_t)k + 1, sizeof(ExAcc)) : NULL;
    lengths_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * k * n));
    if (!names || !next || !col || !lengths_obj || (table.bounds && !acc)) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t f = 0; f <= k; f++) next[f] = -1;
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *name = PyTuple_GET_ITEM(names_obj, f);
        if (!PyBytes_Check(name) || kinds[f] > 3) {
            PyErr_SetString(PyExc_ValueError, "example_columns: names are bytes, kinds 0, 1, 2 or 3");
            goto done;
        }
        names[f].p = (const uint8_t *)PyBytes_AS_STRING(name);
        names[f].n = PyBytes_GET_SIZE(name);
        if (f && ex_cmp(names[f - 1].p, names[f - 1].n, names[f].p, names[f].n) >= 0) {
            PyErr_SetString(PyExc_ValueError, "example_columns: names not in strictly ascending order");
            goto done;
        }
        if (acc && (kinds[f] == 1 || kinds[f] == 2)) { /* summed as read: no column */
            acc[f].table = &table;
            acc[f].kind = kinds[f];
            if (kinds[f] == 1) {
                acc[f].fsum = PyMem_Calloc(256, sizeof(int64_t));
                acc[f].fsq = PyMem_Calloc(2 * 256, sizeof(uint64_t));
                if (!acc[f].fsum || !acc[f].fsq) { ok = -1; break; }
            }
            continue;
        }
        if (jbuf_reserve(col + 2 * f, kinds[f] == 1 ? 4 * n : 8 * n) < 0) { ok = -1; break; } /* a value each */
        if (!kinds[f] || kinds[f] == 3) { /* string offsets start with 0 */
            if (jbuf_reserve(col + 2 * f + 1, 8 * (n + 1)) < 0) { ok = -1; break; }
            memset(JBUF_END(col + 2 * f + 1), 0, 8);
            col[2 * f + 1].len = 8;
        }
    }
    int64_t *lengths = (int64_t *)PyBytes_AS_STRING(lengths_obj);
    if (ok == 1) {
        Py_BEGIN_ALLOW_THREADS /* the walk: the GIL only to grow a column (ex_reserve) */
        for (Py_ssize_t i = 0; i < k * n; i++) lengths[i] = -1;
        uint64_t prev = 0;
        for (Py_ssize_t r = 0; r < n && ok == 1; prev = ends[r], r++) {
            if (ends[r] < prev + 16 || ends[r] > (uint64_t)blob.len) { ok = 0; break; }
            ok = ex_record(b, (Py_ssize_t)prev + 12, (Py_ssize_t)ends[r] - 4, names, kinds, k, col, lengths + r * k,
                           next, acc, &pending);
            if (r + 1 == EX_SAMPLE && ok == 1 && n > EX_SAMPLE) ok = ex_size_columns(col, kinds, k, r + 1, n);
        }
        if (ok == 1 && ex_count_pending(&pending) < 0) ok = -1;
        Py_END_ALLOW_THREADS
    }
    if (ok < 0) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    if (!ok) { result = Py_None; Py_INCREF(result); goto done; }
    PyObject *columns = PyList_New(k);
    if (!columns) goto done;
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *item;
        if (acc && (kinds[f] == 1 || kinds[f] == 2)) {
            item = ex_acc_result(acc + f);
        } else {
            item = jbuf_take(col + 2 * f);
            if (item && (!kinds[f] || kinds[f] == 3)) {
                PyObject *offs = jbuf_take(col + 2 * f + 1);
                item = offs ? Py_BuildValue("(NN)", item, offs) : (Py_DECREF(item), NULL);
            }
        }
        if (!item) { Py_DECREF(columns); goto done; }
        PyList_SET_ITEM(columns, f, item);
    }
    result = Py_BuildValue("(ON)", lengths_obj, columns);
done:
    if (col)
        for (Py_ssize_t f = 0; f < 2 * k; f++) Py_XDECREF(col[f].obj);
    if (acc)
        for (Py_ssize_t f = 0; f < k; f++) ex_acc_free(acc + f);
    PyMem_Free(acc);
    PyMem_Free(col);
    PyMem_Free(names);
    PyMem_Free(next);
    Py_XDECREF(lengths_obj);
    if (bounds_buf.obj) PyBuffer_Release(&bounds_buf);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&ends_buf);
    PyBuffer_Release(&kinds_buf);
    return result;
}
