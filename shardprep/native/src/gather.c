/* Records moved: a packed batch's records gathered in a given order, pieces scattered to their
 * places in another buffer, records interleaved from one piece of every column each, byte ranges of
 * an open file read back to back with pread(2).
 * Tests: tests/shardprep/native/test_layout.py. */
#include "native.h"

#include <errno.h>
#include <unistd.h>

/* gather(blob, ends, order) -> bytes: the records of a packed batch (record i is
 * blob[ends[i-1]:ends[i]], ``ends`` a uint64 buffer) in the order of ``order`` (int64 buffer of indices). */
PyObject *py_gather(PyObject *self, PyObject *args) {
    Py_buffer blob, ends, order;
    if (!PyArg_ParseTuple(args, "y*y*y*", &blob, &ends, &order)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ends.len / 8, m = order.len / 8;
    const uint64_t *e = ends.buf;
    const int64_t *o = order.buf;
    uint64_t total = 0, prev = 0;
    int bad = ends.len % 8 || order.len % 8;
    for (Py_ssize_t i = 0; i < n && !bad; prev = e[i], i++)
        if (e[i] < prev || e[i] > (uint64_t)blob.len) bad = 1;
    for (Py_ssize_t j = 0; j < m && !bad; j++) {
        if (o[j] < 0 || o[j] >= n) bad = 1;
        else total += e[o[j]] - (o[j] ? e[o[j] - 1] : 0);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "gather: ends not rising within the blob, or an index outside them");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *b = blob.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m; j++) {
        uint64_t a = o[j] ? e[o[j] - 1] : 0, z = e[o[j]];
        memcpy(w, b + a, (size_t)(z - a));
        w += z - a;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&order);
    return out;
}

/* scatter(blob, starts, lengths, dests, out): copies blob[starts[i]:starts[i] + lengths[i]] to
 * out[dests[i]:dests[i] + lengths[i]] for every i (int64 buffers), without the GIL: one piece's records
 * to their places in a shard, so that a piece's map can close before the next is opened. */
PyObject *py_scatter(PyObject *self, PyObject *args) {
    Py_buffer blob, starts, lengths, dests, dest;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &blob, &starts, &lengths, &dests, &dest)) return NULL;
    Py_ssize_t n = starts.len / 8;
    const int64_t *a = starts.buf, *l = lengths.buf, *d = dests.buf;
    int bad = starts.len % 8 || lengths.len != starts.len || dests.len != starts.len;
    for (Py_ssize_t i = 0; i < n && !bad; i++)
        bad = a[i] < 0 || l[i] < 0 || d[i] < 0 || a[i] > blob.len || l[i] > blob.len - a[i] || d[i] > dest.len ||
              l[i] > dest.len - d[i];
    if (!bad) {
        const uint8_t *from = blob.buf;
        uint8_t *to = dest.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) memcpy(to + d[i], from + a[i], (size_t)l[i]);
        Py_END_ALLOW_THREADS
    } else {
        PyErr_SetString(PyExc_ValueError, "scatter: starts, lengths and dests differ in length, or a piece lies outside "
                                          "blob or out");
    }
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&dests);
    PyBuffer_Release(&dest);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* interleave(columns) -> bytearray: ``columns`` is a sequence of (blob, starts, lengths), the last two
 * int64 buffers of one length n; record i is the concatenation over columns of
 * blob[starts[i]:starts[i] + lengths[i]], and the records are laid out back to back. */
PyObject *py_interleave(PyObject *self, PyObject *args) {
    PyObject *columns, *seq, *out = NULL;
    if (!PyArg_ParseTuple(args, "O", &columns)) return NULL;
    seq = PySequence_Fast(columns, "interleave: columns must be a sequence of (blob, starts, lengths)");
    if (!seq) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq), got = 0, n = -1;
    Py_buffer *bufs = PyMem_Calloc((size_t)(3 * k + 1), sizeof(Py_buffer));
    if (!bufs) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t total = 0;
    for (; got < k; got++) {
        Py_buffer *b = bufs + 3 * got;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, got), "y*y*y*", b, b + 1, b + 2)) goto done;
        Py_ssize_t m = b[1].len / 8;
        if (n < 0) n = m;
        if (b[1].len % 8 || b[2].len != b[1].len || m != n) {
            got++;
            PyErr_SetString(PyExc_ValueError, "interleave: starts and lengths of every column must be n int64 values");
            goto done;
        }
        const int64_t *a = b[1].buf, *l = b[2].buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (a[i] < 0 || l[i] < 0 || a[i] > b[0].len || l[i] > b[0].len - a[i]) {
                got++;
                PyErr_SetString(PyExc_ValueError, "interleave: a piece lies outside its blob");
                goto done;
            }
            total += (uint64_t)l[i];
        }
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t c = 0; c < k; c++) {
            const Py_buffer *b = bufs + 3 * c;
            size_t len = (size_t)((const int64_t *)b[2].buf)[i];
            memcpy(w, (const uint8_t *)b[0].buf + ((const int64_t *)b[1].buf)[i], len);
            w += len;
        }
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t i = 0; i < 3 * got; i++) PyBuffer_Release(bufs + i);
    PyMem_Free(bufs);
    Py_DECREF(seq);
    return out;
}

/* pread_records(fd, starts, lengths) -> bytearray: bytes [starts[i], starts[i] + lengths[i]) of the
 * open file ``fd``, back to back, read with pread(2), adjacent ranges in one call: only those bytes
 * are copied and no page of the file is mapped. A range past the end of the file is a ValueError. */
PyObject *py_pread_records(PyObject *self, PyObject *args) {
    int fd, err = 0;
    Py_buffer a, z;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "iy*y*", &fd, &a, &z)) return NULL;
    if (a.len % 8 || z.len != a.len) {
        PyErr_SetString(PyExc_ValueError, "pread_records: starts and lengths must be n int64 values each");
        goto done;
    }
    Py_ssize_t n = a.len / 8;
    const int64_t *s = a.buf, *l = z.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || l[i] > PY_SSIZE_T_MAX - total || s[i] > INT64_MAX - l[i]) {
            PyErr_SetString(PyExc_ValueError, "pread_records: a negative or too large start or length");
            goto done;
        }
        total += l[i];
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !err;) {
        int64_t off = s[i], len = l[i], got = 0;
        for (i++; i < n && s[i] == off + len; i++) len += l[i];
        while (got < len) {
            ssize_t r = pread(fd, w + got, (size_t)(len - got), (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                err = r < 0 ? errno : -1;
                break;
            }
            got += r;
        }
        w += len;
    }
    Py_END_ALLOW_THREADS
    if (err) {
        Py_CLEAR(out);
        if (err > 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        } else {
            PyErr_SetString(PyExc_ValueError, "pread_records: a range lies past the end of the file");
        }
    }
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&z);
    return out;
}
