/* The shuffle's keyed permutation (shardprep.permutation).
 * Tests: tests/shardprep/test_planning.py (against the Python twin and numpy). */
#include "native.h"

/* feistel(values, keys, half, n, inverse): the keyed bijection of [0, n) of shardprep.permutation
 * (a balanced Feistel network on 2 * half bits, one round per 8-byte key, cycle-walked back into
 * [0, n)), or its inverse, applied in place to a writable buffer of uint64 values below n. */
static inline uint64_t feistel_rounds(uint64_t x, const uint64_t *k, Py_ssize_t r, unsigned half, uint64_t mask,
                                      int inverse) {
    uint64_t left = x >> half, right = x & mask, t;
    if (!inverse)
        for (Py_ssize_t j = 0; j < r; j++) { t = right; right = left ^ (fmix64(right ^ k[j]) & mask); left = t; }
    else
        for (Py_ssize_t j = r - 1; j >= 0; j--) { t = left; left = right ^ (fmix64(left ^ k[j]) & mask); right = t; }
    return (left << half) | right;
}

PyObject *py_feistel(PyObject *self, PyObject *args) {
    Py_buffer vals, keys;
    unsigned int half;
    unsigned long long n;
    int inverse;
    if (!PyArg_ParseTuple(args, "w*y*IKp", &vals, &keys, &half, &n, &inverse)) return NULL;
    PyObject *out = NULL;
    uint64_t *v = vals.buf;
    const uint64_t *k = keys.buf;
    Py_ssize_t m = vals.len / 8, r = keys.len / 8, *todo = NULL;
    int bad = vals.len % 8 || keys.len % 8 || half < 1 || half > 32 || (n > 0 && 2 * half < 64 && n > (1ULL << (2 * half)));
    for (Py_ssize_t i = 0; i < m && !bad; i++)
        if (v[i] >= n) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "feistel: a value outside [0, n), or a malformed key or width");
        goto done;
    }
    todo = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    if (!todo) { PyErr_NoMemory(); goto done; }
    const uint64_t mask = half == 32 ? 0xFFFFFFFFULL : (1ULL << half) - 1;
    Py_BEGIN_ALLOW_THREADS
    /* One walk step for every value, then again for those outside [0, n) (cycle walking), collected
     * without a branch: consecutive values' rounds overlap in the CPU, which a loop per value,
     * ending at a random count of steps, would keep apart. */
    Py_ssize_t left = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        v[i] = feistel_rounds(v[i], k, r, half, mask, inverse);
        todo[left] = i;
        left += v[i] >= n;
    }
    while (left) {
        Py_ssize_t still = 0;
        for (Py_ssize_t t = 0; t < left; t++) {
            Py_ssize_t i = todo[t];
            v[i] = feistel_rounds(v[i], k, r, half, mask, inverse);
            todo[still] = i;
            still += v[i] >= n;
        }
        left = still;
    }
    Py_END_ALLOW_THREADS
    out = Py_None;
    Py_INCREF(out);
done:
    PyMem_Free(todo);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&keys);
    return out;
}
