/* Keyed BLAKE2b with an 8-byte digest (RFC 7693), as hashlib.blake2b(digest_size=8, key=...): the
 * split hash, of one record and of a batch's records (their split indices).
 * Tests: tests/shardprep/test_framing.py (against hashlib; split_indices against planning.split_index). */
#include "native.h"

static const uint64_t B2_IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                                  0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                                  0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        a = a + b + x;                  \
        d = ROTR64(d ^ a, 32);          \
        c = c + d;                      \
        b = ROTR64(b ^ c, 24);          \
        a = a + b + y;                  \
        d = ROTR64(d ^ a, 16);          \
        c = c + d;                      \
        b = ROTR64(b ^ c, 63);          \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = le64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= t; /* messages here are far below 2**64 bytes: the high counter word stays 0 */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2_G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        B2_G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        B2_G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        B2_G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        B2_G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        B2_G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        B2_G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        B2_G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The 8-byte digest as a little-endian integer, for an 8-byte key. */
static uint64_t blake2b8(const uint8_t key[8], const uint8_t *p, size_t n) {
    uint64_t h[8];
    uint8_t block[128];
    memcpy(h, B2_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ (8ULL << 8) ^ 8ULL;
    memset(block, 0, 128);
    memcpy(block, key, 8);
    uint64_t t = 128;
    if (n == 0) {
        b2_compress(h, block, t, 1);
        return h[0];
    }
    b2_compress(h, block, t, 0);
    while (n > 128) {
        t += 128;
        b2_compress(h, p, t, 0);
        p += 128;
        n -= 128;
    }
    memset(block, 0, 128);
    memcpy(block, p, n);
    t += n;
    b2_compress(h, block, t, 1);
    return h[0];
}

PyObject *py_blake2b8(PyObject *self, PyObject *args) {
    Py_buffer data;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*L", &data, &seed)) return NULL;
    uint8_t key[8];
    uint64_t k = (uint64_t)seed;
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)(k >> (8 * i));
    uint64_t h = blake2b8(key, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(h);
}

/* split_indices(blob, starts, stops, seed, bounds) -> bytes: per record [starts[i], stops[i]) of
 * ``blob`` (int64 buffers), the first i with hash < bounds[i] (uint64 buffer), else len(bounds). */
PyObject *py_split_indices(PyObject *self, PyObject *args) {
    Py_buffer blob, starts, stops, bounds;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*y*y*Ly*", &blob, &starts, &stops, &seed, &bounds)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / 8, nb = bounds.len / 8;
    if (stops.len != starts.len || nb > 255) {
        PyErr_SetString(PyExc_ValueError, "split_indices: starts and stops differ in length, or too many splits");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out), key[8];
    const int64_t *a = starts.buf, *z = stops.buf;
    const uint64_t *t = bounds.buf;
    const uint8_t *base = blob.buf;
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)((uint64_t)seed >> (8 * i));
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (a[i] < 0 || z[i] < a[i] || z[i] > blob.len) {
            bad = 1;
            break;
        }
        uint64_t h = blake2b8(key, base + a[i], (size_t)(z[i] - a[i]));
        Py_ssize_t s = 0;
        while (s < nb && h >= t[s]) s++;
        w[i] = (uint8_t)s;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "split_indices: a record lies outside the blob");
    }
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    PyBuffer_Release(&bounds);
    return out;
}
