/* MinHash signatures of a batch of texts (shardprep.text.minhash).
 * Tests: tests/shardprep/text/test_minhash.py (against the module's numpy path, which is the twin:
 * fallback.minhash declines every batch). */
#include "native.h"
#include "stats.h"

#define MINHASH_MIX 0x9E3779B97F4A7C15ULL

/* A word byte: an ASCII letter or digit, or any byte of a non-ASCII UTF-8 character. */
static inline int minhash_word_byte(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* Each permutation's minimum of a * x + b (mod 2**32) over the shingles' hashes ``x``, into ``m``.
 * Compiled twice on x86-64 Linux with glibc (AVX2, and the baseline: an ifunc), chosen when the module loads. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
__attribute__((target_clones("avx2", "default")))
#endif
static void minhash_mins(const uint32_t *x, Py_ssize_t n, const uint32_t *a, const uint32_t *b, Py_ssize_t p,
                         uint32_t *m) {
    for (Py_ssize_t j = 0; j < p; j++) m[j] = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint32_t v = x[i];
        for (Py_ssize_t j = 0; j < p; j++) {
            uint32_t h = a[j] * v + b[j];
            m[j] = h < m[j] ? h : m[j];
        }
    }
}

/* One text's shingle hashes into ``sh`` (its word hashes into ``w``, room for len / 2 + 1 each):
 * the word ``k``-grams' hashes chained (h * MIX + next) and mixed, top 32 bits; a text of fewer
 * than ``k`` words (and at least one) has one shingle of all its words. Returns their count. */
static Py_ssize_t minhash_shingles(const uint8_t *p, Py_ssize_t len, int k, uint64_t seed, uint64_t *w,
                                   uint32_t *sh) {
    Py_ssize_t words = 0, i = 0;
    while (i < len) {
        while (i < len && !minhash_word_byte(p[i])) i++;
        if (i >= len) break;
        Py_ssize_t start = i;
        while (i < len && minhash_word_byte(p[i])) i++;
        w[words++] = value_hash(p + start, (size_t)(i - start), seed);
    }
    if (words == 0) return 0;
    Py_ssize_t count = words >= k ? words - k + 1 : 1, span = words >= k ? k : words;
    for (Py_ssize_t s = 0; s < count; s++) {
        uint64_t h = w[s];
        for (Py_ssize_t t = 1; t < span; t++) h = h * MINHASH_MIX + w[s + t];
        sh[s] = (uint32_t)(fmix64(h) >> 32);
    }
    return count;
}

/* minhash(data, offsets, a, b, shingle, seed) -> bytes: texts data[offsets[i]:offsets[i + 1]] (int64
 * offsets; lower-cased UTF-8), each one's ``len(a)`` uint32 minima of a[j] * x + b[j] over its
 * shingles' hashes x (all 0xFFFFFFFF for a text without a word), text after text. */
PyObject *py_minhash(PyObject *self, PyObject *args) {
    Py_buffer data, offs, abuf, bbuf;
    int k;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "y*y*y*y*iK", &data, &offs, &abuf, &bbuf, &k, &seed)) return NULL;
    PyObject *out = NULL;
    uint64_t *w = NULL;
    uint32_t *sh = NULL;
    Py_ssize_t n = offs.len / 8 - 1, p = abuf.len / 4, longest = 0;
    const int64_t *o = offs.buf;
    int bad = offs.len % 8 || n < 0 || abuf.len % 4 || abuf.len != bbuf.len || p < 1 || k < 1;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > data.len) bad = 1;
        else if (o[i + 1] - o[i] > longest) longest = o[i + 1] - o[i];
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "minhash: offsets not rising within the data, or malformed a, b or shingle");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 4 * p * (n > 0 ? n : 0));
    w = PyMem_Malloc(sizeof(uint64_t) * (size_t)(longest / 2 + 1));
    sh = PyMem_Malloc(sizeof(uint32_t) * (size_t)(longest / 2 + 1));
    if (!out || !w || !sh) {
        Py_CLEAR(out);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    uint32_t *sig = (uint32_t *)PyBytes_AS_STRING(out);
    const uint8_t *base = data.buf;
    const uint32_t *a = abuf.buf, *b = bbuf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t count = minhash_shingles(base + o[i], o[i + 1] - o[i], k, seed, w, sh);
        minhash_mins(sh, count, a, b, p, sig + i * p);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(w);
    PyMem_Free(sh);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&abuf);
    PyBuffer_Release(&bbuf);
    return out;
}
